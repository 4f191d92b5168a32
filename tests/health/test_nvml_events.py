"""The NVML facade's health calls (``condition``, ``watch_events``), written against the facade only.

Backends: the simulated driver, and the real backend (:class:`vgpukit.nvml.real.RealNvml`, its event
set and ECC calls) over a pynvml-shaped module answered by the simulated driver. With
``VGPUKIT_REAL_NVML_GPU=<index>`` the real driver is added (only what needs no injected fault runs
there); without it that variant is not collected at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_sim
from tests.mig.sim_pynvml import Shim
from vgpukit.nvml import Nvml
from vgpukit.nvml.real import RealNvml
from vgpukit.sim import nvml_events
from vgpukit.sim.nvml import SimNvml

REAL_GPU = os.environ.get("VGPUKIT_REAL_NVML_GPU")
BACKENDS = ["sim", "pynvml-over-sim"] + (["real"] if REAL_GPU is not None else [])


@pytest.fixture(params=BACKENDS)
def backend(request: Any, tmp_path: Path) -> Iterator[tuple[Nvml, Path | None, int]]:
    if request.param == "real":
        real = RealNvml.try_open()
        if real is None:
            pytest.fail("VGPUKIT_REAL_NVML_GPU is set but this host has no NVML driver", pytrace=False)
        yield real, None, int(str(REAL_GPU))
        real.close()
        return
    sim = make_sim(tmp_path / "h", "hgx-a100")
    nvml: Nvml = SimNvml(sim) if request.param == "sim" else RealNvml(Shim(sim))
    yield nvml, sim, 0
    nvml.close()


def test_a_healthy_gpu(backend: tuple[Nvml, Path | None, int]) -> None:
    nvml, _, gpu = backend
    c = nvml.condition(gpu)
    assert not c.lost
    w = nvml.watch_events()
    try:
        assert w.wait(0.05) == [] or all(e.kind in ("clock", "power-source", "ecc-single") for e in w.wait(0))
    finally:
        w.close()


def test_xid_79_arrives_and_the_gpu_is_lost(backend: tuple[Nvml, Path | None, int]) -> None:
    nvml, sim, gpu = backend
    if sim is None:
        pytest.skip("needs an injected fault")
    w = nvml.watch_events()
    try:
        nvml_events.inject_xid(sim, gpu, 79)
        got = w.wait(1) + w.wait(0.2) + w.wait(0.2)
    finally:
        w.close()
    assert [(e.gpu, e.kind) for e in got][:2] == [(gpu, "xid"), (gpu, "lost")] and got[0].data == 79
    assert nvml.condition(gpu).lost
    nvml_events.recover(sim, gpu)
    assert not nvml.condition(gpu).lost


def test_ecc_counts_and_events(backend: tuple[Nvml, Path | None, int]) -> None:
    nvml, sim, gpu = backend
    if sim is None:
        pytest.skip("needs an injected fault")
    w = nvml.watch_events()
    try:
        nvml_events.inject_ecc(sim, gpu, double=True)
        nvml_events.inject_ecc(sim, gpu, double=False)
        got = w.wait(1) + w.wait(0.2) + w.wait(0.2)
    finally:
        w.close()
    assert sorted(e.kind for e in got) == ["ecc-double", "ecc-single"]
    c = nvml.condition(gpu)
    assert (c.ecc_corrected, c.ecc_uncorrected) == (1, 1)
