"""The XID classification table: the shipped file and the loader's refusals."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpukit.errors import InvalidInput
from vgpukit.health import xid

MARKER = "s3cr3t marker!"


def test_the_shipped_table_classifies_the_well_known_xids() -> None:
    t = xid.builtin()
    assert t.version == 1 and t.source and t.date
    for app_error in (13, 31, 43, 45, 68, 109):  # application errors: the device is fine
        assert t.classify(app_error).severity == "info"
    for fatal in (48, 79, 95, 119, 120):
        assert t.classify(fatal).severity == "unusable"
    assert t.classify(79).action == "reboot"
    assert t.classify(64999) == t.default and t.default.severity == "degraded"


def _doc() -> dict[str, object]:
    return {
        "version": 1,
        "source": "s",
        "date": "2026-11-26",
        "default": {"meaning": "m", "severity": "degraded", "action": "drain"},
        "xids": {79: {"meaning": "off the bus", "severity": "unusable", "action": "reboot"}},
    }


VALUES = st.one_of(
    st.none(), st.integers(-5, 70000), st.text(max_size=8), st.just(MARKER), st.lists(st.integers(), max_size=2)
)


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(["version", "source", "date", "default", "xids"]), value=VALUES)
def test_a_bad_table_is_one_clear_line(key: str, value: object) -> None:
    doc = _doc()
    doc[key] = value
    try:
        xid.parse(yaml.safe_dump(doc))
    except InvalidInput as exc:
        msg = str(exc)
        assert "\n" not in msg and MARKER not in msg
    else:
        assert key in ("source", "date") and isinstance(value, str) and value  # a text is fine there


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(["meaning", "severity", "action"]), value=VALUES, number=st.integers(-3, 70000))
def test_a_bad_entry_is_refused(field: str, value: object, number: int) -> None:
    doc = _doc()
    entry = {"meaning": "m", "severity": "info", "action": "none", field: value}
    doc["xids"] = {number: entry}
    ok_value = field == "meaning" and isinstance(value, str) and 0 < len(value) <= 200
    try:
        t = xid.parse(yaml.safe_dump(doc))
    except InvalidInput as exc:
        assert "\n" not in str(exc) and MARKER not in str(exc)
        assert not (ok_value and 0 < number <= xid.MAX_XID)
    else:
        assert ok_value and t.classify(number).meaning == value


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=200))
def test_any_text_is_a_table_or_one_line(text: str) -> None:
    try:
        xid.parse(text)
    except InvalidInput as exc:
        assert "\n" not in str(exc)
