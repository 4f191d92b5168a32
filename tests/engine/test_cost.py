"""What a change costs, counted (never timed: speed targets live in benchmarks/scale).

* a step reads what it needs once (an ``Observing`` step's ``read``), however many phases (inverse, apply,
  verify) use it;
* a simulated-kernel write costs what it changes: the state stays loaded in the process, and a
  reaction's changes are appended to ``kernel.jsonl``, not saved as the whole ``kernel.json``;
* the state a long-lived :class:`SimKernel` holds is the state on disk, after every kind of reaction.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.conftest import sim_host
from vgpukit.engine import Env
from vgpukit.engine.executor import execute
from vgpukit.engine.files import PutFile
from vgpukit.host import Host
from vgpukit.sim.build import init_sim
from vgpukit.sim.kernel import SimKernel
from vgpukit.sim.state import KernelState, sim_meta_dir

from .helpers import fresh


class CountingHost(Host):
    """A host that counts whole-file reads (a subclass of the door, not a patch of open)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads = 0

    def read_raw_opt(self, path: Path | str) -> str | None:
        self.reads += 1
        return super().read_raw_opt(path)


def test_put_file_reads_its_file_once(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "qemu-guest")
    host = CountingHost(sim, kernel=SimKernel(sim))
    target = host.etc("vgpukit", "x.conf")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("old\n")
    execute(Env(host, command="test"), [PutFile("/etc/vgpukit/x.conf", "new\n")])
    assert target.read_text() == "new\n"
    assert host.reads == 1  # the inverse's read serves apply and verify


def _kernel_files(sim: Path) -> tuple[int, int]:
    meta = sim_meta_dir(sim)
    log = meta / "kernel.jsonl"
    return os.stat(meta / "kernel.json").st_ino, len(log.read_text().splitlines()) if log.exists() else 0


def test_a_reaction_appends_its_changes_not_the_whole_state(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "t4-mdev")
    h = sim_host(sim)
    parent = next(iter(KernelState.load(sim).mdev_pools))
    types = h.pci_device(parent, "mdev_supported_types")
    type_id = sorted(os.listdir(types))[0]
    ino, lines = _kernel_files(sim)
    uuids = [f"00000000-0000-4000-8000-{i:012x}" for i in range(3)]
    for u in uuids:
        h.write(types / type_id / "create", u)
    ino_after, lines_after = _kernel_files(sim)
    assert ino_after == ino, "kernel.json was rewritten for a change of a few bytes"
    assert lines_after == lines + 2 * 3  # per reaction: its group number, the pool's counts
    held = h.kernel.state  # type: ignore[attr-defined]
    assert held is not None and KernelState.load(sim).data() == held.data()


def test_the_state_held_in_memory_is_the_state_on_disk(tmp_path: Path) -> None:
    """Every kind of state-changing reaction (group numbers, pool counts, driver ids) is saved."""
    sim = fresh(tmp_path, "t4-mdev")
    kernel = SimKernel(sim)
    h = Host(sim, kernel=kernel)
    state = KernelState.load(sim)
    parent = next(iter(state.mdev_pools))
    types = h.pci_device(parent, "mdev_supported_types")
    type_id = sorted(os.listdir(types))[0]
    u = "00000000-0000-4000-8000-000000000001"
    h.write(types / type_id / "create", u)
    h.write(h.path("sys", "bus", "mdev", "devices", u, "remove"), "1")
    h.write(h.pci_driver("vfio-pci", "new_id"), "1234 5678")
    h.write(h.pci_driver("vfio-pci", "remove_id"), "1234 5678")
    h.write(h.pci_driver("vfio-pci", "new_id"), "abcd ef01")
    assert kernel.state is not None
    on_disk = KernelState.load(sim)
    assert on_disk.data() == kernel.state.data()
    assert on_disk.next_group == state.next_group + 1
    assert on_disk.driver_ids["vfio-pci"][0] == "abcd:ef01"


def test_another_process_change_is_seen(tmp_path: Path) -> None:
    """The held state is read again when the files' stamp changed (another command wrote)."""
    sim = tmp_path / "host"
    init_sim(sim, "t4-mdev")
    first, second = SimKernel(sim), SimKernel(sim)
    h1, h2 = Host(sim, kernel=first), Host(sim, kernel=second)
    h1.write(h1.pci_driver("vfio-pci", "new_id"), "1234 5678")
    h2.write(h2.pci_driver("vfio-pci", "new_id"), "abcd ef01")  # second loads the state first wrote
    h1.write(h1.pci_driver("vfio-pci", "remove_id"), "abcd ef01")  # first sees what second wrote
    assert KernelState.load(sim).driver_ids["vfio-pci"][:1] == ["1234:5678"]


def test_an_nvml_call_saves_its_gpu_not_the_whole_driver_state(tmp_path: Path) -> None:
    """The simulated driver appends the GPU a call changed; its held state is the state on disk."""
    from vgpukit.sim.nvml import SimNvml
    from vgpukit.sim.nvml_state import Store

    sim = fresh(tmp_path, "hgx-a100")
    meta = sim_meta_dir(sim)
    nvml, other = SimNvml(sim), SimNvml(sim)
    ino = os.stat(meta / "nvml.json").st_ino
    nvml.set_mig_mode(0, True)
    nvml.reset_gpu(0)
    gi = nvml.create_gpu_instance(0, nvml.gi_profiles(0)[0].id)
    assert os.stat(meta / "nvml.json").st_ino == ino, "nvml.json was rewritten for one GPU's change"
    assert len((meta / "nvml.0.jsonl").read_text().splitlines()) == 3
    assert [g.id for g in other.gpu_instances(0)] == [gi.id]  # another process sees the lines
    other.destroy_gpu_instance(0, gi.id)
    assert nvml.gpu_instances(0) == []  # and this one sees the other's change
    with Store(sim).locked(write=False) as on_disk:
        assert nvml.store.state is not None and on_disk["gpus"] == nvml.store.state["gpus"]
