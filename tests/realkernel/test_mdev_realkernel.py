"""mdev on a real Linux kernel: Debian's kernel in QEMU with the kernel's own ``mtty`` sample parent,
and Debian's own ``mdevctl`` package (1.2.0, unpacked from its .deb into the guest) beside vgpukit.

Two boots. Boot 1 lists types, creates instances of both types (counts fall across the sibling
types), hits the duplicate-UUID and capacity errors (the CLI's checks and the kernel's own errno),
refuses to remove an instance a process holds open, removes, defines (mdevctl files), clears every
instance and restarts the auto ones. Then mdevctl is installed (its ``/etc/mdevctl.d/scripts.d``
tree included): vgpukit still lists/defines/starts; mdevctl lists and starts what vgpukit defined;
vgpukit lists and starts what mdevctl defined. Boot 2 is a real reboot: only the saved
/etc/mdevctl.d comes back (written by both tools), and each tool starts the other's definitions.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from . import harness

pytestmark = pytest.mark.realkernel

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"
M_AUTO = "0a1b2c3d-0000-4000-8000-00000000a001"  # defined by mdevctl, start auto
M_MANUAL = "0a1b2c3d-0000-4000-8000-00000000a002"  # defined by mdevctl, start manual
V_NEW = "0a1b2c3d-0000-4000-8000-00000000b001"  # defined by vgpukit with scripts.d present, started by mdevctl
SAVED = "saved-mdevctl.d"

DIRECT_CREATE = """
import json, sys
from vgpukit.errors import VgpukitError
from vgpukit.host import Host
from vgpukit.mdev import sysfs
try:
    sysfs.create(Host(), "mtty", sys.argv[1], sys.argv[2])
    print(json.dumps({"ok": True}))
except VgpukitError as e:
    print(json.dumps({"error": type(e).__name__, "errno": e.errno, "message": str(e)}))
"""


def _kernel() -> Any:
    reason = harness.skip_reason()
    if reason:
        harness.skip_or_fail(reason)
    kernel = harness.RealKernel(harness.Config.from_env())
    try:
        assets = kernel.prepare()
    except harness.Unavailable as exc:
        harness.skip_or_fail(f"real kernel unavailable: {exc}")
    if not assets.mtty:
        harness.skip_or_fail("mtty sample driver unavailable: " + "; ".join(assets.notes))
    if assets.mdevctl is None:
        harness.skip_or_fail("Debian's mdevctl package unavailable: " + "; ".join(assets.notes))
    kernel.config.timeout = max(kernel.config.timeout, 1500.0)  # boot 1 runs 36 steps under emulation
    return kernel


def _boot(rk: Any, steps: list[Any], keep: Path, cancel: threading.Event) -> Any:
    """One guest run; booted again once when the kernel died before the first step (a TCG timer
    flake on a loaded host: "timer doesn't work through Interrupt-remapped IO-APIC")."""
    run = rk.run(steps, keep_dir=keep, cancel=cancel)
    panicked = "Kernel panic" in run.console and not cancel.is_set()
    if not run.completed and all(r.rc is None for r in run.steps.values()) and panicked:
        run = rk.run(steps, keep_dir=keep, cancel=cancel)
    return run


def _boots(keep: Path, cancel: threading.Event) -> dict[str, Any]:
    """Boot 1, then (from what boot 1 saved of /etc/mdevctl.d) boot 2, the real reboot; run in the
    session's background thread (tests/realkernel/conftest.py) while the host-side tests run."""
    rk = _kernel()
    runs = {"boot1": _boot(rk, _boot1_steps(rk), keep / "boot1", cancel)}
    saved = Path(runs["boot1"].out_dir) / SAVED
    if saved.is_dir() and not cancel.is_set():  # else the reboot test fails on boot 1's answer
        shutil.copytree(saved, keep / "boot2" / SAVED)
        runs["boot2"] = _boot(rk, _boot2_steps(rk), keep / "boot2", cancel)
    return runs


BOOTS = _boots


@pytest.fixture(scope="module")
def boot1(boots: dict[str, Any]) -> Any:
    return boots["boot1"]


def _v(rk: Any, *args: str) -> str:
    return str(rk.vgpukit_command(*args))


def _sh(rk: Any, *args: str) -> str:
    """A shell line running vgpukit ARGS and printing its exit code last (for expected failures)."""
    return f"{_v(rk, *args)}; echo rc=$?"


