"""The telemetry calls on a real GPU: collected only with ``VGPUKIT_REAL_NVML_GPU=<index>``."""

from __future__ import annotations

import os

import pytest

from vgpukit.nvml.real import RealNvml


def test_a_real_gpu_answers() -> None:
    real = RealNvml.try_open()
    if real is None:
        pytest.fail("VGPUKIT_REAL_NVML_GPU is set but this host has no NVML driver", pytrace=False)
    try:
        t = real.telemetry(int(os.environ["VGPUKIT_REAL_NVML_GPU"]))
    finally:
        real.close()
    assert t.fb_free_mib is not None and t.fb_free_mib > 0
    assert t.util is not None and 0 <= t.util <= 100
