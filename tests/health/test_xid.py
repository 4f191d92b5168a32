"""The XID classification table: the shipped file, its source mapping, its docs, the loader's refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpukit.errors import InvalidInput
from vgpukit.health import xid
from vgpukit.inputs import has_control

MARKER = "s3cr3t marker!"


DOC = Path(__file__).resolve().parents[2] / "docs" / "health.md"


def test_the_shipped_table_classifies_the_well_known_xids() -> None:
    t = xid.builtin()
    assert t.version == 2 and t.sources and t.date == "2026-11-27"
    for app_error in (13, 31, 43, 45):  # application errors: the device is fine
        assert t.classify(app_error).severity == "info"
    for fatal in (48, 79, 95, 109, 119, 120):  # 109: the catalog says a GPU reset
        assert t.classify(fatal).severity == "unusable"
    assert t.classify(79).action == "reboot"
    assert t.classify(64999) == t.default and t.default.severity == "degraded"


def test_every_shipped_row_follows_from_nvidias_catalog() -> None:
    """The table cannot drift from its source: each row's class is the mapping's, or stricter with a reason."""
    t = xid.builtin()
    for number, c in t.xids.items():
        assert c.nvidia is not None, f"XID {number} has no catalog classification"
        expected = xid.catalog_class(c.nvidia.immediate, c.nvidia.investigatory)
        if c.stricter is None:
            assert (c.severity, c.action) == expected, f"XID {number}"
        else:
            assert xid.rank(c.severity, c.action) > xid.rank(*expected), f"XID {number}"
    assert sorted(n for n, c in t.xids.items() if c.stricter) == [32, 110]
    # every XID the catalog applies to an A100 or H100 with an immediate action, and 121 (GB200)
    assert all(set(c.nvidia.gpus) & {"A100", "H100"} for n, c in t.xids.items() if c.nvidia and n != 121)
    assert {8, 13, 31, 43, 45, 46, 48, 79, 94, 95, 109, 119, 140, 154, 158} <= set(t.xids)


def _doc_section() -> str:
    text = DOC.read_text()
    return text[text.index("## The XID table") : text.index("## The record")]


def test_the_docs_table_is_the_data() -> None:
    t = xid.builtin()
    section = _doc_section()
    assert f"(version {t.version}, dated {t.date})" in section
    rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    want = []
    for number, c in sorted(t.xids.items()):
        n = c.nvidia
        assert n is not None
        cells = [str(number), c.meaning, c.severity, c.action, f"`{n.mnemonic}`", n.immediate, n.investigatory]
        want.append("| " + " | ".join(cells) + " |")
    assert rows == want
    for s in t.sources:  # every source named on the page
        assert f"*{s.title}*" in section
    for bucket in xid.IMMEDIATE:  # and the whole mapping
        assert f"`{bucket}`" in section


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


def _v2(entry: dict[str, object]) -> dict[str, object]:
    doc = _doc()
    del doc["source"]
    doc.update(version=2, sources=[{"title": "t", "took": "k"}], xids={79: entry})
    return doc


def _nv(immediate: str = "RESTART_BM", investigatory: str = "CONTACT_SUPPORT") -> dict[str, object]:
    return {"mnemonic": "GPU_OFF_THE_BUS", "gpus": ["A100"], "immediate": immediate, "investigatory": investigatory}


def test_a_row_must_follow_its_catalog_bucket_or_say_why_it_is_stricter() -> None:
    ok = {"meaning": "m", "severity": "unusable", "action": "reboot", "nvidia": _nv()}
    assert xid.parse(yaml.safe_dump(_v2(ok))).classify(79).nvidia == xid.Catalog(
        "GPU_OFF_THE_BUS", ("A100",), "RESTART_BM", "CONTACT_SUPPORT"
    )
    looser = dict(ok, severity="degraded")
    with pytest.raises(InvalidInput, match="gives severity unusable, action reboot"):
        xid.parse(yaml.safe_dump(_v2(looser)))
    with pytest.raises(InvalidInput, match="not stricter"):  # a reason, but not stricter
        xid.parse(yaml.safe_dump(_v2(dict(looser, stricter="why"))))
    app = {
        "meaning": "m",
        "severity": "degraded",
        "action": "restart-app",
        "nvidia": _nv("RESTART_APP", "CHECK_APP/CUDA"),
    }
    with pytest.raises(InvalidInput, match="gives severity info"):  # the application's fault: info
        xid.parse(yaml.safe_dump(_v2(app)))
    assert xid.parse(yaml.safe_dump(_v2(dict(app, stricter="PCIe")))).classify(79).stricter == "PCIe"
    with pytest.raises(InvalidInput, match="stricter needs"):
        xid.parse(yaml.safe_dump(_v2({"meaning": "m", "severity": "info", "action": "none", "stricter": "x"})))
    v1 = _doc()
    v1["xids"] = {79: ok}  # the catalog fields are version 2's
    with pytest.raises(InvalidInput, match="needs exactly"):
        xid.parse(yaml.safe_dump(v1))


NV_VALUES = st.one_of(
    VALUES,
    st.sampled_from(["RESET_GPU", "IGNORE", "RESTART_APP", "CONTACT_SUPPORT", "A100", "GB200", "lower_case", ""]),
    st.lists(st.sampled_from(["A100", "H100", "V100", "A100", MARKER]), max_size=3),
)


@settings(max_examples=80, deadline=None)
@given(field=st.sampled_from(["mnemonic", "gpus", "immediate", "investigatory", "extra"]), value=NV_VALUES)
def test_a_bad_catalog_field_is_one_clear_line(field: str, value: object) -> None:
    nv = _nv("RESET_GPU")
    nv[field] = value
    doc = _v2({"meaning": "m", "severity": "unusable", "action": "reset", "nvidia": nv})
    try:
        t = xid.parse(yaml.safe_dump(doc))
    except InvalidInput as exc:
        assert "\n" not in str(exc) and MARKER not in str(exc)
        valid = {
            "mnemonic": isinstance(value, str) and re.fullmatch(r"[A-Z][A-Z0-9_]*( / [A-Z][A-Z0-9_]*)*", value),
            "gpus": isinstance(value, list) and value and set(value) <= set(xid.GPUS) and len(set(value)) == len(value),
            "immediate": value in xid.IMMEDIATE  # a bucket that gives unusable, reset
            and xid.catalog_class(str(value), "CONTACT_SUPPORT") == ("unusable", "reset"),
            "investigatory": isinstance(value, str) and not has_control(value) and 0 < len(value) <= 80,
            "extra": False,
        }[field]
        assert not valid
    else:
        c = t.classify(79)
        assert field != "extra" and c.nvidia is not None and getattr(c.nvidia, field) in (value, tuple(value or ()))


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(["sources", "title", "took"]), value=VALUES)
def test_bad_sources_are_one_clear_line(key: str, value: object) -> None:
    doc = _v2({"meaning": "m", "severity": "info", "action": "none"})
    if key == "sources":
        doc["sources"] = value
    else:
        doc["sources"] = [{"title": "t", "took": "k", key: value}]
    valid = key != "sources" and isinstance(value, str) and not has_control(value) and 0 < len(value) <= 300
    if valid:
        assert getattr(xid.parse(yaml.safe_dump(doc)).sources[0], key) == value
        return
    with pytest.raises(InvalidInput) as exc:
        xid.parse(yaml.safe_dump(doc))
    assert "\n" not in str(exc.value) and MARKER not in str(exc.value)


def test_the_shipped_table_is_not_read_by_the_guarded_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guarded YAML parser (depth, size, control characters: for a site's --xid-table) is pure Python:
    ~0.15 s on the shipped table, paid by every planner that reads the health fact. The shipped file is
    the package's own and goes through libyaml (vgpukit.data), checked by the same rules."""
    from vgpukit.health import xid

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the shipped XID table went through the guarded parser")

    monkeypatch.setattr(xid, "load_yaml_located", refuse)
    assert len(xid.builtin().xids) > 50


