"""Behaviour of the NVML facade, written against the facade only.

It runs against the simulator, and against real NVML on a GPU host when
``VGPUKIT_REAL_NVML_GPU=<index>`` names a MIG-capable GPU with MIG enabled and no instances (the
tests create and destroy instances on it). Without that variable the real variant is not collected at
all (a CI run shows no skips); with it set, a host without an NVML driver is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vgpukit.nvml import GiProfile, Nvml
from vgpukit.nvml.errors import NvmlError, NvmlInsufficientResources, NvmlInUse, NvmlInvalidArgument
from vgpukit.sim.nvml import SimNvml

from .mig_helpers import enable_now

REAL_GPU = os.environ.get("VGPUKIT_REAL_NVML_GPU")
BACKENDS = ["sim-a100", "sim-h100", "pynvml-over-sim"] + (["real"] if REAL_GPU is not None else [])


@pytest.fixture(params=BACKENDS)
def dev(request: Any, sim_factory: Callable[..., Path]) -> Iterator[tuple[Nvml, int]]:
    if request.param == "real":
        index = str(REAL_GPU)
        from vgpukit.nvml.real import RealNvml

        real = RealNvml.try_open()
        if real is None:
            pytest.fail("VGPUKIT_REAL_NVML_GPU is set but this host has no NVML driver", pytrace=False)
        yield real, int(index)
        for gi in real.gpu_instances(int(index)):  # leave the GPU as found
            for ci in gi.compute_instances:
                real.destroy_compute_instance(int(index), gi.id, ci.id)
            real.destroy_gpu_instance(int(index), gi.id)
        return
    model = "A100-SXM4-40GB" if request.param == "sim-a100" else "H100-SXM5-80GB"
    sim = sim_factory([model])
    enable_now(sim, 0)
    if request.param == "pynvml-over-sim":  # the real backend's code, answered by the simulated driver
        from vgpukit.nvml.real import RealNvml

        from .sim_pynvml import Shim

        yield RealNvml(Shim(sim)), 0
        return
    yield SimNvml(sim), 0


def by_slices(n: Nvml, gpu: int, slices: int, size: int | None = None) -> GiProfile:
    for p in n.gi_profiles(gpu):
        if p.slices == slices and not p.media and (size is None or p.size == size):
            return p
    raise AssertionError(f"no {slices}-slice profile")


def test_profiles_are_consistent(dev: tuple[Nvml, int]) -> None:
    n, gpu = dev
    profs = n.gi_profiles(gpu)
    assert len({p.id for p in profs}) == len(profs)
    assert len({p.enum for p in profs}) == len(profs)
    slots = max(s + p.size for p in profs for s in p.starts)
    assert slots in (4, 8)
    for p in profs:
        assert p.starts and all(s % p.size == 0 or p.size > 2 for s in p.starts)
        assert p.max_count >= 1 and p.memory_mib > 0
        assert n.remaining_capacity(gpu, p.id) == (1 if p.media else min(p.max_count, len(p.starts)))
    assert {p.slices for p in profs} >= {1, 2, 4}


def test_explicit_placement_create_list_destroy(dev: tuple[Nvml, int]) -> None:
    n, gpu = dev
    p3 = by_slices(n, gpu, 3)
    gi = n.create_gpu_instance(gpu, p3.id, p3.starts[-1])
    assert (gi.profile_id, gi.start, gi.size) == (p3.id, p3.starts[-1], p3.size)
    assert [g.id for g in n.gpu_instances(gpu)] == [gi.id]
    assert n.remaining_capacity(gpu, p3.id) == 1
    n.destroy_gpu_instance(gpu, gi.id)
    assert n.gpu_instances(gpu) == []


def test_taken_or_overlapping_placement_is_insufficient_resources(dev: tuple[Nvml, int]) -> None:
    n, gpu = dev
    p3, p2 = by_slices(n, gpu, 3), by_slices(n, gpu, 2)
    n.create_gpu_instance(gpu, p3.id, 0)
    with pytest.raises(NvmlInsufficientResources):
        n.create_gpu_instance(gpu, p3.id, 0)
    with pytest.raises(NvmlInsufficientResources):
        n.create_gpu_instance(gpu, p2.id, 2)  # inside the 3g's four memory slots
    gi = n.create_gpu_instance(gpu, p2.id, 4)
    assert gi.start == 4


def test_invalid_start_is_rejected(dev: tuple[Nvml, int]) -> None:
    n, gpu = dev
    p2 = by_slices(n, gpu, 2)
    with pytest.raises((NvmlInvalidArgument, NvmlInsufficientResources)):
        n.create_gpu_instance(gpu, p2.id, 1)


def test_max_count_and_remaining_capacity(dev: tuple[Nvml, int]) -> None:
    n, gpu = dev
    p1 = by_slices(n, gpu, 1, size=1)
    for i in range(p1.max_count):
        assert n.remaining_capacity(gpu, p1.id) == p1.max_count - i
        n.create_gpu_instance(gpu, p1.id)
    assert n.remaining_capacity(gpu, p1.id) == 0
    with pytest.raises(NvmlInsufficientResources):
        n.create_gpu_instance(gpu, p1.id)
    assert len({g.id for g in n.gpu_instances(gpu)}) == p1.max_count


def test_driver_first_fit_fails_where_explicit_placement_fits(dev: tuple[Nvml, int]) -> None:
    """The MIG guide's example: -cgi 19,19,14,9 fails in that order; placements make it fit."""
    n, gpu = dev
    p1, p2, p3 = by_slices(n, gpu, 1, size=1), by_slices(n, gpu, 2), by_slices(n, gpu, 3)
    with pytest.raises(NvmlInsufficientResources):
        for p in (p1, p1, p2, p3):
            n.create_gpu_instance(gpu, p.id)
    for gi in n.gpu_instances(gpu):
        n.destroy_gpu_instance(gpu, gi.id)
    for p, start in ((p3, 4), (p2, 0), (p1, 2), (p1, 3)):
        n.create_gpu_instance(gpu, p.id, start)
    assert sorted(g.start for g in n.gpu_instances(gpu)) == [0, 2, 3, 4]


