"""The NVML facade's telemetry: the real backend's code over the simulated driver (a pynvml-shaped
module answering in NVML's units: bytes, milliwatts) reads what the simulated driver itself reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_sim
from tests.mig.sim_pynvml import Shim
from vgpukit.nvml.errors import NvmlError
from vgpukit.nvml.real import RealNvml
from vgpukit.sim import nvml_events
from vgpukit.sim.nvml import SimNvml


def test_the_real_backend_reads_what_the_driver_reports(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    nvml_events.inject_ecc(sim, 0, double=False)
    assert RealNvml(Shim(sim)).telemetry(0) == SimNvml(sim).telemetry(0)


def test_a_lost_gpu_raises(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    nvml_events.inject_lost(sim, 1)
    for nvml in (SimNvml(sim), RealNvml(Shim(sim))):
        with pytest.raises(NvmlError):
            nvml.telemetry(1)
