"""Long outputs: a change prints a summary (a line per GPU with its slot map, per PF with its VFs, a
few lines per area of a host config), every step with ``-v``; ``--json`` always has every step and
the summary fields, with or without ``-v``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Run

ALL_BALANCED = """version: v1
mig-configs:
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
"""
SLOTS = "slots 0-1:2g.10gb 2:1g.5gb 3:1g.5gb 4-7:3g.20gb"
GPUS = ["0000:03:00.0", "0000:04:00.0", "0000:23:00.0", "0000:24:00.0",
        "0000:83:00.0", "0000:84:00.0", "0000:a3:00.0", "0000:a4:00.0"]  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "mig.yaml"
    path.write_text(ALL_BALANCED)
    return str(path)


def test_mig_apply_prints_a_line_per_gpu_with_its_slot_map(sim_dir: Path, run_cli: Run, config: str) -> None:
    dry = run_cli(sim_dir, "mig", "apply", "-f", config, "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0] == "dry run, nothing changed. Plan: 80 steps (-v lists them)"
    assert lines[1:] == [f"  gpu{i} ({bdf})  MIG on  {SLOTS}  (10 steps)" for i, bdf in enumerate(GPUS)]
    done = run_cli(sim_dir, "mig", "apply", "-f", config)
    assert done.exit_code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == ["done: 80 steps (-v lists them)"] + [
        f"gpu{i} ({bdf})  MIG on  {SLOTS}  (10 steps)" for i, bdf in enumerate(GPUS)
    ]  # the map read back from the GPUs is the one the dry run planned
    again = run_cli(sim_dir, "mig", "apply", "-f", config)
    assert again.stdout.splitlines()[0] == "nothing to do: the host already matches the request"
    assert again.stdout.splitlines()[1] == f"gpu0 ({GPUS[0]})  MIG on  {SLOTS}  (unchanged)"
    assert len(again.stdout.splitlines()) == 9


def test_mig_apply_verbose_lists_every_step_and_the_gpus(sim_dir: Path, run_cli: Run, config: str) -> None:
    dry = run_cli(sim_dir, "mig", "apply", "-f", config, "--dry-run", "-v")
    assert dry.stdout.count("\n  - gpu") == 80
    done = run_cli(sim_dir, "-v", "mig", "apply", "-f", config)  # before the command, as a global option
    assert done.exit_code == 0, done.stderr
    assert done.stdout.count("done: gpu") == 80 and done.stdout.count("  memory slots  ") == 8


def test_mig_json_has_every_step_and_the_summary_with_or_without_v(sim_dir: Path, run_cli: Run, config: str) -> None:
    plain = json.loads(run_cli(sim_dir, "mig", "apply", "-f", config, "--dry-run", "--json").stdout)
    verbose = json.loads(run_cli(sim_dir, "mig", "apply", "-f", config, "--dry-run", "--json", "-v").stdout)
    assert plain == verbose
    assert len(plain["plan"]) == 80 and len(plain["steps"]) == 80
    first = plain["summary"][0]
    assert first["gpu"] == "gpu0" and first["mig"] is True and first["steps"] == 10
    assert [(s["start"], s["size"], s["profile"], s["compute_instances"]) for s in first["slots"]] == [
        (0, 2, "2g.10gb", [2]), (2, 1, "1g.5gb", [1]), (3, 1, "1g.5gb", [1]), (4, 4, "3g.20gb", [3])
    ]  # fmt: skip
    done = json.loads(run_cli(sim_dir, "mig", "apply", "-f", config, "--json").stdout)
    assert done["summary"] == plain["summary"]


def test_partition_shows_compute_instances_that_split_a_slice(sim_dir: Path, run_cli: Run) -> None:
    args = ("partition", "gpu0", "--mig", "3g.20gb,1g.5gb", "--ci", "1c.3g.20gb=3")
    dry = run_cli(sim_dir, *args, "--dry-run")
    res = run_cli(sim_dir, *args)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[-1] == f"gpu0 ({GPUS[0]})  MIG on  slots 3:1g.5gb 4-7:3g.20gb(3x1c)  (8 steps)"
    assert dry.stdout.splitlines()[-1] == "  " + res.stdout.splitlines()[-1]  # as planned
    res = run_cli(sim_dir, "mig", "destroy", "gpu0", "--all")
    assert res.stdout.splitlines()[-1] == f"gpu0 ({GPUS[0]})  MIG on  no MIG devices  (6 steps)", res.stdout
    res = run_cli(sim_dir, "mig", "disable", "gpu0")
    assert res.stdout.splitlines() == [  # a plan of 3 steps or fewer is listed, the summary under it
        f"done: gpu0 ({GPUS[0]}): disable MIG mode",
        f"done: gpu0 ({GPUS[0]}): reset the GPU to apply the MIG mode",
        f"gpu0 ({GPUS[0]})  MIG off  (2 steps)",
    ], res.stdout


def test_sriov_enable_of_many_vfs_is_a_line_per_pf(sim_dir: Path, run_cli: Run) -> None:
    args = ("sriov", "enable", "nic0", "--vfs", "16", "--driver", "vfio-pci")
    dry = run_cli(sim_dir, *args, "--dry-run")
    assert dry.stdout.splitlines() == [
        "dry run, nothing changed. Plan: 19 steps (-v lists them)",
        "  nic0 (0000:05:00.0)  16 VFs on vfio-pci",
    ]
    done = run_cli(sim_dir, *args)
    assert done.stdout.splitlines() == [
        "done: 19 steps (-v lists them)",
        "nic0 (0000:05:00.0)  16 VFs (0000:05:00.2..0000:05:02.1): 16 on vfio-pci",
    ]
    run_cli(sim_dir, "sriov", "disable", "nic0")
    verbose = run_cli(sim_dir, *args, "-v")
    assert verbose.stdout.count("done: bind VF") == 16


HOST = """version: vgpukit.host/v1
configs:
  a100:
    sriov:
      - {match: ConnectX-6, vfs: 8, driver: vfio-pci}
    mig: all-balanced
