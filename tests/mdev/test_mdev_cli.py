"""mdev on the simulated QEMU guest (mtty parent: 24 ports shared by mtty-1 and mtty-2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import Run, as_json, make_sim, sim_host
from vgpukit.engine import Env, execute
from vgpukit.mdev import ops, sysfs
from vgpukit.mdev.steps import CreateMdev
from vgpukit.sim.holders import hold, release

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"


def _avail(run: Run, sim: Path) -> dict[str, int]:
    doc = as_json(run(sim, "mdev", "types", "--json"))
    return {t["type_id"]: t["available"] for p in doc["parents"] for t in p["types"]}


def _active(sim: Path) -> list[str]:
    d = sim / "sys/bus/mdev/devices"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_types_json(qemu_sim: Path, run_cli: Run) -> None:
    r = run_cli(qemu_sim, "mdev", "types", "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert doc["schema"] == "vgpukit.mdev-types/v1"
    (parent,) = doc["parents"]
    assert parent["parent"] == "mtty" and parent["pci"] is False
    names = {t["type_id"]: (t["name"], t["device_api"], t["available"]) for t in parent["types"]}
    assert names == {"mtty-1": ("Single port serial", "vfio-pci", 24), "mtty-2": ("Dual port serial", "vfio-pci", 12)}


def test_types_unknown_parent(qemu_sim: Path, run_cli: Run) -> None:
    r = run_cli(qemu_sim, "mdev", "types", "nosuch")
    assert r.exit_code == 3 and "no mdev parent" in r.stderr


def test_create_counts_fall_across_sibling_types(qemu_sim: Path, run_cli: Run) -> None:
    r = run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-2", "--uuid", U1, "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert doc["changed"] and doc["instances"] == [{"uuid": U1, "parent": "mtty", "type": "mtty-2"}]
    assert _avail(run_cli, qemu_sim) == {"mtty-1": 22, "mtty-2": 11}
    r = run_cli(qemu_sim, "mdev", "create", "mtty", "--type", "mtty-1", "--count", "3")
    assert r.exit_code == 0, r.stderr
    assert _avail(run_cli, qemu_sim) == {"mtty-1": 19, "mtty-2": 9}
    lst = as_json(run_cli(qemu_sim, "mdev", "list", "--json"))
    assert lst["schema"] == "vgpukit.mdev-list/v1"
    assert sorted(i["type"] for i in lst["instances"]) == ["mtty-1", "mtty-1", "mtty-1", "mtty-2"]
    assert all(i["in_use"] is False and i["defined"] is False for i in lst["instances"])


def test_same_uuid_twice_is_idempotent_other_type_is_conflict(qemu_sim: Path, run_cli: Run) -> None:
    assert run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-2", "--uuid", U1).exit_code == 0
    again = run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-2", "--uuid", U1, "--json")
    assert again.exit_code == 0 and as_json(again)["changed"] is False
    r = run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U1.upper())
    assert r.exit_code == 4 and "already exists" in r.stderr
    assert _active(qemu_sim) == [U1]


def test_duplicate_uuid_from_the_kernel_is_conflict(qemu_sim: Path) -> None:
    """Bypass the pre-check: the kernel's EEXIST itself is mapped (and the first create rolled back)."""
    h = sim_host(qemu_sim)
    sysfs.create(h, "mtty", "mtty-1", U1)
    try:
        execute(Env(h), [CreateMdev("mtty", "mtty-2", U2), CreateMdev("mtty", "mtty-2", U1)])
    except Exception as err:
        assert type(err).__name__ == "Conflict" and "already exists" in str(err)
        assert "rolled back the 1 step done" in str(err)
    else:
        raise AssertionError("expected a conflict")
    assert _active(qemu_sim) == [U1]  # U2 was created then removed again


def test_capacity_exhaustion_creates_nothing(qemu_sim: Path, run_cli: Run) -> None:
    r = run_cli(qemu_sim, "mdev", "create", "--type", "mtty-2", "--count", "13")
    assert r.exit_code == 4 and "do not fit" in r.stderr and "12 available" in r.stderr
    assert _active(qemu_sim) == []
    assert run_cli(qemu_sim, "mdev", "create", "--type", "mtty-2", "--count", "12").exit_code == 0
    assert _avail(run_cli, qemu_sim) == {"mtty-1": 0, "mtty-2": 0}
    r = run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-1")
    assert r.exit_code == 4 and "do not fit" in r.stderr


