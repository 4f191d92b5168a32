"""``modify --jsonfile`` / ``--live`` / ``--defined`` as mdevctl's (simulated QEMU guest, mtty parent):
replacing a definition from a file, changing a running device's attributes, and what is refused.
docs/mdev.md, "modify --jsonfile and --live"."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import Result

from tests.conftest import Run

U1 = "5a1c0de0-0000-4000-8000-00000000b001"
U2 = "5a1c0de0-0000-4000-8000-00000000b002"


def mc(run: Run, sim: Path, *args: str) -> Result:
    return run(sim, "mdev", "--mdevctl", *args)


def ok(r: Result) -> str:
    assert r.exit_code == 0, r.stderr
    return r.stdout


def defn(sim: Path, uid: str) -> object:
    return json.loads((sim / "etc/mdevctl.d/mtty" / uid).read_text())


def _file(tmp_path: Path, doc: object, name: str = "f.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def _attr(sim: Path, uid: str, name: str) -> Path:
    """A vendor attribute of a running (simulated) instance: mtty has none, the test makes one."""
    path = (sim / "sys/bus/mdev/devices" / uid).resolve() / name
    path.write_text("0\n")
    return path


def test_modify_jsonfile_replaces_the_definition(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr", "old", "--value", "x"))
    new = {"mdev_type": "mtty-2", "start": "auto", "attrs": [{"a": "1"}, {"b": "2"}]}
    assert ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "-p", "mtty", "--jsonfile", _file(tmp_path, new))) == ""
    assert defn(qemu_sim, U1) == new
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--jsonfile", _file(tmp_path, new), "--delattr"))  # then drops b
    assert defn(qemu_sim, U1) == {**new, "attrs": [{"a": "1"}]}
    for extra in (["-t", "mtty-1"], ["-a"], ["-m"], ["-i", "0", "--delattr"], ["--addattr", "c", "--value", "3"]):
        r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--jsonfile", _file(tmp_path, new), *extra)
        assert r.exit_code == 2, extra
    r = mc(run_cli, qemu_sim, "modify", "-u", U2, "--jsonfile", _file(tmp_path, new))
    assert r.exit_code == 3  # not defined
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--jsonfile", _file(tmp_path, {"start": "auto"}))
    assert r.exit_code == 2 and defn(qemu_sim, U1) == {**new, "attrs": [{"a": "1"}]}


def test_modify_live_changes_the_running_device_only(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U1))
    a, b = _attr(qemu_sim, U1, "a"), _attr(qemu_sim, U1, "b")
    live = {"mdev_type": "mtty-1", "start": "auto", "attrs": [{"a": "7"}, {"b": "8"}]}
    assert ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--jsonfile", _file(tmp_path, live))) == ""
    assert (a.read_text().strip(), b.read_text().strip()) == ("7", "8")
    assert defn(qemu_sim, U1) == {"mdev_type": "mtty-1", "start": "manual", "attrs": []}  # untouched
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "-l", "-d", "--jsonfile", _file(tmp_path, live)))  # and defined
    assert defn(qemu_sim, U1) == live


def test_modify_live_rolls_back_and_refuses(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    a = _attr(qemu_sim, U1, "a")
    bad = {"mdev_type": "mtty-1", "start": "manual", "attrs": [{"a": "7"}, {"nosuch": "1"}]}
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--jsonfile", _file(tmp_path, bad))
    assert r.exit_code != 0 and a.read_text().strip() == "0"  # the first write undone
    same = {"mdev_type": "mtty-1", "start": "manual", "attrs": [{"a": "7"}]}
    f = _file(tmp_path, same)
    refusals = {
        ("-t", "mtty-2"): "'type' cannot be changed on active mdev",
        ("-a",): "'auto' cannot be changed on active mdev",
        ("-m",): "'manual' cannot be changed on active mdev",
    }
    for extra, words in refusals.items():
        r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--jsonfile", f, *extra)
        assert r.exit_code == 2 and words in r.stderr, extra
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live")
    assert r.exit_code == 2 and "'live' option must be used with 'jsonfile' option" in r.stderr
    other = _file(tmp_path, {"mdev_type": "mtty-2", "start": "manual", "attrs": []}, "o.json")
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--jsonfile", other)
    assert r.exit_code == 2 and "'type' cannot be changed on active mdev" in r.stderr
    r = mc(run_cli, qemu_sim, "modify", "-u", U2, "--live", "--jsonfile", f)
    assert r.exit_code == 3 and f"Mediated device {U2} is not active" in r.stderr
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--defined", "--jsonfile", f)
    assert r.exit_code == 3 and "is not defined" in r.stderr and a.read_text().strip() == "0"  # checked first
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-2"))  # defined with another type
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--defined", "--jsonfile", f)
    assert r.exit_code == 2 and "'type' of active and defined mdev does not match" in r.stderr
    doc = json.loads(ok(run_cli(qemu_sim, "mdev", "modify", U1, "--live", "--jsonfile", f, "--json")))
    assert doc["live"] is True and doc["plan"] == [f"set a of running {U1}"] and a.read_text().strip() == "7"
