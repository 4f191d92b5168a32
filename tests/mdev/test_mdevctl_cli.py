"""mdevctl 1.2's command line on ``vgpukit mdev`` (the simulated QEMU guest, mtty parent): every option
of its man page, its output forms (``--mdevctl`` text, ``--dumpjson``), and its call-out scripts run
as real processes. docs/mdev.md's option table names these tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import Run

U1 = "5a1c0de0-0000-4000-8000-000000000001"
U2 = "5a1c0de0-0000-4000-8000-000000000002"
U3 = "5a1c0de0-0000-4000-8000-000000000003"


def mc(run: Run, sim: Path, *args: str) -> Result:
    """``mdevctl ARGS`` as the shell function ``mdevctl() { vgpukit mdev --mdevctl "$@"; }`` runs it."""
    return run(sim, "mdev", "--mdevctl", *args)


def ok(r: Result) -> str:
    assert r.exit_code == 0, r.stderr
    return r.stdout


def defn(sim: Path, uid: str, parent: str = "mtty") -> dict | None:  # type: ignore[type-arg]
    path = sim / "etc/mdevctl.d" / parent / uid
    return json.loads(path.read_text()) if path.exists() else None


def active(sim: Path) -> list[str]:
    d = sim / "sys/bus/mdev/devices"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


# ------------------------------------------------------------------ list / types output


def test_list_text_and_dumpjson_forms(qemu_sim: Path, run_cli: Run) -> None:
    assert ok(mc(run_cli, qemu_sim, "list")) == "\n"  # mdevctl prints its (empty) listing and a newline
    assert ok(mc(run_cli, qemu_sim, "list", "--dumpjson")) == "[]\n"
    ok(mc(run_cli, qemu_sim, "start", "-u", U2, "-p", "mtty", "-t", "mtty-2"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U2, "-a"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr", "k", "--value", "v"))
    assert ok(mc(run_cli, qemu_sim, "list")) == f"{U2} mtty mtty-2 auto (defined)\n\n"
    assert ok(mc(run_cli, qemu_sim, "list", "-d")) == f"{U1} mtty mtty-1 manual\n{U2} mtty mtty-2 auto (active)\n\n"
    verbose = ok(mc(run_cli, qemu_sim, "list", "-d", "-v", "-u", U1))
    assert verbose == f'{U1} mtty mtty-1 manual\n  Attrs:\n    @{{0}}: {{"k":"v"}}\n\n'
    assert ok(mc(run_cli, qemu_sim, "list", "-d", "-p", "nosuch")) == "\n"
    full = json.loads(ok(run_cli(qemu_sim, "mdev", "list", "-d", "--dumpjson")))
    assert full == [
        {
            "mtty": [
                {U1: {"mdev_type": "mtty-1", "start": "manual", "attrs": [{"k": "v"}]}},
                {U2: {"mdev_type": "mtty-2", "start": "auto", "attrs": []}},
            ]
        }
    ]
    one = ok(run_cli(qemu_sim, "mdev", "list", "-d", "--dumpjson", "--uuid", U1))
    assert one == (  # serde_json's pretty form: two spaces, one key per line
        '{\n  "mdev_type": "mtty-1",\n  "start": "manual",\n  "attrs": [\n    {\n      "k": "v"\n    }\n  ]\n}\n'
    )
    assert json.loads(ok(run_cli(qemu_sim, "mdev", "list", "--dumpjson", "-u", U1))) == []  # not active
    r = run_cli(qemu_sim, "mdev", "list", "--dumpjson", "--json")
    assert r.exit_code == 2 and "exclude each other" in r.stderr


def test_list_filters_in_vgpukit_form(qemu_sim: Path, run_cli: Run) -> None:
    ok(run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U1, "--define"))
    ok(run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-2", "--uuid", U2))
    doc = json.loads(ok(run_cli(qemu_sim, "mdev", "list", "-d", "-u", U1, "--json")))
    assert [i["uuid"] for i in doc["instances"]] == [U1] and [d["uuid"] for d in doc["definitions"]] == [U1]
    doc = json.loads(ok(run_cli(qemu_sim, "mdev", "list", "-p", "mtty", "--json")))
    assert sorted(i["uuid"] for i in doc["instances"]) == sorted([U1, U2])
    assert run_cli(qemu_sim, "mdev", "list", "-p", "other", "--json").exit_code == 3  # no such parent (mdev.md)
    text = ok(run_cli(qemu_sim, "mdev", "list", "-d", "-v"))
    assert "ATTRS" in text


def test_types_text_and_dumpjson(qemu_sim: Path, run_cli: Run) -> None:
    text = ok(mc(run_cli, qemu_sim, "types"))
    assert text == (
        "mtty\n  mtty-1\n    Available instances: 24\n    Device API: vfio-pci\n    Name: Single port serial\n"
        "  mtty-2\n    Available instances: 12\n    Device API: vfio-pci\n    Name: Dual port serial\n\n"
    )
    doc = json.loads(ok(run_cli(qemu_sim, "mdev", "types", "-p", "mtty", "--dumpjson")))
    assert doc == [
        {
            "mtty": [
                {"mtty-1": {"available_instances": 24, "device_api": "vfio-pci", "name": "Single port serial"}},
                {"mtty-2": {"available_instances": 12, "device_api": "vfio-pci", "name": "Dual port serial"}},
            ]
        }
    ]
    assert run_cli(qemu_sim, "mdev", "types", "-p", "nosuch", "--dumpjson").exit_code == 3


def test_version(qemu_sim: Path, run_cli: Run) -> None:
    assert ok(run_cli(qemu_sim, "mdev", "-V")).startswith("vgpukit mdev, version ")


# ------------------------------------------------------------------ define / modify / undefine


def test_define_short_flags_and_generated_uuid(qemu_sim: Path, run_cli: Run) -> None:
    new = ok(mc(run_cli, qemu_sim, "define", "-p", "mtty", "-t", "mtty-2", "-a")).strip()
    assert len(new) == 36 and defn(qemu_sim, new) == {"mdev_type": "mtty-2", "start": "auto", "attrs": []}
    assert ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1")) == ""  # UUID given: silent
    r = mc(run_cli, qemu_sim, "define", "-u", U2, "-t", "mtty-1")
    assert r.exit_code == 2 and "--type needs --parent" in r.stderr
    r = mc(run_cli, qemu_sim, "define", "-u", U2, "-p", "mtty")  # not active: the type cannot come from sysfs
    assert r.exit_code == 2 and defn(qemu_sim, U2) is None
    ok(mc(run_cli, qemu_sim, "start", "-u", U2, "-p", "mtty", "-t", "mtty-2"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U2, "-p", "mtty"))  # active: its type
    assert defn(qemu_sim, U2) == {"mdev_type": "mtty-2", "start": "manual", "attrs": []}


def test_define_jsonfile(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    f = tmp_path / "dev.json"
    f.write_text(json.dumps({"mdev_type": "mtty-1", "start": "auto", "attrs": [{"a": "1"}, {"b": "2"}]}))
    new = ok(mc(run_cli, qemu_sim, "define", "-p", "mtty", "--jsonfile", str(f))).strip()
    assert defn(qemu_sim, new) == {"mdev_type": "mtty-1", "start": "auto", "attrs": [{"a": "1"}, {"b": "2"}]}
    ok(mc(run_cli, qemu_sim, "define", "-p", "mtty", "-u", U1, "--jsonfile", str(f)))
    for bad in (["-t", "mtty-1"], ["-a"]):
        r = mc(run_cli, qemu_sim, "define", "-p", "mtty", "--jsonfile", str(f), *bad)
        assert r.exit_code == 2 and "excludes" in r.stderr
    r = mc(run_cli, qemu_sim, "define", "-u", U2, "--jsonfile", str(f))
    assert r.exit_code == 2 and "needs --parent" in r.stderr
    r = mc(run_cli, qemu_sim, "define", "-p", "mtty", "-u", U1, "--jsonfile", str(f))  # never overwritten
    assert r.exit_code == 4 and "already defined" in r.stderr
    f.write_text('{"mdev_type": "mtty-9"}')
    r = mc(run_cli, qemu_sim, "define", "-p", "mtty", "-u", U2, "--jsonfile", str(f))
    assert r.exit_code == 3 and defn(qemu_sim, U2) is None
    f.write_text('{"mdev_type": "mtty-1", "attrs": [{"remove": "1"}]}')
    r = mc(run_cli, qemu_sim, "define", "-p", "mtty", "-u", U2, "--jsonfile", str(f))
    assert r.exit_code == 2 and "remove" not in r.stdout and defn(qemu_sim, U2) is None


def test_modify_attributes_at_an_index(qemu_sim: Path, run_cli: Run) -> None:
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1"))

    def attrs() -> list[dict[str, str]]:
        d = defn(qemu_sim, U1)
        assert d is not None
        return d["attrs"]  # type: ignore[no-any-return]

    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr=a", "--value=1"))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr", "b", "--value", "2"))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr", "c", "--value", "3", "-i", "0"))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr", "d", "--value", "", "--index", "3"))
    assert attrs() == [{"c": "3"}, {"a": "1"}, {"b": "2"}, {"d": ""}]
    for bad in (["--addattr", "x", "--value", "1", "-i", "5"], ["--delattr", "-i", "4"], ["--addattr", "x"]):
        r = mc(run_cli, qemu_sim, "modify", "-u", U1, *bad)
        assert r.exit_code == 2, (bad, r.stderr)
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr", "x", "--value", "1", "--delattr")
    assert r.exit_code == 2 and "exclude" in r.stderr
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr", "remove", "--value", "1")
    assert r.exit_code == 2
    assert attrs() == [{"c": "3"}, {"a": "1"}, {"b": "2"}, {"d": ""}]  # nothing half-done
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--delattr", "-i", "1"))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--delattr"))
    assert attrs() == [{"c": "3"}, {"b": "2"}]


def test_modify_type_and_start_mode(qemu_sim: Path, run_cli: Run) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U1))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "-t", "mtty-2", "-a"))
    assert defn(qemu_sim, U1) == {"mdev_type": "mtty-2", "start": "auto", "attrs": []}
    assert ok(mc(run_cli, qemu_sim, "list")) == f"{U1} mtty mtty-2 auto (defined)\n\n"  # mdevctl shows the file
    assert (qemu_sim / f"sys/bus/mdev/devices/{U1}/mdev_type").resolve().name == "mtty-1"  # running: unchanged
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--manual", "-p", "mtty"))
    assert defn(qemu_sim, U1) == {"mdev_type": "mtty-2", "start": "manual", "attrs": []}
    assert mc(run_cli, qemu_sim, "modify", "-u", U1, "-a", "-m").exit_code == 2
    assert mc(run_cli, qemu_sim, "modify", "-u", U1, "-t", "mtty-9").exit_code == 3
    assert mc(run_cli, qemu_sim, "modify", "-u", U2, "-a").exit_code == 3  # not defined
    assert mc(run_cli, qemu_sim, "modify", "-u", U1, "-p", "other", "-a").exit_code == 3
    doc = json.loads(ok(run_cli(qemu_sim, "mdev", "modify", U1, "-m", "--json")))
    assert doc["changed"] is False  # already manual: nothing to do


def test_undefine_and_stop_short_flags(qemu_sim: Path, run_cli: Run) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U1))
    assert mc(run_cli, qemu_sim, "undefine", "-u", U1, "-p", "other").exit_code == 3
    assert ok(mc(run_cli, qemu_sim, "undefine", "-u", U1, "-p", "mtty")) == ""
    assert defn(qemu_sim, U1) is None and active(qemu_sim) == [U1]  # the instance keeps running
    assert ok(mc(run_cli, qemu_sim, "stop", "-u", U1)) == ""
    assert active(qemu_sim) == []
    assert mc(run_cli, qemu_sim, "stop", "-u", U1).exit_code == 3
    assert mc(run_cli, qemu_sim, "stop").exit_code == 2


# ------------------------------------------------------------------ start


def test_start_transient_defined_and_jsonfile(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    new = ok(mc(run_cli, qemu_sim, "start", "-p", "mtty", "-t", "mtty-2")).strip()
    assert active(qemu_sim) == [new] and defn(qemu_sim, new) is None  # transient: no definition
    assert ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1")) == ""
    f = tmp_path / "t.json"
    f.write_text('{"mdev_type": "mtty-1", "start": "manual", "attrs": []}')
    from_file = ok(mc(run_cli, qemu_sim, "start", "-p", "mtty", "--jsonfile", str(f))).strip()
    assert from_file in active(qemu_sim) and len(active(qemu_sim)) == 3
    assert mc(run_cli, qemu_sim, "start", "-p", "mtty", "-t", "mtty-1", "--jsonfile", str(f)).exit_code == 2
    assert mc(run_cli, qemu_sim, "start", "--jsonfile", str(f)).exit_code == 2
    assert mc(run_cli, qemu_sim, "start", "-t", "mtty-1").exit_code == 2  # type without parent
    assert mc(run_cli, qemu_sim, "start", "-p", "mtty").exit_code == 2  # insufficiently specified
    assert mc(run_cli, qemu_sim, "start", "-p", "nosuch", "-t", "mtty-1").exit_code == 1  # mdevctl's answer
    ok(mc(run_cli, qemu_sim, "define", "-u", U2, "-p", "mtty", "-t", "mtty-1"))
    r = mc(run_cli, qemu_sim, "start", "-u", U2, "-t", "mtty-2")
    assert r.exit_code == 4 and "defined as mtty-1" in r.stderr
    assert ok(mc(run_cli, qemu_sim, "start", "-u", U2)) == "" and U2 in active(qemu_sim)


def test_start_of_a_definition_whose_parent_is_absent_fails(qemu_sim: Path, run_cli: Run) -> None:
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "0000:99:00.0", "-t", "nvidia-1"))
    r = mc(run_cli, qemu_sim, "start", "-u", U1)
    assert r.exit_code == 1 and "Unable to find parent device '0000:99:00.0'" in r.stderr
    doc = json.loads(ok(run_cli(qemu_sim, "mdev", "start", U1, "--json")))  # vgpukit's own form: a status
    assert doc["results"][0]["status"] == "parent-absent"


def test_start_parent_mdevs_is_start_all_for_one_parent(qemu_sim: Path, run_cli: Run) -> None:
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1", "-a"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U2, "-p", "mtty", "-t", "mtty-1"))
    assert ok(mc(run_cli, qemu_sim, "start-parent-mdevs", "mtty")) == ""
    assert active(qemu_sim) == [U1]


# ------------------------------------------------------------------ call-out scripts (real processes)

LOG_SCRIPT = """#!/bin/sh
[ "$6" = capabilities ] && exit 0  # a script without versions (mdevctl 1.2's protocol): not logged
echo "$(basename $0) $* <$(cat)>" >> {log}
[ "$4" = get ] && {{ echo '[{{"from":"get"}}]'; exit 0; }}
[ "$4" = pre ] && [ -e {veto} ] && {{ echo "no, not $6" >&2; exit 3; }}
exit 0
"""


@pytest.fixture
def scripts(qemu_sim: Path, tmp_path: Path) -> Path:
    """A logging call-out (vetoes ``pre`` while tmp/veto exists), one that claims no type (exit 2), one
    that is not executable, and a failing notifier; returns the log file."""
    log = tmp_path / "log"
    base = qemu_sim / "etc/mdevctl.d/scripts.d"
    (base / "callouts").mkdir(parents=True)
    (base / "notifiers").mkdir()
    (base / "callouts/50-log").write_text(LOG_SCRIPT.format(log=log, veto=tmp_path / "veto"))
    (base / "callouts/10-other").write_text(
        f'#!/bin/sh\n[ "$6" = capabilities ] && exit 2\necho "other $4" >> {log}\nexit 2\n'
    )
    (base / "callouts/20-not-executable").write_text("#!/bin/sh\nexit 1\n")
    (base / "notifiers/n").write_text(f'#!/bin/sh\necho "$(basename $0) $*" >> {log}\nexit 7\n')
    for p in [base / "callouts/50-log", base / "callouts/10-other", base / "notifiers/n"]:
        p.chmod(0o755)
    return log


def _events(log: Path) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    log.write_text("")
    return lines


def test_callouts_around_each_action(qemu_sim: Path, run_cli: Run, scripts: Path) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    conf = '{"mdev_type":"mtty-1","start":"manual","attrs":[]}'
    tail = f"-u {U1} -p mtty"
    assert _events(scripts) == [
        "other pre",  # answered 2: not its type, the next script is asked
        f"50-log -t mtty-1 -e pre -a start -s none {tail} <{conf}>",
        f"50-log -t mtty-1 -e post -a start -s success {tail} <{conf}>",
        f"n -t mtty-1 -e notify -a start -s success {tail}",
    ]
    ok(mc(run_cli, qemu_sim, "define", "-u", U1))  # get: the attributes come from the script
    assert defn(qemu_sim, U1) == {"mdev_type": "mtty-1", "start": "manual", "attrs": [{"from": "get"}]}
    ev = _events(scripts)
    assert ev[:2] == ["other get", f"50-log -t mtty-1 -e get -a attributes -s none {tail} <>"]
    rest = [e.split(" -s ")[0].split(" -e ")[1] for e in ev[2:] if not e.startswith("other")]
    assert rest == ["pre -a define", "post -a define", "notify -a define"]
    for args, action in [
        (["modify", "-u", U1, "-a"], "modify"),
        (["stop", "-u", U1], "stop"),
        (["undefine", "-u", U1], "undefine"),
    ]:
        ok(mc(run_cli, qemu_sim, *args))
        assert [e.split()[6] for e in _events(scripts) if not e.startswith("other")] == [action] * 3


def test_pre_callout_veto_changes_nothing(
    qemu_sim: Path, run_cli: Run, scripts: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "veto").touch()
    r = mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1")
    assert r.exit_code == 1 and "refused to start" in r.stderr
    assert "50-log: no, not start" in caplog.text  # the script's stderr, as a warning
    assert active(qemu_sim) == []
    ev = _events(scripts)
    assert ev[-1] == f"n -t mtty-1 -e notify -a start -s none -u {U1} -p mtty"  # notified, state none; no post
    assert not any("-e post" in e for e in ev)
    r = mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1")
    assert r.exit_code == 1 and defn(qemu_sim, U1) is None
    r = run_cli(qemu_sim, "mdev", "create", "--type", "mtty-1", "--count", "3")  # vgpukit's own verbs too
    assert r.exit_code == 1 and active(qemu_sim) == []
    (tmp_path / "veto").unlink()
    _events(scripts)
    ok(run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U1, "--define"))
    assert [e.split()[6] for e in _events(scripts) if not e.startswith("other")] == [
        "start",  # pre start, pre define, post define, notify define, post start, notify start
        "define",
        "define",
        "define",
        "start",
        "start",
    ]


def test_post_sees_failure(qemu_sim: Path, run_cli: Run, scripts: Path) -> None:
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--addattr", "nosuch", "--value", "1"))
    _events(scripts)
    r = mc(run_cli, qemu_sim, "start", "-u", U1)  # the attribute does not exist: start fails, rolled back
    assert r.exit_code == 1 and active(qemu_sim) == []
    ev = [e for e in _events(scripts) if not e.startswith("other")]
    assert "-e post -a start -s failure" in ev[1] and "-e notify -a start -s failure" in ev[2]


def test_get_attributes_when_listing_undefined_active_devices(qemu_sim: Path, run_cli: Run, scripts: Path) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    _events(scripts)
    assert json.loads(ok(mc(run_cli, qemu_sim, "list", "--dumpjson", "-u", U1)))["attrs"] == [{"from": "get"}]
    assert any("-e get -a attributes" in e for e in _events(scripts))
    ok(mc(run_cli, qemu_sim, "list", "-d"))  # definitions: no script asked
    assert _events(scripts) == []


def test_a_failing_get_refuses_define(qemu_sim: Path, run_cli: Run, scripts: Path) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    log_script = qemu_sim / "etc/mdevctl.d/scripts.d/callouts/50-log"
    log_script.write_text("#!/bin/sh\n[ \"$4\" = get ] && echo 'not json'\nexit 0\n")
    r = mc(run_cli, qemu_sim, "define", "-u", U1)
    assert r.exit_code == 2 and defn(qemu_sim, U1) is None
    assert ok(mc(run_cli, qemu_sim, "list")) == f"{U1} mtty mtty-1 manual\n\n"  # list: not disruptive


def test_dry_run_runs_no_script(qemu_sim: Path, run_cli: Run, scripts: Path) -> None:
    ok(run_cli(qemu_sim, "mdev", "start", "-u", U1, "-p", "mtty", "-t", "mtty-1", "--dry-run"))
    assert _events(scripts) == [] and active(qemu_sim) == []


# ------------------------------------------------------------------ deliberate differences (docs/mdev.md)


def test_differences_from_mdevctl(
    qemu_sim: Path, run_cli: Run, scripts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    assert mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1").exit_code == 1  # as mdevctl
    ok(mc(run_cli, qemu_sim, "define", "-u", U2, "-p", "mtty", "-t", "mtty-1"))
    (tmp_path / "veto").touch()
    assert mc(run_cli, qemu_sim, "undefine", "-u", U2).exit_code == 1  # mdevctl 1.2: exit 0
    assert defn(qemu_sim, U2) is not None
    (tmp_path / "veto").unlink()
    assert mc(run_cli, qemu_sim, "define", "-u", U2, "-p", "other", "-t", "x").exit_code == 4  # one parent per UUID
    assert mc(run_cli, qemu_sim, "stop", "-u", U1.replace("-", "")).exit_code == 2  # 36-character form only
    _events(scripts)
    ok(mc(run_cli, qemu_sim, "modify", "-u", U2, "-m"))  # already manual: no change, no scripts
    assert _events(scripts) == []
    from vgpukit.mdev import callouts

    (qemu_sim / "etc/mdevctl.d/scripts.d/callouts/05-slow").write_text("#!/bin/sh\nsleep 5\n")
    (qemu_sim / "etc/mdevctl.d/scripts.d/callouts/05-slow").chmod(0o755)
    monkeypatch.setattr(callouts, "TIMEOUT", 0.3)
    r = mc(run_cli, qemu_sim, "modify", "-u", U2, "-a")  # a pre script that hangs vetoes
    assert r.exit_code == 1 and "timed out" in r.stderr and defn(qemu_sim, U2)["start"] == "manual"  # type: ignore[index]
