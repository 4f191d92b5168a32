"""What ``sriov enable --driver vfio-pci`` reads, counted through the host door (never timed).

Each sysfs attribute (the PF's and every VF's) and bind record is read at most once per command,
except a read-back of what a write changed, to verify it (the driver link after drivers_probe); what
the command wrote itself (driver_override, autoprobe, the bind record) is known, not read back. Each
VF's links: at most 3 reads.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests.sriov.test_sriov_sim import NIC0
from vgpukit.engine import Env, execute
from vgpukit.holders import OpenFiles
from vgpukit.host import Host
from vgpukit.pci import Scan
from vgpukit.sim.kernel import SimKernel
from vgpukit.sriov import planner
from vgpukit.sriov.model import read_pf
from vgpukit.sriov.steps import BindDriver, observed


class CountingHost(Host):
    """The host door, counting what it reads per path (a subclass of the door, not a patch of open)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: Counter[str] = Counter()
        self.links: Counter[str] = Counter()
        self.rereads: list[str] = []
        self.written: set[str] = set()
        self.vfs: set[str] = set()

    def _note(self, path: Path | str) -> None:
        shown = self.display(path)
        self.reads[shown] += 1
        if self.reads[shown] > 1 and shown not in self.written:
            self.rereads.append(shown)
        self.written.discard(shown)  # one read-back per write

    def _read_bytes(self, path: Path | str, limit: int) -> bytes:
        self._note(path)
        return super()._read_bytes(path, limit)

    def readlink(self, path: Path | str) -> str | None:
        self._note(path)
        self.links[self.display(path)] += 1
        return super().readlink(path)

    def write(self, path: Path, value: str) -> None:
        self.written.add(self.display(path))
        if value in self.vfs:  # drivers_probe / unbind: the device's driver link is what changes
            self.written.add(self.display(self.pci_device(value, "driver")))
        super().write(path, value)

    def write_file(self, path: Path, text: str, mode: int = 0o644) -> None:
        self.written.add(self.display(path))
        super().write_file(path, text, mode)


def test_enable_to_vfio_reads_each_attribute_once(sim_dir: Path) -> None:
    host = CountingHost(sim_dir, kernel=SimKernel(sim_dir))
    env = Env(host, command="test")
    scan = Scan(host)
    facts = planner.Facts(host, scan)
    steps = planner.plan(facts, planner.EnableRequest(NIC0, 16, "vfio-pci", timeout=5))
    host.vfs = {s.bdf for s in steps if isinstance(s, BindDriver)}
    outcome = execute(env, steps)
    # the command's report: the PF as it is now, from what the steps observed
    after = read_pf(host, NIC0, OpenFiles(host), scan=Scan(host), known=observed(outcome), before=scan.device(NIC0))
    assert after.num_vfs == 16 and {v.driver for v in after.vfs} == {"vfio-pci"}
    assert {v.driver_override for v in after.vfs} == {"vfio-pci"}
    assert {v.original_driver for v in after.vfs} == {None}
    assert len(host.vfs) == 16
    vf_rereads = [p for p in host.rereads if p.startswith("/sys/") or p.startswith("/run/vgpukit/bind/")]
    assert vf_rereads == [], f"read again without a write in between: {sorted(set(vf_rereads))[:8]}"
    # stricter: what the command wrote itself (override, record) is not read back but known
    again = {p: n for p, n in host.reads.items() if any(v in p for v in host.vfs) and n > 1}
    assert all(p.endswith("/driver") and n == 2 for p, n in again.items()), sorted(again.items())[:4]
    for vf in after.vfs:
        per_vf = sum(n for p, n in host.links.items() if vf.bdf in p)
        assert per_vf <= 3, (vf.bdf, {p: n for p, n in host.links.items() if vf.bdf in p})


def test_enable_on_a_device_health_does_not_watch_opens_no_nvml(sim_dir: Path) -> None:
    """A NIC's PF is no device the health layer watches: planning its VFs asks no NVML and reads no
    health record (before, every enable loaded NVML and looked at every GPU's health)."""

    def no_nvml() -> None:
        raise AssertionError("NVML opened to plan VFs of a NIC")

    facts = planner.Facts(Host(sim_dir), nvml=no_nvml)
    steps = planner.plan(facts, planner.EnableRequest(NIC0, 4, "vfio-pci", timeout=5))
    assert steps and facts.exclusions.why(NIC0) is None
