"""The attach rules (vgpukit/attach/planner.py) through the doors that reach them.

No host config reaches attach (a vgpukit.host/v1 config has no domain section: ``apply``, the node
agent and the Ansible module cannot give a device to a VM; docs/engine.md, "Doors"). The host rules
of attach are also checked by ``render domain``, which renders the definition anyway and says the
refusal as a warning: the same words, the host unchanged. Each row: ``attach`` refuses (exit, kind,
message), ``render domain --device`` warns with exactly the line ``attach`` shows (message and hint).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.attach.conftest import BAD_GPU, FakeHost, fake, host_tree  # noqa: F401 (fixtures)
from tests.conftest import invoke, make_sim
from tests.doors import harness

CONSOLE = "0000:02:00.0"  # t4-mdev: the BMC's VGA controller, boot_vga


def both_doors(root: Path, device: str, sim: bool = True) -> tuple[harness.Answer, list[str]]:
    """``attach vm1 DEVICE`` and ``render domain --device DEVICE`` on the host at ``root`` (a simulated
    host, else ``--root``); the host unchanged by either."""
    where = [] if sim else ["--root", str(root)]
    before = harness.host_state(root)
    refused = harness.area(root if sim else None, [*where, "attach", "vm1", device])
    render = ["render", "domain", "--name", "v", "--memory", "1G", "--vcpus", "1", "--device", device, "--json"]
    r = invoke(root if sim else None, *where, *render)
    assert r.exit_code == 0, r.stderr
    assert harness.host_state(root) == before
    return refused, json.loads(r.stdout)["warnings"]


def test_the_console_display_device(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "t4-mdev")
    refused, warnings = both_doors(sim, CONSOLE)
    assert (refused.code, refused.kind) == (4, "busy"), refused
    assert refused.message == f"cannot give {CONSOLE} to a VM: it is the console display device (boot_vga)"
    assert refused.line.removeprefix("vgpukit: error: ") in warnings


def test_a_non_viable_iommu_group(host_tree: FakeHost) -> None:  # noqa: F811
    refused, warnings = both_doors(host_tree.root, BAD_GPU, sim=False)
    assert (refused.code, refused.kind) == (4, "conflict"), refused
    assert refused.message.startswith("IOMMU group ") and " is not viable: " in refused.message
    assert refused.line.removeprefix("vgpukit: error: ") in warnings
