from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_sim


@pytest.fixture
def t4_sim(tmp_path: Path) -> Path:
    """2x Tesla T4 with the legacy (mdev) vGPU driver."""
    return make_sim(tmp_path / "t4", "t4-mdev")


@pytest.fixture
def h100_sim(tmp_path: Path) -> Path:
    """H100 PCIe with 32 VFs under the vGPU 17 vendor-specific VFIO driver."""
    return make_sim(tmp_path / "h100", "h100-vgpu")
