"""``vgpukit sim fault xid|ecc|lost|recover|pf-reset|aer``: any argument is done or one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim

WORDS = st.one_of(
    st.sampled_from(["gpu0", "gpu7", "gpu8", "gpu99999", "0", "7", "03:00.0", "0000:03:00.0", "0000:ff:1f.7", ""]),
    st.sampled_from(["-1", "0x4f", "79", "65536", "fatal", "nonfatal", "correctable", "bogus", "../x", "٣"]),
    st.text(max_size=8),
)
COMMANDS = st.sampled_from(
    [("xid", 2), ("ecc", 1), ("ecc --double", 1), ("lost", 1), ("recover", 1), ("pf-reset", 1), ("aer", 2)]
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sim(tmp_path_factory.mktemp("faults") / "h", "hgx-a100")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=COMMANDS, words=st.lists(WORDS, min_size=2, max_size=2))
def test_any_arguments(sim: Path, command: tuple[str, int], words: list[str]) -> None:
    name, count = command
    args = ["sim", "fault", *name.split(), *words[:count]]
    r = invoke(sim, *args)
    assert r.exit_code in (0, 2, 3), r.output
    if r.exit_code:
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    invoke(sim, "sim", "fault", "recover", "gpu0")