HEAD = "version: 2\ndate: 2026-11-27\nsources:\n  - {title: t, took: k}\n"
HEAD += "default: {meaning: m, severity: degraded, action: drain}\n"
ROW = "xids: {79: {meaning: m, severity: info, action: none}}\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (HEAD + "xids:\n  79: {meaning: m, severity: dire, action: reboot}\n",
         "site.yaml:7:30: $.xids.79.severity: expected one of info, degraded, unusable"),
        (HEAD + "xids:\n  79:\n    meaning: m\n    severity: unusable\n    action: reboot\n    nvidia:\n"
         "      mnemonic: GPU_OFF_THE_BUS\n      gpus: [A100]\n      immediate: NOPE\n      investigatory: X\n",
         "site.yaml:14:18: $.xids.79.nvidia.immediate: expected one of " + ", ".join(xid.IMMEDIATE)),
        (HEAD + "xids:\n  79: {meaning: m, severity: degraded, action: drain, nvidia: {mnemonic: GPU_OFF_THE_BUS,"
         " gpus: [A100], immediate: RESTART_BM, investigatory: X}}\n",
         "site.yaml:7:30: $.xids.79.severity: nvidia.immediate RESTART_BM gives severity unusable, action reboot"
         " (or a stricter one with a `stricter` reason)"),
        (HEAD.replace("{title: t, took: k}", "{title: t}") + ROW,
         "site.yaml:4:5: $.sources[0]: needs exactly title and took"),
        (HEAD + "xids:\n  79: {meaning: m, severity: info, action: none}\n  70000: {meaning: m}\n",
         "site.yaml:8:3: $.xids: a key is not an XID number from 1 to 65535"),
        (HEAD.replace("date: 2026-11-27", "date: [" + MARKER + "]") + ROW,
         "site.yaml:2:7: $.date: expected a date (2026-11-27, quoted or not) or a one-line text"),
        (HEAD.replace("version: 2", "version: 3") + "xids: {}\n", "site.yaml:1:10: $.version: expected 1 or 2"),
        (HEAD + ROW + "default: {}\n",
         "site.yaml:7:1: $: a key written twice"),
        (HEAD + ROW + "colour: blue\n",  # trial 7: an unknown key at the top was taken
         "site.yaml:7:1: $: unknown field (allowed: version, sources, date, default, xids)"),
    ],
)  # fmt: skip
def test_a_refusal_says_the_file_line_column_and_path_of_the_value(text: str, said: str) -> None:
    """As every YAML file vgpukit reads: ``FILE:LINE:COLUMN: $.path: ...`` (it was ``FILE: XID 79: ...``)."""
    with pytest.raises(InvalidInput) as exc:
        xid.parse(text, "site.yaml")
    assert str(exc.value) == said and MARKER not in str(exc.value)


@pytest.mark.parametrize("written", ["2026-11-27", '"2026-11-27"', "'2026-11-27'"])
def test_a_date_is_taken_quoted_or_not(written: str) -> None:
    """An unquoted date is a date to YAML, not a text: it is taken as the date it is (it was refused as
    `date must be a non-empty text`)."""
    text = (
        HEAD.replace("date: 2026-11-27", f"date: {written}") + "xids: {79: {meaning: m, severity: info, action: none}}"
    )
    assert xid.parse(text, "site.yaml").date == "2026-11-27"


def test_an_impossible_date_is_kept_as_text() -> None:
    """``date: 2026-13-45`` is no date: YAML's constructor failed on it and the loader said only "a value
    cannot be read", without the place (trial 7). It is the text it is now, which the date takes."""
    text = HEAD.replace("date: 2026-11-27", "date: 2026-13-45") + ROW
    assert xid.parse(text, "site.yaml").date == "2026-13-45"