def test_kernel_enospc_is_no_capacity(qemu_sim: Path) -> None:
    h = sim_host(qemu_sim)
    for _ in range(12):
        sysfs.create(h, "mtty", "mtty-2", ops.new_uuid())
    try:
        sysfs.create(h, "mtty", "mtty-1", U1)
    except Exception as err:
        assert type(err).__name__ == "NoCapacity" and err.errno == 28  # type: ignore[attr-defined]
    else:
        raise AssertionError("expected ENOSPC")


def test_bad_input_touches_nothing(qemu_sim: Path, run_cli: Run) -> None:
    cases = [
        (("mtty", "mtty-1", "--uuid", U1, "--count", "2"), 2),
        (("mtty", "mtty-1", "--uuid", "not-a-uuid"), 2),
        (("mtty", "mtty-1", "--uuid", U1[:-1] + "g"), 2),
        (("mtty", "mtty-1", "--auto"), 2),
        (("mtty", "mtty-1", "--count", "0"), 2),
        (("mtty", "nosuch-1"), 3),
        (("mtty", "../x"), 2),
        (("--type", "nosuch-1"), 3),
        (("nosuchparent", "mtty-1"), 3),
    ]
    for args, code in cases:
        r = run_cli(qemu_sim, "mdev", "create", *args)
        assert r.exit_code == code, (args, r.stderr)
        assert r.stderr.count("\n") == 1, r.stderr
    assert _active(qemu_sim) == []


def test_dry_run_changes_nothing(qemu_sim: Path, run_cli: Run) -> None:
    r = run_cli(qemu_sim, "mdev", "create", "--type", "mtty-1", "--count", "2", "--define", "--dry-run", "--json")
    assert r.exit_code == 0
    doc = as_json(r)
    assert doc["dry_run"] and not doc["changed"] and len(doc["plan"]) == 4
    assert _active(qemu_sim) == [] and not (qemu_sim / "etc/mdevctl.d").exists()


def test_remove_refused_while_in_use(qemu_sim: Path, run_cli: Run) -> None:
    run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U1)
    run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U2)
    group = (qemu_sim / "sys/bus/mdev/devices" / U1 / "iommu_group").readlink().name
    pid = hold(qemu_sim, group, owner="guest=web1,debug-threads=on")
    lst = as_json(run_cli(qemu_sim, "mdev", "list", "--json"))
    used = {i["uuid"]: i["used_by"] for i in lst["instances"]}
    assert used[U1] == [{"pid": pid, "comm": "qemu-system-x86", "vm": "web1"}] and used[U2] == []
    r = run_cli(qemu_sim, "mdev", "remove", U2, U1)
    assert r.exit_code == 4 and "in use by web1" in r.stderr
    assert _active(qemu_sim) == sorted([U1, U2])  # checked before the first removal
    # the kernel's own EBUSY is mapped too
    try:
        sysfs.remove(sim_host(qemu_sim), U1)
    except Exception as err:
        assert type(err).__name__ == "Busy"
    else:
        raise AssertionError("expected EBUSY")
    release(qemu_sim, pid)
    r = run_cli(qemu_sim, "mdev", "remove", U1, U2, "--json")
    assert r.exit_code == 0 and as_json(r)["removed"] == [U1, U2]
    assert _active(qemu_sim) == []
    r = run_cli(qemu_sim, "mdev", "remove", U1)
    assert r.exit_code == 3


def _reboot(sim: Path) -> None:
    """Power-cycle a simulated host: fresh kernel state, /etc survives."""
    keep = sim.parent / "etc-keep"
    shutil.copytree(sim / "etc", keep)
    from vgpukit.sim.build import init_sim

    init_sim(sim, "qemu-guest", force=True)
    shutil.rmtree(sim / "etc")
    shutil.copytree(keep, sim / "etc")
    shutil.rmtree(keep)


