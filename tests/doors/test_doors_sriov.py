"""The SR-IOV / binding rules through every door: same refusal, same exit code, same message, host unchanged.

Each row is one rule of vgpukit/sriov/planner.py on a simulated host: the area command's argv (None
where no area command can say it: a ``match:`` selector) and the same request as a host config, run
through ``apply``, the node agent's apply and the Ansible module (tests/doors/harness.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.doors import harness

NO_VFIO = str(Path(__file__).with_name("no-vfio-pci.yaml"))  # qemu-guest without vfio-pci loaded
CONSOLE, BMC_BRIDGE, ROOT_PORT = "0000:02:00.0", "0000:01:00.0", "0000:00:1c.0"  # t4-mdev
NIC0 = "0000:05:00.0"  # hgx-a100


@dataclass(frozen=True)
class Row:
    rule: str
    profile: str
    area: list[str] | None  # the area command (None: only a host config can ask this)
    config: str  # the config's body (YAML)
    code: int
    kind: str
    says: str  # part of the message every door shows
    setup: list[list[str]] = field(default_factory=list)  # commands run first (not compared)


ROWS = [
    Row(
        "console VGA to vfio-pci",
        "t4-mdev",
        ["bind", CONSOLE, "--driver", "vfio-pci"],
        f"vfio:\n  - device: '{CONSOLE}'",
        4,
        "in-use",
        f"cannot move {CONSOLE}: it is the console display device (boot_vga); moving it takes the console away",
    ),
    Row(
        "console VGA selected by a match (the BMC's bridge it also matches is no candidate)",
        "t4-mdev",
        None,
        "vfio:\n  - match: ASPEED",
        4,
        "in-use",
        f"cannot move {CONSOLE}: it is the console display device (boot_vga)",
    ),
    Row(
        "PCI bridge to vfio-pci",
        "t4-mdev",
        ["bind", BMC_BRIDGE, "--driver", "vfio-pci"],
        f"vfio:\n  - device: '{BMC_BRIDGE}'",
        5,
        "unsupported",
        f"cannot move {BMC_BRIDGE} to vfio-pci: it is a PCI-to-PCI bridge (header type 1)",
    ),
    Row(
        "root port to vfio-pci, forced (force never overrides the header type)",
        "t4-mdev",
        ["bind", ROOT_PORT, "--driver", "vfio-pci", "--force"],
        f"vfio:\n  - {{device: '{ROOT_PORT}', force: true}}",
        5,
        "unsupported",
        f"cannot move {ROOT_PORT} to vfio-pci: it is a PCI-to-PCI bridge (header type 1)",
    ),
    Row(
        "a match that selects only a bridge",
        "t4-mdev",
        None,
        "vfio:\n  - match: '1a03:1150'",
        5,
        "unsupported",
        f"match 1a03:1150 selects no device vfio-pci can take: cannot move {BMC_BRIDGE} to vfio-pci",
    ),
    Row(
        "device in use to vfio-pci",
        "hgx-a100",
        ["bind", NIC0, "--driver", "vfio-pci"],
        f"vfio:\n  - device: '{NIC0}'",
        4,
        "in-use",
        f"cannot move {NIC0}: it is in use (held open by pid",
        [["sim", "hold", NIC0, "--vm", "vm1"]],
    ),
    Row(
        "VF in use to vfio-pci",
        "hgx-a100",
        ["bind", "0000:05:00.3", "--driver", "vfio-pci"],
        "vfio:\n  - device: '0000:05:00.3'",
        4,
        "in-use",
        "cannot move 0000:05:00.3: it is in use (held open by pid",
        [["sriov", "enable", "nic0", "--vfs", "2"], ["sim", "hold", "0000:05:00.3", "--vm", "vm1"]],
    ),
    Row(
        "vfio-pci not loaded (bind)",
        NO_VFIO,
        ["bind", "0000:00:02.0", "--driver", "vfio-pci"],
        "vfio:\n  - device: '0000:00:02.0'",
        3,
        "not-found",
        "driver vfio-pci is not loaded",
    ),
    Row(
        "vfio-pci not loaded (VFs)",
        NO_VFIO,
        ["sriov", "enable", "nvme0", "--vfs", "2", "--driver", "vfio-pci"],
        "sriov:\n  - {device: nvme0, vfs: 2, driver: vfio-pci}",
        3,
        "not-found",
        "driver vfio-pci is not loaded",
    ),
    Row(
        "VF count change would destroy VFs in use",
        "hgx-a100",
        ["sriov", "enable", "nic0", "--vfs", "2"],
        "sriov:\n  - {device: nic0, vfs: 2}",
        4,
        "in-use",
        f"changing {NIC0} from 4 to 2 VFs (through 0) would destroy VFs of {NIC0} that are in use: 0000:05:00.5",
        [["sriov", "enable", "nic0", "--vfs", "4"], ["sim", "hold", "0000:05:00.5", "--vm", "vm1"]],
    ),
    Row(
        "disabling SR-IOV would destroy VFs in use",
        "hgx-a100",
        ["sriov", "disable", "nic0"],
        "sriov:\n  - {device: nic0, vfs: 0}",
        4,
        "in-use",
        f"disabling SR-IOV on {NIC0} would destroy VFs of {NIC0} that are in use: 0000:05:00.2",
        [["sriov", "enable", "nic0", "--vfs", "2"], ["sim", "hold", "0000:05:00.2", "--vm", "vm1"]],
    ),
    Row(
        "SR-IOV enable on a PF the health layer finds unusable (docs/health.md)",
        "h100-vgpu",
        ["sriov", "enable", "gpu0", "--vfs", "8"],
        "sriov:\n  - {device: gpu0, vfs: 8}",
        6,
        "unusable",
        "gpu0 (0000:41:00.0) is unusable: PCIe AER fatal errors counted",
        [["sim", "fault", "aer", "0000:41:00.0", "fatal"]],
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.rule for r in ROWS])
def test_every_door_gives_the_same_refusal_and_changes_nothing(row: Row, tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", row.profile)
    for args in row.setup:
        r = invoke(sim, *args)
        assert r.exit_code == 0, (args, r.stderr)
    for answer in harness.every_door(sim, tmp_path, row.config, row.area):
        assert (answer.code, answer.kind) == (row.code, row.kind), answer
        assert row.says in answer.message, answer
