"""mdev on a real Linux kernel: Debian's kernel in QEMU with the kernel's own ``mtty`` sample parent.

Two boots. Boot 1 lists types, creates instances of both types (counts fall across the sibling
types), hits the duplicate-UUID and capacity errors (the CLI's checks and the kernel's own errno),
refuses to remove an instance a process holds open, removes, defines (mdevctl files), clears every
instance and restarts the auto ones. Boot 2 is a real reboot: only the saved /etc/mdevctl.d comes
back, and ``mdev start --all`` recreates the devices.

Needs the harness of tests/realkernel/harness.py (built on branch ``sriov``); skips without it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

harness = pytest.importorskip("tests.realkernel.harness", reason="needs the real-kernel QEMU harness")

pytestmark = pytest.mark.realkernel

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
U2 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1002"
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


@pytest.fixture(scope="module")
def rk() -> Any:
    reason = harness.skip_reason()
    if reason:
        pytest.skip(reason)
    kernel = harness.RealKernel(harness.Config.from_env())
    try:
        assets = kernel.prepare()
    except harness.Unavailable as exc:
        pytest.skip(f"real kernel unavailable: {exc}")
    if not assets.mtty:
        pytest.skip("mtty sample driver unavailable: " + "; ".join(assets.notes))
    return kernel


def _boot(rk: Any, steps: list[Any], keep: Path) -> Any:
    """One guest run; booted again once when the kernel died before the first step (a TCG timer
    flake on a loaded host: "timer doesn't work through Interrupt-remapped IO-APIC")."""
    run = rk.run(steps, keep_dir=keep)
    if not run.completed and all(r.rc is None for r in run.steps.values()) and "Kernel panic" in run.console:
        run = rk.run(steps, keep_dir=keep)
    return run


def _v(rk: Any, *args: str) -> str:
    return str(rk.vgpukit_command(*args))


def _sh(rk: Any, *args: str) -> str:
    """A shell line running vgpukit ARGS and printing its exit code last (for expected failures)."""
    return f"{_v(rk, *args)}; echo rc=$?"


@pytest.fixture(scope="module")
def boot1(rk: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
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
        S("files", "for f in /etc/mdevctl.d/mtty/*; do echo \"$(basename $f) $(tr -d '\\n ' < $f)\"; done"),
        S("save", f'cp -a /etc/mdevctl.d "$VGPUKIT_GUEST_OUT/{SAVED}" && ls "$VGPUKIT_GUEST_OUT/{SAVED}/mtty"'),
        S("clear", f"ls /sys/bus/mdev/devices | xargs {_v(rk, 'mdev', 'remove')} --json"),
        S("list_cleared", _v(rk, "mdev", "list", "--json")),
        S("start_all", _v(rk, "mdev", "start", "--all", "--json")),
        S("start_again", _v(rk, "mdev", "start", "--all", "--json")),
    ]
    return _boot(rk, steps, tmp_path_factory.mktemp("boot1"))


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


def test_definitions_survive_a_real_reboot(rk: Any, boot1: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    saved = Path(boot1.out_dir) / SAVED
    names = {ln.split(" ", 1)[0] for ln in boot1["files"].stdout.splitlines() if ln.strip()}
    assert {p.name for p in (saved / "mtty").iterdir()} == names
    out = tmp_path_factory.mktemp("boot2")
    shutil.copytree(saved, out / SAVED)
    S = harness.GuestStep
    restore = f'mkdir -p /etc/mdevctl.d && cp -a "$VGPUKIT_GUEST_OUT/{SAVED}/." /etc/mdevctl.d/'
    steps = [
        S("fresh", f"{restore} && {_v(rk, 'mdev', 'list', '--defined', '--json')}"),
        S("start_all", _v(rk, "mdev", "start", "--all", "--json")),
        S("types", _v(rk, "mdev", "types", "--json")),
        S("list", _v(rk, "mdev", "list", "--defined", "--json")),
    ]
    run = _boot(rk, steps, out)
    fresh = _ok(run, "fresh")
    assert fresh["instances"] == [] and len(fresh["definitions"]) == 4
    assert not any(d["active"] for d in fresh["definitions"])
    assert sorted(r["status"] for r in _ok(run, "start_all")["results"]) == ["started"] * 4
    assert _avail(_ok(run, "types")) == {"mtty-1": 19, "mtty-2": 9}
    final = _ok(run, "list")
    assert sorted(i["uuid"] for i in final["instances"]) == sorted(d["uuid"] for d in final["definitions"])
    assert U2 in {i["uuid"] for i in final["instances"]}