def test_compute_instances_and_mig_uuids(dev: tuple[Nvml, int]) -> None:
    n, gpu = dev
    p3 = by_slices(n, gpu, 3)
    gi = n.create_gpu_instance(gpu, p3.id, 0)
    cps = n.ci_profiles(gpu, gi.id)
    full = next(c for c in cps if c.full)
    one = next(c for c in cps if c.slices == 1)
    assert full.slices == 3 and one.max_count == 3
    a = n.create_compute_instance(gpu, gi.id, one.enum)
    b = n.create_compute_instance(gpu, gi.id, one.enum)
    assert a.uuid.startswith("MIG-") and b.uuid.startswith("MIG-") and a.uuid != b.uuid
    with pytest.raises(NvmlInsufficientResources):
        n.create_compute_instance(gpu, gi.id, full.enum)  # the 1c ones took two of three slices
    listed = n.gpu_instances(gpu)[0].compute_instances
    assert {c.uuid for c in listed} == {a.uuid, b.uuid}
    with pytest.raises(NvmlInUse):
        n.destroy_gpu_instance(gpu, gi.id)  # compute instances still exist
    n.destroy_compute_instance(gpu, gi.id, a.id)
    n.destroy_compute_instance(gpu, gi.id, b.id)
    n.destroy_gpu_instance(gpu, gi.id)
    assert n.gpu_instances(gpu) == []


def test_mig_uuid_is_new_after_recreation(dev: tuple[Nvml, int]) -> None:
    n, gpu = dev
    p = by_slices(n, gpu, 2)
    seen = set()
    for _ in range(2):
        gi = n.create_gpu_instance(gpu, p.id, 0)
        full = next(c for c in n.ci_profiles(gpu, gi.id) if c.full)
        ci = n.create_compute_instance(gpu, gi.id, full.enum)
        seen.add(ci.uuid)
        n.destroy_compute_instance(gpu, gi.id, ci.id)
        n.destroy_gpu_instance(gpu, gi.id)
    assert len(seen) == 2


def test_errors_carry_nvml_codes(dev: tuple[Nvml, int]) -> None:
    n, gpu = dev
    with pytest.raises(NvmlError) as exc:
        n.destroy_gpu_instance(gpu, 14)
    assert exc.value.code in (2, 6)  # INVALID_ARGUMENT / NOT_FOUND


def test_real_backend_plans_from_the_table_while_profiles_need_mig_mode(sim_factory: Callable[..., Path]) -> None:
    from vgpukit.nvml.real import RealNvml

    from .sim_pynvml import Shim

    sim = sim_factory(["A100-SXM4-80GB"])
    real = RealNvml(Shim(sim, profiles_need_mig=True))
    assert [p.name for p in real.gi_profiles(0)] == [p.name for p in SimNvml(sim).gi_profiles(0)]
    enable_now(sim, 0)
    live = real.gi_profiles(0)
    assert {p.name for p in live} >= {"3g.40gb", "7g.80gb"} and all(p.starts for p in live)