def _boot1_steps(rk: Any) -> list[Any]:
    S = harness.GuestStep
    direct = rk.python_command("-c", DIRECT_CREATE)
    hold = (
        f"G=$(basename $(readlink /sys/bus/mdev/devices/{U1}/iommu_group)); "
        "(exec 3<>/dev/vfio/$G; sleep 120) & P=$!; sleep 1; "
        f"{_sh(rk, 'mdev', 'remove', U1)}; kill $P"
    )
    steps = [
        S("types0", _v(rk, "mdev", "types", "--json")),
        S("create_u1", _v(rk, "mdev", "create", "mtty", "mtty-2", "--uuid", U1, "--json")),
        S("types1", _v(rk, "mdev", "types", "mtty", "--json")),
        S("create3", _v(rk, "mdev", "create", "--type", "mtty-1", "--count", "3", "--define", "--auto", "--json")),
        S("types2", _v(rk, "mdev", "types", "--json")),
        S("dup_cli", _sh(rk, "mdev", "create", "mtty", "mtty-1", "--uuid", U1)),
        S("dup_kernel", f"{direct} mtty-1 {U1}"),
        S("too_many", _sh(rk, "mdev", "create", "--type", "mtty-2", "--count", "10")),
        S("list_after_too_many", _v(rk, "mdev", "list", "--json")),
        S("fill", _v(rk, "mdev", "create", "--type", "mtty-2", "--count", "9", "--json")),
        S("types_full", _v(rk, "mdev", "types", "--json")),
        S("enospc_kernel", f"{direct} mtty-2 {U2}"),
        S("in_use", hold),
        S("remove_u1", _v(rk, "mdev", "remove", U1, "--json")),
        S("create_u2", _v(rk, "mdev", "create", "mtty", "mtty-2", "--uuid", U2, "--json")),
        S("define_u2", _v(rk, "mdev", "define", U2, "--auto", "--json")),
        S("files", FILES),
        S("clear", f"ls /sys/bus/mdev/devices | xargs {_v(rk, 'mdev', 'remove')} --json"),
        S("list_cleared", _v(rk, "mdev", "list", "--json")),
        S("start_all", _v(rk, "mdev", "start", "--all", "--json")),
        S("start_again", _v(rk, "mdev", "start", "--all", "--json")),
        # Debian's mdevctl arrives: /usr/bin/mdevctl and /etc/mdevctl.d/scripts.d/{callouts,notifiers}
        S("mdevctl_install", rk.install_mdevctl_command() + " && ls /etc/mdevctl.d/scripts.d"),
        S("vk_list_scriptsd", _v(rk, "mdev", "list", "--defined", "--json")),
        S("mdevctl_sees_vk", "mdevctl list --defined --dumpjson"),
        S("mdevctl_active_vk", "mdevctl list --dumpjson"),
        S(
            "mdevctl_define",
            f"mdevctl define -u {M_AUTO} -p mtty -t mtty-1 --auto && mdevctl define -u {M_MANUAL} -p mtty -t mtty-1",
        ),
        S(
            "vk_define_new",
            _v(rk, "mdev", "define", "--parent", "mtty", "--type", "mtty-2", "--uuid", V_NEW, "--auto", "--json"),
        ),
        S("vk_sees_mdevctl", _v(rk, "mdev", "list", "--defined", "--json")),
        S("mdevctl_starts_vk", f"mdevctl start -u {V_NEW} && mdevctl list -u {V_NEW} --dumpjson"),
        S("vk_start_all_mixed", _v(rk, "mdev", "start", "--all", "--json")),
        S("vk_start_manual", _v(rk, "mdev", "start", M_MANUAL, "--json")),
        S("mdevctl_active_all", "mdevctl list --dumpjson"),
        S("files_final", FILES),
        S("save", f'cp -a /etc/mdevctl.d "$VGPUKIT_GUEST_OUT/{SAVED}" && ls "$VGPUKIT_GUEST_OUT/{SAVED}/mtty"'),
    ]
    return steps


FILES = "for f in /etc/mdevctl.d/mtty/*; do echo \"$(basename $f) $(tr -d '\\n ' < $f)\"; done"


def _ok(run: Any, name: str) -> Any:
    r = run[name]
    assert r.ok, r.describe() + "\n--- console\n" + run.console_tail()
    return r.json()


def _avail(doc: dict[str, Any]) -> dict[str, int]:
    return {t["type_id"]: t["available"] for p in doc["parents"] for t in p["types"] if p["parent"] == "mtty"}


def test_types_and_counts_fall_across_sibling_types(boot1: Any) -> None:
    assert boot1.completed, boot1.console_tail()
    doc = _ok(boot1, "types0")
    mtty = next(p for p in doc["parents"] if p["parent"] == "mtty")
    assert {t["type_id"]: (t["name"], t["device_api"]) for t in mtty["types"]} == {
        "mtty-1": ("Single port serial", "vfio-pci"),
        "mtty-2": ("Dual port serial", "vfio-pci"),
    }
    assert _avail(doc) == {"mtty-1": 24, "mtty-2": 12}
    assert _ok(boot1, "create_u1")["instances"] == [{"uuid": U1, "parent": "mtty", "type": "mtty-2"}]
    assert _avail(_ok(boot1, "types1")) == {"mtty-1": 22, "mtty-2": 11}
    assert len(_ok(boot1, "create3")["instances"]) == 3
    assert _avail(_ok(boot1, "types2")) == {"mtty-1": 19, "mtty-2": 9}


