"""The fuzz suite's fixed hypothesis profile and its one simulated host per session.

CI profile ``vgpukit-ci``: derandomized (the same cases every run, no example database), a bounded
number of examples per test (``VGPUKIT_FUZZ_EXAMPLES`` scales them), no deadline (the machine is
shared). The number of cases run is printed in the terminal summary.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from .harness import FuzzHost

settings.register_profile(
    "vgpukit-ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("vgpukit-ci")

SCALE = float(os.environ.get("VGPUKIT_FUZZ_EXAMPLES", "1"))
_CASES: dict[str, int] = {}


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


@pytest.fixture(scope="session")
def fuzz_host() -> Iterator[FuzzHost]:
    env = {k: os.environ.pop(k) for k in ("VGPUKIT_SIM", "VGPUKIT_ROOT") if k in os.environ}
    with tempfile.TemporaryDirectory(prefix="vgpukit-fuzz-") as tmp:
        host = FuzzHost.create(Path(tmp))
        yield host
        for group, n in host.cases.items():
            _CASES[group] = _CASES.get(group, 0) + n
    os.environ.update(env)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _CASES:
        total = sum(_CASES.values())
        parts = ", ".join(f"{g} {n}" for g, n in sorted(_CASES.items()))
        terminalreporter.write_line(f"fuzz: {total} cases run ({parts})")
