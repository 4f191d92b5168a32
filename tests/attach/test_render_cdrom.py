"""``render domain --cdrom`` takes one ISO (the VM has one CD-ROM drive: a second is refused, exit 2,
not kept silently in place of the first), says when the file is an image rather than an ISO, and an
option's error names the option once."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Run

IMAGES = "/var/lib/libvirt/images"
BASE = ["render", "domain", "--name", "vm", "--memory", "1G", "--vcpus", "2"]


def test_cdrom_is_given_once(sim_dir: Path, run_cli: Run) -> None:
    res = run_cli(sim_dir, *BASE, "--cdrom", f"{IMAGES}/a.iso", "--cdrom", f"{IMAGES}/debian-12-netinst.iso")
    assert res.exit_code == 2 and "--cdrom given 2 times" in res.stderr, res.stderr
    assert run_cli(sim_dir, *BASE, "--cdrom", f"{IMAGES}/a.iso").exit_code == 3  # the one given is checked


def test_an_image_as_cdrom_is_said(sim_dir: Path, run_cli: Run) -> None:
    res = run_cli(sim_dir, *BASE, "--cdrom", f"{IMAGES}/demo.qcow2")
    assert res.exit_code == 0 and "demo.qcow2 is a qcow2 image, not an ISO" in res.stderr, res.stderr
    res = run_cli(sim_dir, *BASE, "--cdrom", f"{IMAGES}/debian-12-netinst.iso")
    assert res.exit_code == 0 and "not an ISO" not in res.stderr


def test_an_option_error_names_the_option_once(sim_dir: Path, run_cli: Run) -> None:
    res = run_cli(sim_dir, "render", "domain", "--name", "vm", "--memory", "3Q", "--vcpus", "2")
    assert res.exit_code == 2 and res.stderr.count("--memory") == 1, res.stderr
    assert "Invalid value for '--memory': must be a size" in res.stderr
