"""mdevctl 1.4's call-out features as steps: --force, versioned scripts, both script directories,
and what recovery tells the scripts after a command died between its change and its commit."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Run, sim_host
from tests.mdev.test_mdevctl_cli import U1, active, defn, mc, ok
from vgpukit.engine import Env
from vgpukit.engine import journal as jr
from vgpukit.engine.executor import recover
from vgpukit.mdev.steps import CalloutPre, CreateMdev

LOGGING = '#!/bin/sh\necho "{name} $2 $4 $6 $8" >> {log}\n{body}\n'


def _script(sim: Path, where: str, name: str, log: Path, body: str, kind: str = "callouts") -> None:
    path = sim / where / kind / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LOGGING.format(name=name, log=log, body=body))
    path.chmod(0o755)


def _log(log: Path) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    log.write_text("")
    return lines


ETC, LIB = "etc/mdevctl.d/scripts.d", "usr/lib/mdevctl/scripts.d"
VETO = '[ "$6" = capabilities ] && exit 2\n[ "$4" = pre ] && exit 1\nexit 0'


def test_force_goes_on_despite_a_veto(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    _script(qemu_sim, ETC, "10-veto", tmp_path / "log", VETO)
    assert mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1").exit_code == 1
    assert defn(qemu_sim, U1) is None
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1", "--force"))
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "--force"))
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--auto", "--force"))
    assert defn(qemu_sim, U1)["start"] == "auto" and active(qemu_sim) == [U1]  # type: ignore[index]
    assert mc(run_cli, qemu_sim, "stop", "-u", U1).exit_code == 1 and active(qemu_sim) == [U1]
    ok(mc(run_cli, qemu_sim, "stop", "-u", U1, "--force"))
    ok(mc(run_cli, qemu_sim, "undefine", "-u", U1, "--force"))
    assert active(qemu_sim) == [] and defn(qemu_sim, U1) is None


SUPPORTS = {"supports": {"version": 2, "actions": ["start", "stop", "define"], "events": ["pre", "post", "get"]}}


def test_a_versioned_script_claims_the_device_and_the_others_are_skipped(
    qemu_sim: Path, run_cli: Run, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    answer = json.dumps(SUPPORTS)
    _script(qemu_sim, ETC, "05-old", log, "exit 0")  # unversioned: would claim everything
    _script(qemu_sim, ETC, "50-new", log, f"[ \"$6\" = capabilities ] && {{ echo '{answer}'; exit 0; }}\nexit 0")
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    assert _log(log) == [
        "05-old mtty-1 get capabilities none",  # asked, answered without a version: not its device
        "50-new mtty-1 get capabilities none",
        "50-new mtty-1 pre start none",
        "50-new mtty-1 post start success",  # the same script, not asked again
    ]
    # an action the script does not list is refused before the change (pre), as mdevctl does
    ok(mc(run_cli, qemu_sim, "define", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    r = mc(run_cli, qemu_sim, "modify", "-u", U1, "--auto")
    assert r.exit_code == 1 and "does not support action modify" in r.stderr
    assert defn(qemu_sim, U1)["start"] == "manual"  # type: ignore[index]


def test_both_script_directories_usr_lib_first(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    log = tmp_path / "log"
    _script(qemu_sim, LIB, "10-same", log, '[ "$6" = capabilities ] && exit 2\nexit 0')
    _script(qemu_sim, ETC, "10-same", log, '[ "$6" = capabilities ] && exit 2\nexit 1')  # would veto
    _script(qemu_sim, LIB, "n", log, "exit 0", kind="notifiers")
    _script(qemu_sim, ETC, "n", log, "exit 0", kind="notifiers")
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ev = [e for e in _log(log) if "capabilities" not in e]
    assert ev == [
        "10-same mtty-1 pre start none",  # /usr/lib's: it claims the device, /etc's is never asked
        "10-same mtty-1 post start success",
        "n mtty-1 notify start success",  # every notifier of both directories
        "n mtty-1 notify start success",
    ]


def test_recovery_after_a_kill_before_the_commit_tells_the_scripts_it_failed(
    qemu_sim: Path, run_cli: Run, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    _script(qemu_sim, ETC, "50-log", log, '[ "$6" = capabilities ] && exit 2\nexit 0')
    host = sim_host(qemu_sim)
    # what a `start` killed after its change, before its commit, leaves: the instance and the journal
    book = jr.Journal(host, "vgpukit mdev start (killed)")
    pre = CalloutPre("start", U1, "mtty", "mtty-1")
    create = CreateMdev("mtty", "mtty-1", U1)
    env = Env(host)
    book.add_all([pre.inverse(env).to_dict(), create.inverse(env).to_dict()])  # type: ignore[union-attr]
    pre.apply(env)
    create.apply(env)
    import os

    os.close(book.fd)  # killed: the journal stays
    assert active(qemu_sim) == [U1]
    _log(log)
    lines = recover(Env(sim_host(qemu_sim)))
    assert active(qemu_sim) == [] and not jr.pending(host)
    assert any("that start of" in line and "failed" in line for line in lines)
    assert [e for e in _log(log) if "capabilities" not in e] == ["50-log mtty-1 post start failure"]


def test_plans_show_the_callout_steps_and_a_dry_run_runs_none(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    log = tmp_path / "log"
    _script(qemu_sim, ETC, "50-log", log, '[ "$6" = capabilities ] && exit 2\nexit 0')
    doc = tmp_path / "host.yaml"
    doc.write_text(
        "version: vgpukit.host/v1\nconfigs:\n  a:\n    mdev:\n      - {parent: mtty, type: mtty-1, count: 1}\n"
    )
    for args in (
        ["diff", "-f", str(doc)],
        ["apply", "-f", str(doc), "--dry-run"],
        ["mdev", "create", "mtty", "mtty-1", "--dry-run"],
    ):
        plan = json.loads(ok(run_cli(qemu_sim, *args, "--json")))["plan"]
        assert plan[0].startswith("ask the call-out scripts before start of "), (args, plan)
        assert plan[-1].startswith("tell the call-out scripts that start of "), (args, plan)
    assert _log(log) == [] and active(qemu_sim) == []


def test_vgpu_create_on_mdev_honours_a_veto(tmp_path: Path, run_cli: Run) -> None:
    from tests.conftest import make_sim

    sim = make_sim(tmp_path / "t4", "t4-mdev")
    _script(sim, LIB, "10-veto", tmp_path / "log", VETO)
    r = run_cli(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2", "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["error"] == "callout-refused"
    assert active(sim) == []  # nothing created


def test_force_on_modify_jsonfile_and_live_defined(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    """The modify paths that came with the shim (``--jsonfile``, ``--live --defined``) plan their
    call-out steps like every modify: a veto refuses them, ``--force`` goes on (the live change still
    needs a versioned script that takes it)."""
    ok(mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1"))
    ok(mc(run_cli, qemu_sim, "define", "-u", U1))
    _script(qemu_sim, ETC, "10-veto", tmp_path / "log", VETO)
    doc = tmp_path / "f.json"
    doc.write_text('{"mdev_type": "mtty-1", "start": "auto", "attrs": []}')
    assert mc(run_cli, qemu_sim, "modify", "-u", U1, "--jsonfile", str(doc)).exit_code == 1
    assert defn(qemu_sim, U1)["start"] == "manual"  # type: ignore[index]
    ok(mc(run_cli, qemu_sim, "modify", "-u", U1, "--jsonfile", str(doc), "--force"))
    assert defn(qemu_sim, U1)["start"] == "auto"  # type: ignore[index]
    doc.write_text('{"mdev_type": "mtty-1", "start": "manual", "attrs": []}')
    live = ("modify", "-u", U1, "--live", "--defined", "--jsonfile", str(doc))
    assert mc(run_cli, qemu_sim, *live).exit_code == 1
    assert defn(qemu_sim, U1)["start"] == "auto"  # type: ignore[index]
    # --force goes past the veto, not past the live change itself: no versioned script takes it (mdevctl)
    r = mc(run_cli, qemu_sim, *live, "--force")
    assert r.exit_code == 5 and "No callout script with version support found that supports live modify" in r.stderr
    assert defn(qemu_sim, U1)["start"] == "auto"  # type: ignore[index]
