"""Choosing parents: pack (default), spread, NUMA, all-or-nothing; and the pure planner."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import Run, as_json
from vgpukit.errors import NoCapacity
from vgpukit.holders import vm_name_from_cmdline
from vgpukit.mdev.placement import SPREAD, Slot, plan

A, B, C = "0000:01:00.0", "0000:81:00.0", "0000:82:00.0"


def _where(r: Result) -> Counter[str]:
    assert r.exit_code == 0, r.stderr
    return Counter(i["parent"] for i in as_json(r)["instances"])


def test_pack_fills_fullest_parent_first(three_parents: Path, run_cli: Run) -> None:
    assert _where(run_cli(three_parents, "mdev", "create", B, "demo-1", "--json")) == {B: 1}
    # B is partly used: pack continues there and keeps A and C whole
    assert _where(run_cli(three_parents, "mdev", "create", "--type", "demo-1", "--count", "7", "--json")) == {B: 7}
    assert _where(run_cli(three_parents, "mdev", "create", "--type", "demo-4", "--count", "3", "--json")) == {
        A: 2,
        C: 1,
    }


def test_spread_and_numa(three_parents: Path, run_cli: Run) -> None:
    r = run_cli(three_parents, "mdev", "create", "--type", "demo-1", "--count", "6", "--spread", "--json")
    assert _where(r) == {A: 2, B: 2, C: 2}
    r = run_cli(three_parents, "mdev", "create", "--type", "demo-4", "--count", "2", "--numa", "1", "--json")
    assert _where(r) == {B: 1, C: 1}
    r = run_cli(three_parents, "mdev", "create", "--type", "demo-4", "--count", "1", "--numa", "1")
    assert r.exit_code == 4 and "do not fit" in r.stderr
    assert run_cli(three_parents, "mdev", "create", "--type", "demo-1", "--numa", "7").exit_code == 3


def test_request_that_does_not_fit_creates_nothing(three_parents: Path, run_cli: Run) -> None:
    r = run_cli(three_parents, "mdev", "create", "--type", "demo-4", "--count", "7")
    assert r.exit_code == 4 and "6 available in total" in r.stderr
    assert not (three_parents / "sys/bus/mdev/devices").exists()


def test_parent_by_device_name(three_parents: Path, run_cli: Run) -> None:
    assert _where(run_cli(three_parents, "mdev", "create", "gpu1", "demo-4", "--json")) == {B: 1}
    assert _where(run_cli(three_parents, "mdev", "create", "81:00.0", "demo-4", "--json")) == {B: 1}
    assert as_json(run_cli(three_parents, "mdev", "types", "gpu2", "--json"))["parents"][0]["parent"] == C


def test_planner_pure() -> None:
    cands = [("p1", 4), ("p2", 2), ("p3", 4)]
    assert plan(cands, "t", 5) == [Slot("p2", 2), Slot("p1", 3)]
    assert plan(cands, "t", 5, SPREAD) == [Slot("p1", 3), Slot("p3", 2)]
    with pytest.raises(NoCapacity):
        plan(cands, "t", 11)


def test_vm_name_from_cmdline() -> None:
    assert vm_name_from_cmdline("qemu\0-name\0guest=db1,debug-threads=on\0-m\0512") == "db1"
    assert vm_name_from_cmdline("qemu\0-name\0plain\0") == "plain"
    assert vm_name_from_cmdline("bash\0-c\0") is None
    assert vm_name_from_cmdline(None) is None