def test_duplicate_uuid(boot1: Any) -> None:
    out = boot1["dup_cli"].stdout
    assert "rc=4" in out and "already exists" in boot1["dup_cli"].stderr
    assert _ok(boot1, "dup_kernel") == {
        "error": "Conflict",
        "errno": 17,
        "message": f"an mdev with UUID {U1} already exists (pick another --uuid or omit it)",
    }


def test_capacity_exhaustion(boot1: Any) -> None:
    r = boot1["too_many"]
    assert "rc=4" in r.stdout and "do not fit: 9 available" in r.stderr
    assert len(_ok(boot1, "list_after_too_many")["instances"]) == 4  # nothing half-done
    assert len(_ok(boot1, "fill")["instances"]) == 9
    assert _avail(_ok(boot1, "types_full")) == {"mtty-1": 1, "mtty-2": 0}
    doc = _ok(boot1, "enospc_kernel")
    assert doc["error"] == "NoCapacity" and doc["errno"] == 28, doc  # the kernel's ENOSPC


def test_in_use_refused_then_remove(boot1: Any) -> None:
    r = boot1["in_use"]
    assert "rc=4" in r.stdout and "in use by" in r.stderr, r.describe()
    assert _ok(boot1, "remove_u1")["removed"] == [U1]


def test_define_writes_mdevctl_files(boot1: Any) -> None:
    assert _ok(boot1, "create_u2")["instances"][0]["uuid"] == U2
    assert _ok(boot1, "define_u2")["path"] == f"/etc/mdevctl.d/mtty/{U2}"
    lines = boot1["files"].stdout.split("\n")
    files = {ln.split(" ", 1)[0]: json.loads(ln.split(" ", 1)[1]) for ln in lines if ln.strip()}
    assert len(files) == 4
    assert files[U2] == {"mdev_type": "mtty-2", "start": "auto", "attrs": []}
    assert sorted(d["mdev_type"] for d in files.values()) == ["mtty-1", "mtty-1", "mtty-1", "mtty-2"]


def test_clear_and_start_all(boot1: Any) -> None:
    assert _ok(boot1, "clear")["changed"] is True
    assert _ok(boot1, "list_cleared")["instances"] == []
    doc = _ok(boot1, "start_all")
    assert sorted(r["status"] for r in doc["results"]) == ["started"] * 4
    again = _ok(boot1, "start_again")
    assert again["changed"] is False and {r["status"] for r in again["results"]} == {"active"}


def _mdevctl_devices(r: Any) -> dict[str, tuple[str, str, str]]:
    """``mdevctl list --dumpjson`` -> {uuid: (parent, type, start)}."""
    assert r.ok, r.describe()
    doc = json.loads(r.stdout)
    if isinstance(doc, dict):  # one device asked for by -u: just its config
        return {"": ("", doc["mdev_type"], doc["start"])}
    return {
        uid: (parent, conf["mdev_type"], conf["start"])
        for entry in doc
        for parent, children in entry.items()
        for child in children
        for uid, conf in child.items()
    }


def test_vgpukit_works_with_mdevctl_scripts_dir(boot1: Any) -> None:
    """Debian's mdevctl package creates /etc/mdevctl.d/scripts.d/{callouts,notifiers}: not a parent."""
    assert boot1["mdevctl_install"].ok, boot1["mdevctl_install"].describe()
    assert boot1["mdevctl_install"].stdout.split()[-2:] == ["callouts", "notifiers"]
    doc = _ok(boot1, "vk_list_scriptsd")
    assert len(doc["definitions"]) == 4 and doc["unreadable"] == []
    assert _ok(boot1, "vk_define_new")["path"] == f"/etc/mdevctl.d/mtty/{V_NEW}"
    assert {r["uuid"]: r["status"] for r in _ok(boot1, "vk_start_all_mixed")["results"]}[M_AUTO] == "started"


def test_mdevctl_lists_and_starts_what_vgpukit_defined(boot1: Any) -> None:
    defined = _mdevctl_devices(boot1["mdevctl_sees_vk"])
    vk = {d["uuid"]: ("mtty", d["type"], d["start"]) for d in _ok(boot1, "vk_list_scriptsd")["definitions"]}
    assert defined == vk and defined[U2] == ("mtty", "mtty-2", "auto")
    active = _mdevctl_devices(boot1["mdevctl_active_vk"])
    assert {u: t for u, (_, t, _) in active.items()} == {u: t for u, (_, t, _) in vk.items()}
    started = boot1["mdevctl_starts_vk"]
    assert started.ok, started.describe()
    assert _mdevctl_devices(started) == {"": ("", "mtty-2", "auto")}