def test_define_and_start_all_after_reboot(qemu_sim: Path, run_cli: Run) -> None:
    r = run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-2", "--uuid", U1, "--define", "--auto")
    assert r.exit_code == 0
    run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U2)
    assert run_cli(qemu_sim, "mdev", "define", U2).exit_code == 0  # manual: not started at boot
    f1 = qemu_sim / "etc/mdevctl.d/mtty" / U1
    assert json.loads(f1.read_text()) == {"mdev_type": "mtty-2", "start": "auto", "attrs": []}
    assert json.loads((qemu_sim / "etc/mdevctl.d/mtty" / U2).read_text())["start"] == "manual"
    _reboot(qemu_sim)
    assert _active(qemu_sim) == []
    r = run_cli(qemu_sim, "mdev", "start", "--all", "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert [(x["uuid"], x["status"]) for x in doc["results"]] == [(U1, "started")]
    assert _active(qemu_sim) == [U1] and _avail(run_cli, qemu_sim) == {"mtty-1": 22, "mtty-2": 11}
    again = as_json(run_cli(qemu_sim, "mdev", "start", "--all", "--json"))
    assert again["changed"] is False and again["results"][0]["status"] == "active"
    assert run_cli(qemu_sim, "mdev", "start", U2).exit_code == 0
    lst = as_json(run_cli(qemu_sim, "mdev", "list", "--defined", "--json"))
    assert {d["uuid"]: (d["start"], d["active"]) for d in lst["definitions"]} == {
        U1: ("auto", True),
        U2: ("manual", True),
    }


def test_define_new_for_absent_parent_and_undefine(qemu_sim: Path, run_cli: Run) -> None:
    r = run_cli(qemu_sim, "mdev", "define", "--parent", "0000:3b:00.0", "--type", "nvidia-232", "--uuid", U1, "--auto")
    assert r.exit_code == 0, r.stderr
    r = run_cli(qemu_sim, "mdev", "define", "--parent", "mtty", "--type", "mtty-1", "--uuid", U2, "--auto", "--json")
    assert as_json(r)["path"] == f"/etc/mdevctl.d/mtty/{U2}"
    again = run_cli(qemu_sim, "mdev", "define", "--parent", "mtty", "--type", "mtty-1", "--uuid", U2, "--auto")
    assert again.exit_code == 0 and "nothing to do" in again.stdout
    clash = run_cli(qemu_sim, "mdev", "define", "--parent", "mtty", "--type", "mtty-2", "--uuid", U2)
    assert clash.exit_code == 4
    assert run_cli(qemu_sim, "mdev", "define", "--parent", "mtty", "--type", "mtty-9").exit_code == 3
    doc = as_json(run_cli(qemu_sim, "mdev", "start", "--all", "--json"))
    status = {x["uuid"]: x["status"] for x in doc["results"]}
    assert status == {U1: "parent-absent", U2: "started"}
    doc = as_json(run_cli(qemu_sim, "mdev", "start", "--all", "--parent", "mtty", "--json"))
    assert [x["uuid"] for x in doc["results"]] == [U2]
    assert run_cli(qemu_sim, "mdev", "undefine", U2).exit_code == 0
    assert not (qemu_sim / "etc/mdevctl.d/mtty" / U2).exists()
    assert _active(qemu_sim) == [U2]  # undefine leaves the running instance alone
    assert run_cli(qemu_sim, "mdev", "undefine", U2).exit_code == 3


def test_reads_mdevctl_written_files(qemu_sim: Path, run_cli: Run) -> None:
    """Files as mdevctl writes them (attrs included) are read; a bad file is reported, not fatal."""
    d = qemu_sim / "etc/mdevctl.d/mtty"
    d.mkdir(parents=True)
    (d / U1).write_text('{\n  "mdev_type": "mtty-2",\n  "start": "auto",\n  "attrs": []\n}\n')
    (d / U2).write_text('{"mdev_type": "mtty-1", "start": "auto", "attrs": [{"nosuch_attr": "1"}]}')
    (d / "0b4e4a4b-0000-0000-0000-000000000000").write_text("{not json")
    lst = as_json(run_cli(qemu_sim, "mdev", "list", "--defined", "--json"))
    assert {x["uuid"] for x in lst["definitions"]} == {U1, U2}
    assert len(lst["unreadable"]) == 1
    r = run_cli(qemu_sim, "mdev", "start", "--all", "--json")
    assert r.exit_code == 1  # one definition failed: the boot service must say so
    status = {x["uuid"]: x["status"] for x in as_json(r)["results"]}
    assert status == {U1: "started", U2: "failed"}
    assert _active(qemu_sim) == [U1]  # the failed one was not left half-configured


def test_define_active_instance_and_change_start_mode(qemu_sim: Path, run_cli: Run) -> None:
    assert run_cli(qemu_sim, "mdev", "define", U1).exit_code == 3
    run_cli(qemu_sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U1)
    assert run_cli(qemu_sim, "mdev", "define", U1).exit_code == 0
    r = run_cli(qemu_sim, "mdev", "define", U1, "--auto", "--json")
    assert as_json(r)["plan"][0].startswith("change start mode") and as_json(r)["definition"]["start"] == "auto"
    assert json.loads((qemu_sim / "etc/mdevctl.d/mtty" / U1).read_text())["start"] == "auto"


def test_text_output(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "g", "qemu-guest")
    r = run_cli(sim, "mdev", "types")
    assert r.stdout.splitlines()[0].split() == ["PARENT", "TYPE", "NAME", "AVAILABLE", "API", "DESCRIPTION"]
    r = run_cli(sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U1)
    assert f"done: create mtty-1 {U1} on mtty" in r.stdout
