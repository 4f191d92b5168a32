"""mdevctl's answers where scripts (and libvirt) look at them, under ``vgpukit mdev --mdevctl``: an
absent parent, a device that is already running; vgpukit's own commands keep vgpukit's answers
(simulated QEMU guest, mtty parent). docs/mdev.md, "mdevctl's answers"."""

from __future__ import annotations

from pathlib import Path

from click.testing import Result

from tests.conftest import Run

U1 = "5a1c0de0-0000-4000-8000-00000000a001"
U2 = "5a1c0de0-0000-4000-8000-00000000a002"


def mc(run: Run, sim: Path, *args: str) -> Result:
    return run(sim, "mdev", "--mdevctl", *args)


def test_types_of_an_absent_parent_is_an_empty_listing(qemu_sim: Path, run_cli: Run) -> None:
    r = mc(run_cli, qemu_sim, "types", "-p", "nosuch")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "\n", "")
    r = mc(run_cli, qemu_sim, "types", "-p", "nosuch", "--dumpjson")
    assert (r.exit_code, r.stdout) == (0, "[]\n")
    assert run_cli(qemu_sim, "mdev", "types", "-p", "nosuch").exit_code == 3  # vgpukit's own: not found


def test_start_of_a_running_device_fails(qemu_sim: Path, run_cli: Run) -> None:
    assert mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1").exit_code == 0
    r = mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1")
    assert r.exit_code == 1 and r.stderr == "vgpukit: error: Device already exists\n"
    r = mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-2")
    assert r.exit_code == 1 and "Device exists with different type" in r.stderr
    assert mc(run_cli, qemu_sim, "define", "-u", U1).exit_code == 0
    r = mc(run_cli, qemu_sim, "start", "-u", U1)
    assert r.exit_code == 1 and "Device already exists" in r.stderr
    r = run_cli(qemu_sim, "mdev", "start", U1, "--json")  # vgpukit's own start: nothing to do
    assert r.exit_code == 0 and '"active"' in r.stdout


def test_a_missing_parent_in_mdevctls_words(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    r = mc(run_cli, qemu_sim, "start", "-p", "nosuch", "-t", "mtty-1")
    assert r.exit_code == 1 and r.stderr == "vgpukit: error: Unable to find parent device 'nosuch'\n"
    r = mc(run_cli, qemu_sim, "start", "-p", "MTTY", "-t", "mtty-1")
    assert r.exit_code == 1 and r.stderr.endswith("Unable to find parent device 'MTTY'. Did you mean 'mtty'?\n")
    f = tmp_path / "d.json"
    f.write_text('{"mdev_type": "mtty-1", "start": "manual", "attrs": []}')
    r = mc(run_cli, qemu_sim, "start", "-p", "Mtty", "--jsonfile", str(f))
    assert r.exit_code == 1 and "Did you mean 'mtty'?" in r.stderr
    assert mc(run_cli, qemu_sim, "define", "-u", U2, "-p", "0000:99:00.0", "-t", "nvidia-1").exit_code == 0
    r = mc(run_cli, qemu_sim, "start", "-u", U2)
    assert r.exit_code == 1 and "Unable to find parent device '0000:99:00.0'" in r.stderr
    r = mc(run_cli, qemu_sim, "start", "-p", "mtty", "-t", "mtty-9")
    assert r.exit_code == 1 and "Parent mtty does not support mdev type mtty-9" in r.stderr
    r = run_cli(qemu_sim, "mdev", "start", "-p", "nosuch", "-t", "mtty-1")  # vgpukit's own words
    assert r.exit_code == 3 and "no mdev parent nosuch" in r.stderr


def test_a_refused_start_runs_the_scripts_as_mdevctl(qemu_sim: Path, run_cli: Run) -> None:
    """mdevctl runs ``pre`` before it finds the device running; ``post`` then says ``failure``."""
    log = qemu_sim / "log"
    callouts = qemu_sim / "etc/mdevctl.d/scripts.d/callouts"
    callouts.mkdir(parents=True)
    (callouts / "50-log").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexit 0\n')
    (callouts / "50-log").chmod(0o755)
    assert mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1").exit_code == 0
    log.write_text("")
    assert mc(run_cli, qemu_sim, "start", "-u", U1, "-p", "mtty", "-t", "mtty-1").exit_code == 1
    lines = [line.split() for line in log.read_text().splitlines()]
    # every script is first asked the versioned call-outs' capabilities question (mdevctl 1.4 does too)
    events = [w[3] + " " + w[7] for w in lines if w[5] != "capabilities"]
    assert events == ["pre none", "post failure"]


def test_jsonfile_from_stdin_as_libvirt_passes_it(qemu_sim: Path, run_cli: Run) -> None:
    """libvirt's nodedev-define/-create run ``mdevctl define|start --parent=P --jsonfile=/dev/stdin``."""
    doc = '{"mdev_type": "mtty-1", "start": "manual", "attrs": []}'
    r = run_cli(
        qemu_sim, "mdev", "--mdevctl", "define", "--parent=mtty", "--jsonfile=/dev/stdin", f"--uuid={U1}", stdin=doc
    )
    assert (r.exit_code, r.stdout) == (0, ""), r.stderr
    assert (qemu_sim / "etc/mdevctl.d/mtty" / U1).is_file()
    r = run_cli(qemu_sim, "mdev", "--mdevctl", "start", "-p", "mtty", "--jsonfile", "-", stdin=doc)
    assert r.exit_code == 0 and len(r.stdout.strip()) == 36, r.stderr
    r = run_cli(qemu_sim, "mdev", "--mdevctl", "start", "-p", "mtty", "--jsonfile", "-", stdin="x" * 70000)
    assert r.exit_code == 2 and "larger than" in r.stderr