def test_vgpukit_lists_and_starts_what_mdevctl_defined(boot1: Any) -> None:
    assert boot1["mdevctl_define"].ok, boot1["mdevctl_define"].describe()
    doc = _ok(boot1, "vk_sees_mdevctl")
    defs = {d["uuid"]: (d["parent"], d["type"], d["start"], d["active"]) for d in doc["definitions"]}
    assert defs[M_AUTO] == ("mtty", "mtty-1", "auto", False)
    assert defs[M_MANUAL] == ("mtty", "mtty-1", "manual", False)
    assert len(defs) == 7 and doc["unreadable"] == []
    results = {r["uuid"]: r["status"] for r in _ok(boot1, "vk_start_all_mixed")["results"]}
    assert results[M_AUTO] == "started" and results[V_NEW] == "active" and M_MANUAL not in results
    assert list(results.values()).count("active") == 5
    assert _ok(boot1, "vk_start_manual")["results"][0]["status"] == "started"
    active = _mdevctl_devices(boot1["mdevctl_active_all"])
    assert len(active) == 7 and active[M_MANUAL][1] == "mtty-1" and active[V_NEW][1] == "mtty-2"


def _files(run: Any, step: str) -> dict[str, Any]:
    lines = run[step].stdout.split("\n")
    return {ln.split(" ", 1)[0]: json.loads(ln.split(" ", 1)[1]) for ln in lines if ln.strip()}


def test_both_tools_write_the_same_format(boot1: Any) -> None:
    files = _files(boot1, "files_final")
    assert files[M_AUTO] == {"mdev_type": "mtty-1", "start": "auto", "attrs": []}  # written by mdevctl
    assert files[V_NEW] == {"mdev_type": "mtty-2", "start": "auto", "attrs": []}  # written by vgpukit


def _boot2_steps(rk: Any) -> list[Any]:
    S = harness.GuestStep
    restore = f'mkdir -p /etc/mdevctl.d && cp -a "$VGPUKIT_GUEST_OUT/{SAVED}/." /etc/mdevctl.d/'
    return [
        S("fresh", f"{restore} && {_v(rk, 'mdev', 'list', '--defined', '--json')}"),
        S("mdevctl_install", rk.install_mdevctl_command()),
        S("mdevctl_fresh", "mdevctl list --defined --dumpjson"),
        S("mdevctl_starts_vk", f"mdevctl start -u {U2}"),
        S("start_all", _v(rk, "mdev", "start", "--all", "--json")),
        S("vk_start_manual", _v(rk, "mdev", "start", M_MANUAL, "--json")),
        S("types", _v(rk, "mdev", "types", "--json")),
        S("list", _v(rk, "mdev", "list", "--defined", "--json")),
        S("mdevctl_active", "mdevctl list --dumpjson"),
    ]


def test_definitions_survive_a_real_reboot_whichever_tool_wrote_them(boots: dict[str, Any]) -> None:
    boot1 = boots["boot1"]
    saved = Path(boot1.out_dir) / SAVED
    names = set(_files(boot1, "files_final"))
    assert {p.name for p in (saved / "mtty").iterdir()} == names and len(names) == 7
    assert "boot2" in boots, "boot 2 did not run"
    run = boots["boot2"]
    fresh = _ok(run, "fresh")
    assert fresh["instances"] == [] and len(fresh["definitions"]) == 7 and fresh["unreadable"] == []
    assert not any(d["active"] for d in fresh["definitions"])
    assert set(_mdevctl_devices(run["mdevctl_fresh"])) == names
    assert run["mdevctl_starts_vk"].ok, run["mdevctl_starts_vk"].describe()  # mdevctl starts vgpukit's U2
    results = {r["uuid"]: r["status"] for r in _ok(run, "start_all")["results"]}
    assert results.pop(U2) == "active" and M_MANUAL not in results
    assert sorted(results.values()) == ["started"] * 5 and M_AUTO in results  # incl. mdevctl's auto one
    assert _ok(run, "vk_start_manual")["results"][0]["status"] == "started"
    assert _avail(_ok(run, "types")) == {"mtty-1": 15, "mtty-2": 7}
    final = _ok(run, "list")
    assert sorted(i["uuid"] for i in final["instances"]) == sorted(d["uuid"] for d in final["definitions"])
    assert set(_mdevctl_devices(run["mdevctl_active"])) == names
