"""What only the simulated driver exposes: mode changes, resets, clients, faults, device nodes."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import invoke
from vgpukit.errors import InvalidInput
from vgpukit.nvml.errors import NvmlInUse, NvmlNotSupported, NvmlUnknown
from vgpukit.nvml.table import model, models
from vgpukit.sim import nvml as simdrv
from vgpukit.sim.nvml import SimNvml

from .mig_helpers import enable_now


def test_ampere_mode_change_is_pending_until_reset(hgx: Path) -> None:
    n = SimNvml(hgx)
    assert n.mig_mode(0) == (False, False)
    assert n.set_mig_mode(0, True) is False
    assert n.mig_mode(0) == (False, True)
    assert n.gpus()[0].mode_change_pending
    with pytest.raises(NvmlNotSupported):
        n.gpu_instances(0)
    n.reset_gpu(0)
    assert n.mig_mode(0) == (True, True)
    assert n.gpu_instances(0) == []


def test_hopper_mode_change_is_immediate_unless_held(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["H100-SXM5-80GB", "H100-SXM5-80GB"])
    n = SimNvml(sim)
    assert n.set_mig_mode(0, True) is True
    assert n.mig_mode(0) == (True, True)
    simdrv.add_client(sim, 1, "python3")
    assert n.set_mig_mode(1, True) is False
    assert n.mig_mode(1) == (False, True)


def test_reset_refused_while_clients_hold_the_gpu(hgx: Path) -> None:
    n = SimNvml(hgx)
    n.set_mig_mode(0, True)
    pid = simdrv.add_client(hgx, 0, "nvidia-persistenced")
    with pytest.raises(NvmlInUse, match="nvidia-persistenced"):
        n.reset_gpu(0)
    simdrv.remove_client(hgx, pid)
    n.reset_gpu(0)
    assert n.mig_mode(0) == (True, True)


def test_not_mig_capable(sim_factory: Callable[..., Path]) -> None:
    n = SimNvml(sim_factory([None]))
    assert not n.gpus()[0].mig_capable
    with pytest.raises(NvmlNotSupported):
        n.mig_mode(0)
    with pytest.raises(NvmlNotSupported):
        n.set_mig_mode(0, True)


def test_disable_with_instances_and_destroy_with_process_are_in_use(hgx: Path) -> None:
    enable_now(hgx, 0)
    n = SimNvml(hgx)
    gi = n.create_gpu_instance(0, 9, 0)
    with pytest.raises(NvmlInUse):
        n.set_mig_mode(0, False)
    simdrv.add_client(hgx, 0, "trainer", gi=gi.id)
    with pytest.raises(NvmlInUse, match="trainer"):
        n.destroy_gpu_instance(0, gi.id)


def test_gi_ids_are_the_driver_placement_ids(hgx: Path) -> None:
    enable_now(hgx, 0)
    n = SimNvml(hgx)
    ids = {(p, s): n.create_gpu_instance(0, p, s).id for p, s in ((9, 4), (14, 0), (19, 2), (19, 3))}
    assert ids == {(9, 4): 2, (14, 0): 3, (19, 2): 9, (19, 3): 10}


def test_injected_fault_fires_once_on_the_nth_call(hgx: Path) -> None:
    enable_now(hgx, 0)
    n = SimNvml(hgx)
    simdrv.add_fault(hgx, "CreateGpuInstance", "UNKNOWN", nth=2)
    n.create_gpu_instance(0, 19, 0)
    with pytest.raises(NvmlUnknown):
        n.create_gpu_instance(0, 19, 1)
    assert simdrv.list_faults(hgx) == []
    n.create_gpu_instance(0, 19, 1)
    assert len(n.gpu_instances(0)) == 2
    with pytest.raises(InvalidInput):
        simdrv.add_fault(hgx, "Bogus")


def test_caps_nodes_follow_instances(hgx: Path) -> None:
    enable_now(hgx, 1)
    n = SimNvml(hgx)
    gi = n.create_gpu_instance(1, 9, 4)  # GI id 2 on GPU minor 1
    ci = n.create_compute_instance(1, gi.id, 2)
    caps = hgx / "dev" / "nvidia-caps"
    gi_minor, ci_minor = 3 + 135 + 9 * 2, 3 + 135 + 9 * 2 + 1 + ci.id
    assert sorted(p.name for p in caps.iterdir()) == sorted(
        ["nvidia-cap1", "nvidia-cap2", f"nvidia-cap{gi_minor}", f"nvidia-cap{ci_minor}"]
    )
    minors = (hgx / "proc" / "driver" / "nvidia-caps" / "mig-minors").read_text().splitlines()
    assert f"gpu1/gi2/access {gi_minor}" in minors
    assert f"gpu1/gi2/ci{ci.id}/access {ci_minor}" in minors
    n.destroy_compute_instance(1, gi.id, ci.id)
    n.destroy_gpu_instance(1, gi.id)
    assert list(caps.iterdir()) == []


def test_config_and_monitor_nodes_stay_while_any_gpu_has_an_instance(hgx: Path) -> None:
    """The driver keeps nvidia-cap1/2 while some GPU has an instance, whichever process made it; a
    change by another process is seen even when the directory's mtime did not move (file times
    advance by clock ticks of a few ms: two changes in one tick leave the same mtime)."""
    caps = hgx / "dev" / "nvidia-caps"
    enable_now(hgx, 0)
    enable_now(hgx, 1)
    n, other = SimNvml(hgx), SimNvml(hgx)
    gi0 = n.create_gpu_instance(0, 19)
    gi1 = other.create_gpu_instance(1, 19)
    n.destroy_gpu_instance(1, gi1.id)  # GPU 0 still has one
    assert sorted(p.name for p in caps.iterdir()) == ["nvidia-cap1", f"nvidia-cap{3 + 9 * gi0.id}", "nvidia-cap2"]
    tick = os.stat(caps).st_mtime_ns
    other.destroy_gpu_instance(0, gi0.id)
    os.utime(caps, ns=(tick, tick))  # in the same tick
    assert list(caps.iterdir()) == []
    gi1 = n.create_gpu_instance(1, 19)
    now = sorted(p.name for p in caps.iterdir())
    assert now == sorted(["nvidia-cap1", "nvidia-cap2", f"nvidia-cap{138 + 9 * gi1.id}"])


def _create_one(args: tuple[str, int]) -> int:
    return SimNvml(Path(args[0])).create_gpu_instance(0, 19).start


def test_concurrent_commands_see_one_driver(hgx: Path) -> None:
    enable_now(hgx, 0)
    # spawn, not fork: the session has threads (the real-kernel guest's, the shipping builds'); a fork of
    # a process with threads can copy a lock another thread held, and the child waits for it forever
    # (a whole-suite run hung here, its pool worker in futex_wait)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        starts = pool.map(_create_one, [(str(hgx), i) for i in range(7)])
    assert sorted(starts) == list(range(7))
    assert len(SimNvml(hgx).gpu_instances(0)) == 7


def test_sim_fault_and_client_commands(hgx: Path) -> None:
    r = invoke(hgx, "sim", "fault", "add", "CreateGpuInstance", "--nth", "2", "--error", "IN_USE")
    assert r.exit_code == 0, r.stderr
    assert simdrv.list_faults(hgx)[0]["code"] == 19
    r = invoke(hgx, "sim", "client", "add", "0", "nvidia-persistenced")
    pid = int(r.stdout)
    assert [p.name for p in SimNvml(hgx).processes(0)] == ["nvidia-persistenced"]
    assert invoke(hgx, "sim", "client", "remove", str(pid)).exit_code == 0
    assert invoke(hgx, "sim", "fault", "clear").exit_code == 0
    assert simdrv.list_faults(hgx) == [] and SimNvml(hgx).processes(0) == []


@pytest.mark.parametrize("key", sorted(models()))
def test_every_model_table_is_consistent_and_drivable(key: str, sim_factory: Callable[..., Path]) -> None:
    m = model(key)
    assert len({p.name for p in m.profiles}) == len(m.profiles) == len({p.id for p in m.profiles})
    assert all(s + p.size <= m.memory_slots for p in m.profiles for s in p.starts)
    assert max(p.slices for p in m.profiles) == m.compute_slices
    assert model(None, m.product_names[0]) is m
    sim = sim_factory([key])
    enable_now(sim, 0)
    n = SimNvml(sim)
    full = max(m.profiles, key=lambda p: p.slices)
    gi = n.create_gpu_instance(0, full.id)
    assert (gi.start, gi.size) == (0, m.memory_slots) and gi.id == 0
    n.destroy_gpu_instance(0, gi.id)
    small = min(m.profiles, key=lambda p: (p.size, p.media))
    assert n.remaining_capacity(0, small.id) == small.max_count
