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


LIVE_SCRIPT = """#!/bin/sh
# a vendor's versioned call-out script: the live event for mtty-1 devices ($LIVE: what it answers)
while [ $# -gt 1 ]; do case "$1" in -t) t=$2;; -e) e=$2;; -a) a=$2;; esac; shift 2; done
json=$(cat)
echo "$e $a $json" >> "$(dirname "$0")/../log"
[ "$t" = mtty-1 ] || exit 2
if [ "$e $a" = "get capabilities" ]; then
  echo '{"supports":{"version":2,"actions":["start","stop","define","undefine","modify","attributes",'\
'"capabilities"],"events":["pre","post","notify","get"EVENTS]}}'
  exit 0
fi
[ "$e" = live ] && exit LIVE
exit 0
"""


def _live_script(sim: Path, events: str = ',"live"', answer: int = 0) -> Path:
    """A versioned call-out script (taking the live event when ``events`` lists it); its log."""
    d = sim / "etc/mdevctl.d/scripts.d/callouts"
    d.mkdir(parents=True, exist_ok=True)
    (d / "vendor").write_text(LIVE_SCRIPT.replace("EVENTS", events).replace("LIVE", str(answer)))
    (d / "vendor").chmod(0o755)
    log = d.parent / "log"
    log.write_text("")
    return log


def test_modify_live_is_the_versioned_callouts_job(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    """mdevctl's ``modify --live``: the running device's new configuration goes to its versioned call-out
    script (event ``live``, action ``modify``), which changes the device; vgpukit writes nothing there."""
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U1))
    a = _attr(qemu_sim, U1, "a")
    live = {"mdev_type": "mtty-1", "start": "auto", "attrs": [{"a": "7"}, {"b": "8"}]}
    f = _file(tmp_path, live)
    log = _live_script(qemu_sim)
    assert ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--jsonfile", f)) == ""
    handed = f"live modify {json.dumps(live, separators=(',', ':'))}"
    lines = log.read_text().splitlines()
    assert handed in lines and lines.index(handed) > 0 and lines[0].startswith("get capabilities")
    assert a.read_text().strip() == "0"  # the script's job: vgpukit wrote no attribute
    assert defn(qemu_sim, U1) == {"mdev_type": "mtty-1", "start": "manual", "attrs": []}  # untouched
    log.write_text("")
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "-l", "-d", "--jsonfile", f))  # and defined
    assert defn(qemu_sim, U1) == live
    events = [line.split(" ", 2)[:2] for line in log.read_text().splitlines() if not line.startswith("get")]
    assert events == [["pre", "modify"], ["live", "modify"], ["post", "modify"]]
    doc = json.loads(ok(run_cli(qemu_sim, "mdev", "modify", U1, "--live", "--jsonfile", f, "--json")))  # vgpukit's own
    assert doc["live"] is True and doc["plan"] == [f"hand the live change of running {U1} to its call-out script"]


def test_modify_live_without_a_script_that_takes_it_is_refused(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U1))
    f = _file(tmp_path, {"mdev_type": "mtty-1", "start": "auto", "attrs": [{"a": "7"}]})
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--jsonfile", f)  # no script at all
    assert r.exit_code == 5 and "No callout script with version support found that supports live modify" in r.stderr
    assert run_cli(qemu_sim, "mdev", "modify", U1, "--live", "--jsonfile", f).exit_code == 5  # every door
    _live_script(qemu_sim, events="")  # versioned, without the live event
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--defined", "--jsonfile", f)
    assert r.exit_code == 1 and "does not support event live" in r.stderr
    assert defn(qemu_sim, U1) == {"mdev_type": "mtty-1", "start": "manual", "attrs": []}  # --defined: not written
    _live_script(qemu_sim, answer=1)  # takes it, and fails
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--defined", "--jsonfile", f)
    assert r.exit_code == 1 and "did not make the live modify" in r.stderr and "return code 1" in r.stderr
    assert defn(qemu_sim, U1) == {"mdev_type": "mtty-1", "start": "manual", "attrs": []}


def test_modify_live_refusals(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    _live_script(qemu_sim)
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
    assert r.exit_code == 3 and "is not defined" in r.stderr  # checked before any script is asked
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-2"))  # defined with another type
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--live", "--defined", "--jsonfile", f)
    assert r.exit_code == 2 and "'type' of active and defined mdev does not match" in r.stderr
