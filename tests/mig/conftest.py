"""Fixtures: simulated hosts with a simulated NVML driver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .mig_helpers import make_sim


@pytest.fixture
def sim_factory(tmp_path: Path) -> Callable[..., Path]:
    counter = iter(range(1000))

    def factory(models: list[str | None]) -> Path:
        return make_sim(tmp_path / f"sim{next(counter)}", models)

    return factory


@pytest.fixture
def hgx(tmp_path: Path) -> Path:
    """8x A100-SXM4-40GB, MIG off (like the hgx-a100 sim profile)."""
    return make_sim(tmp_path / "hgx", ["A100-SXM4-40GB"] * 8)
