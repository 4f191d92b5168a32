"""NVML memory queries (exported and dlsym'd, v1 and _v2) report the tenant's cap and usage."""

from __future__ import annotations

from .conftest import Cuda


def test_nvml_reports_cap_and_usage(cuda: Cuda) -> None:
    out = cuda.run("nvmlq", "3000000", VGPUKIT_CUDA_MEMORY="8MiB", VGPUKIT_EMU_DEVICES="2")
    for suffix in ("", "2", "3"):
        assert int(out["total" + suffix]) == 8 << 20
        assert int(out["used" + suffix]) == 3000000
        assert int(out["free" + suffix]) == (8 << 20) - 3000000


def test_nvml_without_configuration_is_the_devices(cuda: Cuda) -> None:
    out = cuda.run("nvmlq", "3000000", tenant=False, VGPUKIT_CUDA_MEMORY="8MiB")
    assert int(out["total"]) == 1 << 30 and int(out["total3"]) == 1 << 30