""" + ALL_BALANCED.removeprefix("version: v1\n")


def test_host_config_apply_diff_and_assert_fold_alike_steps(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "host.yaml"
    path.write_text(HOST)
    diff = run_cli(sim_dir, "diff", "-f", str(path))
    assert diff.exit_code == 0, diff.stderr
    lines = diff.stdout.splitlines()
    assert lines[0] == "124 differences (-v lists them):" and len(lines) < 20, diff.stdout
    assert "  - bind VF 0 (0000:05:00.2) to vfio-pci, and 31 more like it" in lines
    assert "  - gpu0 (0000:03:00.0): create GPU instance 3g.20gb at slots 4-7, and 7 more like it" in lines
    every = run_cli(sim_dir, "diff", "-f", str(path), "-v").stdout.splitlines()
    assert len([line for line in every if line.startswith("  - ")]) == 124
    unmatched = run_cli(sim_dir, "assert", "-f", str(path))
    assert unmatched.exit_code == 1 and len(unmatched.stdout.splitlines()) < 20
    done = run_cli(sim_dir, "apply", "-f", str(path))
    assert done.exit_code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["done: 124 steps (-v lists them)", "sriov: 44 steps"] and len(lines) < 20, done.stdout
    assert "mig: 80 steps" in lines
    doc = json.loads(run_cli(sim_dir, "apply", "-f", str(path), "--json").stdout)  # again: nothing left
    assert doc["plan"] == [] and doc["changed"] is False


def test_mdev_list_keeps_its_own_v(sim_dir: Path, run_cli: Run) -> None:
    """``-v`` is global, but a command with its own ``-v`` (mdevctl's ``list -v``) keeps it."""
    assert run_cli(sim_dir, "mdev", "list", "-v").exit_code == 0


def test_condense_folds_lines_that_differ_in_numbers_addresses_and_aliases() -> None:
    from vgpukit.words import condense

    lines = [
        "set sriov_drivers_autoprobe of 0000:05:00.0 to 0 while the VFs are created",
        "bind VF 0 (0000:05:00.2) to vfio-pci",
        "bind VF 1 (0000:05:00.3) to vfio-pci",
        "gpu0 (0000:03:00.0): create GPU instance 1g.5gb at slot 2",
        "gpu7 (0000:a4:00.0): create GPU instance 1g.5gb at slot 3",
        "gpu0 (0000:03:00.0): create GPU instance 2g.10gb at slots 0-1",  # another profile: its own line
        "define 5a1c0de0-0000-4000-8000-00000000d001 on mtty",
        "define 5a1c0de0-0000-4000-8000-00000000d002 on mtty",
    ]
    assert condense(lines) == [
        "set sriov_drivers_autoprobe of 0000:05:00.0 to 0 while the VFs are created",
        "bind VF 0 (0000:05:00.2) to vfio-pci, and 1 more like it",
        "gpu0 (0000:03:00.0): create GPU instance 1g.5gb at slot 2, and 1 more like it",
        "gpu0 (0000:03:00.0): create GPU instance 2g.10gb at slots 0-1",
        "define 5a1c0de0-0000-4000-8000-00000000d001 on mtty, and 1 more like it",
    ]
