"""/etc/mdevctl.d shared with Debian's mdevctl package: its scripts.d tree, hostile or odd definition
files, upper-case UUID file names, names with control characters (simulated QEMU guest, mtty parent)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from tests.conftest import as_json

Run = Callable[..., Result]
U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"
U3 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1003"


def _defdir(sim: Path, parent: str = "mtty") -> Path:
    d = sim / "etc/mdevctl.d" / parent
    d.mkdir(parents=True, exist_ok=True)
    return d


def _put(sim: Path, uid: str, doc: object, parent: str = "mtty") -> Path:
    path = _defdir(sim, parent) / uid
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _active(sim: Path) -> list[str]:
    d = sim / "sys/bus/mdev/devices"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def _mdevctl_package_tree(sim: Path) -> None:
    """What installing Debian's mdevctl package leaves in /etc/mdevctl.d (plus a callout script)."""
    scripts = sim / "etc/mdevctl.d/scripts.d"
    (scripts / "callouts").mkdir(parents=True)
    (scripts / "notifiers").mkdir(parents=True)
    (scripts / "callouts" / "nvidia-vgpu").write_text("#!/bin/sh\nexit 2\n")


def test_mdevctl_scripts_dir_is_not_a_parent(qemu_sim: Path, run_cli: Run) -> None:
    _mdevctl_package_tree(qemu_sim)
    (_defdir(qemu_sim) / "not-a-definition.d").mkdir()  # a directory below a parent is skipped too
    _put(qemu_sim, U1, {"mdev_type": "mtty-1", "start": "auto", "attrs": []})
    r = run_cli(qemu_sim, "mdev", "list", "--defined", "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert [d["uuid"] for d in doc["definitions"]] == [U1] and doc["unreadable"] == []
    r = run_cli(qemu_sim, "mdev", "define", "--parent", "mtty", "--type", "mtty-2", "--uuid", U2, "--auto", "--json")
    assert r.exit_code == 0, r.stderr
    r = run_cli(qemu_sim, "mdev", "start", "--all", "--json")
    assert r.exit_code == 0, r.stderr
    assert sorted((x["uuid"], x["status"]) for x in as_json(r)["results"]) == [(U1, "started"), (U2, "started")]
    assert _active(qemu_sim) == [U1, U2]
    assert sorted(p.name for p in (qemu_sim / "etc/mdevctl.d/scripts.d").iterdir()) == ["callouts", "notifiers"]


def test_a_deeply_nested_definition_is_skipped_and_reported(qemu_sim: Path, run_cli: Run) -> None:
    _put(qemu_sim, U1, {"mdev_type": "mtty-1", "start": "auto", "attrs": []})
    deep = '{"mdev_type": "mtty-1", "start": "auto", "attrs": [' + "[" * 20_000 + "]" * 20_000 + "]}"
    _put(qemu_sim, U2, deep)
    r = run_cli(qemu_sim, "mdev", "list", "--defined", "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert [d["uuid"] for d in doc["definitions"]] == [U1]
    (bad,) = doc["unreadable"]
    assert bad["path"] == f"/etc/mdevctl.d/mtty/{U2}" and "nested more than" in bad["reason"]
    r = run_cli(qemu_sim, "mdev", "start", "--all", "--json")
    assert r.exit_code == 0, r.stderr
    assert [(x["uuid"], x["status"]) for x in as_json(r)["results"]] == [(U1, "started")]
    assert _active(qemu_sim) == [U1]


def test_attrs_naming_kernel_control_files_are_refused(qemu_sim: Path, run_cli: Run) -> None:
    hostile = ["remove", "create", "driver/unbind", "power/control", "../remove", "/remove", "a/b/c", "nvidia/.."]
    uids = [f"83b8f4f2-509f-382f-3c1e-e6bfe0fa20{i:02d}" for i in range(len(hostile))]
    for uid, attr in zip(uids, hostile, strict=True):
        _put(qemu_sim, uid, {"mdev_type": "mtty-1", "start": "auto", "attrs": [{attr: "1"}]})
    r = run_cli(qemu_sim, "mdev", "list", "--defined", "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert doc["definitions"] == []
    assert sorted(b["path"].rsplit("/", 1)[1] for b in doc["unreadable"]) == uids
    assert all("invalid mdev attribute name" in b["reason"] for b in doc["unreadable"])
    r = run_cli(qemu_sim, "mdev", "start", "--all", "--json")
    assert r.exit_code == 0 and as_json(r)["results"] == [], r.stderr
    r = run_cli(qemu_sim, "mdev", "start", uids[0])
    assert r.exit_code == 2 and "is not valid" in r.stderr, r.stderr
    assert _active(qemu_sim) == []


def test_an_upper_case_file_name_is_found_and_undefined(qemu_sim: Path, run_cli: Run) -> None:
    path = _put(qemu_sim, U1.upper(), {"mdev_type": "mtty-1", "start": "manual", "attrs": []})
    doc = as_json(run_cli(qemu_sim, "mdev", "list", "--defined", "--json"))
    assert [d["uuid"] for d in doc["definitions"]] == [U1]
    r = run_cli(qemu_sim, "mdev", "define", U1, "--auto")  # not active: define UUID needs an instance
    assert r.exit_code == 3
    r = run_cli(qemu_sim, "mdev", "start", U1.upper(), "--json")
    assert r.exit_code == 0 and as_json(r)["results"][0]["status"] == "started", r.stderr
    r = run_cli(qemu_sim, "mdev", "define", U1, "--auto", "--json")  # changes the existing file, no twin
    assert r.exit_code == 0, r.stderr
    assert as_json(r)["path"] == f"/etc/mdevctl.d/mtty/{U1.upper()}"
    assert json.loads(path.read_text())["start"] == "auto"
    assert [p.name for p in _defdir(qemu_sim).iterdir()] == [U1.upper()]
    r = run_cli(qemu_sim, "mdev", "undefine", U1, "--json")
    assert r.exit_code == 0, r.stderr
    assert not path.exists()
    r = run_cli(qemu_sim, "mdev", "undefine", U1)
    assert r.exit_code == 3


def test_undefine_removes_a_bad_definition_file(qemu_sim: Path, run_cli: Run) -> None:
    path = _put(qemu_sim, U3, "{not json")
    assert as_json(run_cli(qemu_sim, "mdev", "list", "--defined", "--json"))["unreadable"][0]["reason"].startswith(
        "not valid JSON"
    )
    r = run_cli(qemu_sim, "mdev", "undefine", U3)
    assert r.exit_code == 0, r.stderr
    assert not path.exists()


def test_names_with_control_characters_or_empty_are_refused(qemu_sim: Path, run_cli: Run) -> None:
    cases = [
        ("mdev", "define", "--parent", "mtty\n", "--type", "mtty-1"),
        ("mdev", "define", "--parent", "newparent\n", "--type", "mtty-1"),
        ("mdev", "define", "--parent", "mtty", "--type", "mtty-1\n"),
        ("mdev", "define", "--parent", "", "--type", "mtty-1"),
        ("mdev", "create", "", "mtty-1"),
        ("mdev", "create", "mtty", ""),
        ("mdev", "create", "mtty", "mtty-1\n"),
        ("mdev", "create", "--type", "mtty-1", "--count", "\u0663"),
        ("mdev", "start", "", "--json"),
        ("mdev", "start", "--all", "--parent", "mtty\x1b"),
        ("mdev", "undefine", ""),
        ("mdev", "types", "mtty\n"),
    ]
    for args in cases:
        r = run_cli(qemu_sim, *args)
        assert r.exit_code == 2, (args, r.exit_code, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert _active(qemu_sim) == []
    assert not (qemu_sim / "etc/mdevctl.d").exists() or not any((qemu_sim / "etc/mdevctl.d").iterdir())


def test_files_that_are_not_definitions(qemu_sim: Path, run_cli: Run) -> None:
    """Non-UUID names are reported; a parent directory with a bad name is reported, not fatal."""
    _put(qemu_sim, U1, {"mdev_type": "mtty-1", "start": "auto"})
    (_defdir(qemu_sim) / "README").write_text("notes\n")
    _put(qemu_sim, U2, {"mdev_type": "mtty-1\n", "start": "auto"})
    _put(qemu_sim, U3, {"mdev_type": "mtty-1", "start": "auto"}, parent="bad parent")
    doc = as_json(run_cli(qemu_sim, "mdev", "list", "--defined", "--json"))
    assert [d["uuid"] for d in doc["definitions"]] == [U1]
    reasons = {b["path"].rsplit("/", 2)[-1]: b["reason"] for b in doc["unreadable"]}
    assert set(reasons) == {"README", U2, U3}
    assert "not a UUID" in reasons["README"] and "not a valid type id" in reasons[U2]
    assert "mtty-1\n" not in "".join(reasons.values())  # file content is never quoted


def test_definition_files_are_byte_identical_to_mdevctls(qemu_sim: Path, run_cli: Run) -> None:
    """mdevctl (1.2 and 1.4 alike) writes serde_json's pretty form in the order mdev_type, start, attrs,
    two-space indent, non-ASCII as is, and no newline at the end; a file with a newline is still read."""
    r = run_cli(qemu_sim, "mdev", "--mdevctl", "define", "-u", U1, "-p", "mtty", "-t", "mtty-1", "-a")
    assert r.exit_code == 0, r.stderr
    path = qemu_sim / "etc/mdevctl.d/mtty" / U1
    assert path.read_bytes() == b'{\n  "mdev_type": "mtty-1",\n  "start": "auto",\n  "attrs": []\n}'
    r = run_cli(qemu_sim, "mdev", "--mdevctl", "modify", "-u", U1, "--addattr", "nv/p", "--value", "caf\u00e9 1")
    assert r.exit_code == 0, r.stderr
    assert path.read_bytes() == (
        b'{\n  "mdev_type": "mtty-1",\n  "start": "auto",\n  "attrs": [\n    {\n'
        + '      "nv/p": "caf\u00e9 1"\n    }\n  ]\n}'.encode()
    )
    _put(qemu_sim, U2, '{\n  "mdev_type": "mtty-2",\n  "start": "manual",\n  "attrs": []\n}\n')  # a newline too
    r = run_cli(qemu_sim, "mdev", "list", "--defined", "--json")
    assert r.exit_code == 0, r.stderr
    assert {d["uuid"] for d in as_json(r)["definitions"]} == {U1, U2}
