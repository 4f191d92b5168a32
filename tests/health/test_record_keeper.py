"""The health record kept in memory between a long-running process's looks (vgpukit/health/log.py Keeper):
what a look starts from always equals a fresh read of the file, whatever happened between (the host
changed, another writer such as a one-shot ``vgpukit health`` wrote the file, the file was removed), and
a look whose file nobody else touched does not parse it again. The record's text is the same JSON value
the standard library's indenting encoder writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim
from tests.watch.helpers import app_of
from vgpukit.health import fact
from vgpukit.health import log as record_log
from vgpukit.health.log import Keeper, Record

NICS = {"nic0": "0000:05:00", "nic3": "0000:a5:00"}
nic = st.sampled_from(sorted(NICS))
STEPS = st.one_of(
    st.tuples(st.just("sriov"), st.just("enable"), nic, st.just("--vfs"), st.sampled_from(["2", "4"]),
              st.just("--driver"), st.just("vfio-pci")),
    st.tuples(st.just("sriov"), st.just("disable"), nic),
    st.builds(lambda n, i: ("bind", f"{NICS[n]}.{i}", "--restore"), nic, st.integers(1, 3)),
    st.builds(lambda n, i, k: ("sim", "fault", "aer", f"{NICS[n]}.{i}", k), nic, st.integers(1, 3),
              st.sampled_from(["nonfatal", "correctable"])),
    st.just(("sim", "fault", "xid", "gpu3", "--xid", "48")),
    st.just(("health",)),  # another writer: a one-shot look writes the file
    st.just(("rm",)),  # the file removed (a reboot empties /run)
)  # fmt: skip


def _look(sim: Path, keeper: Keeper) -> list[object]:
    app = app_of(sim)  # a fresh host per look, as the watch opens one per refresh
    try:
        return fact.current(app.host, app.nvml, keeper=keeper)
    finally:
        app.close()


def _fresh(sim: Path) -> Record:
    app = app_of(sim)
    try:
        return record_log.load(app.host)
    finally:
        app.close()


def _starts_from(sim: Path, keeper: Keeper) -> Record:
    app = app_of(sim)
    try:
        return keeper.load(app.host)
    finally:
        app.close()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=1, max_size=6))
def test_a_kept_record_equals_a_fresh_read_after_any_changes(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, ...]]
) -> None:
    sim = make_sim(tmp_path_factory.mktemp("keep") / "h")
    assert invoke(sim, "sriov", "enable", "nic3", "--vfs", "4", "--driver", "vfio-pci").exit_code == 0
    keeper = Keeper()
    _look(sim, keeper)
    for args in steps:
        if args == ("rm",):
            sim.joinpath("run", "vgpukit", "health", "state.json").unlink(missing_ok=True)
        else:
            invoke(sim, *args)  # refused or not: the host is what it is
        assert _starts_from(sim, keeper) == _fresh(sim), f"after {args}"
        _look(sim, keeper)
        assert _starts_from(sim, keeper) == _fresh(sim), f"after {args}, looked"
        assert keeper.kept is not None and keeper.kept[1] == _fresh(sim)


def test_an_unchanged_file_is_not_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "sriov", "enable", "nic3", "--vfs", "4", "--driver", "vfio-pci").exit_code == 0
    keeper = Keeper()
    first = _look(sim, keeper)
    parsed: list[int] = []
    real = record_log.parse
    monkeypatch.setattr(record_log, "parse", lambda host, text: parsed.append(1) or real(host, text))
    assert _look(sim, keeper) == first
    assert parsed == []  # the kept record, not the file parsed again
    assert invoke(sim, "health").exit_code in (0, 3, 4)  # another writer: its file is read
    _look(sim, keeper)
    assert len(parsed) == 1


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    cursor=st.dictionaries(st.integers(0, 15), st.integers(0, 2**40), max_size=3),
    events=st.lists(st.dictionaries(st.text(max_size=6), JSON, max_size=4), max_size=3),
    pci=st.dictionaries(st.text(max_size=12), st.dictionaries(st.text(max_size=6), JSON, max_size=4), max_size=4),
)
def test_the_record_text_is_the_json_value_it_always_was(
    cursor: dict[int, int], events: list[dict[str, object]], pci: dict[str, dict[str, object]]
) -> None:
    record = Record(cursor, events, pci)
    doc = {"version": 1, "cursor": {str(k): v for k, v in cursor.items()}, "events": events, "pci": pci}
    text = record.to_json()
    assert json.loads(text) == json.loads(json.dumps(doc, indent=1, sort_keys=True))
    assert text.endswith("}\n") and text.count("\n") == json.dumps(doc, indent=1, sort_keys=True).count("\n") + 1
