"""The host lock: one mutating command at a time; a waiter gives up naming the holder."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.engine.helpers import fresh, start, vgpukit


def test_timeout_exits_4_naming_the_holder(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    lock = sim / "run" / "vgpukit" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{os.getpid()}\nvgpukit partition gpu0 --mig 3g.20gb\n".encode())
        t0 = time.monotonic()
        r = vgpukit(sim, "--wait", "0.5", "sriov", "enable", "nic0", "--vfs", "2")
        waited = time.monotonic() - t0
    finally:
        os.close(fd)
    assert r.returncode == 4, r.stderr
    # the notice at once, then the one error line
    notice, error = r.stderr.splitlines()
    assert notice == f"vgpukit: waiting for pid {os.getpid()} (vgpukit partition gpu0 --mig 3g.20gb), up to 0.5 s"
    assert error.startswith("vgpukit: error: ")
    assert f"pid {os.getpid()}" in r.stderr and "partition gpu0" in r.stderr and "--wait" in r.stderr
    assert waited >= 0.5
    # nothing was changed
    assert vgpukit(sim, "sriov", "list", "nic0", "--json").stdout.count('"bdf"') == 1


def test_reads_and_dry_runs_take_no_lock(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    lock = sim / "run" / "vgpukit" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert vgpukit(sim, "--wait", "0", "sriov", "list").returncode == 0
        assert vgpukit(sim, "--wait", "0", "topo").returncode == 0
        r = vgpukit(sim, "--wait", "0", "--dry-run", "sriov", "enable", "nic0", "--vfs", "2")
        assert r.returncode == 0, r.stderr
    finally:
        os.close(fd)


def test_a_waiter_proceeds_when_the_holder_finishes(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    lock = sim / "run" / "vgpukit" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    p = start(sim, "--wait", "20", "sriov", "enable", "nic0", "--vfs", "2")
    time.sleep(0.8)
    assert p.poll() is None  # still waiting
    os.close(fd)  # the holder "exits": the kernel drops the flock
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err


def test_a_dead_holder_never_blocks(tmp_path: Path) -> None:
    """kill -9 of the holder releases the lock (flock dies with its process)."""
    sim = fresh(tmp_path, "hgx-a100")
    p = start(
        sim, "sriov", "enable", "nic0", "--vfs", "16", "--driver", "vfio-pci", env={"VGPUKIT_SIM_CRASH_AT_WRITE": "5"}
    )
    p.communicate(timeout=30)
    assert p.returncode == -9
    r = vgpukit(sim, "--wait", "0", "sriov", "enable", "nic0", "--vfs", "2")
    assert r.returncode == 0, r.stderr
    assert "recovering an interrupted change" in r.stderr


def test_a_holder_that_wrote_no_record_is_named_from_proc(tmp_path: Path) -> None:
    """A holder that has not written its record (just locked, a full /run, not vgpukit: an admin's
    ``flock``) is named at once from the kernel's /proc/locks and its /proc/<pid>/cmdline, read through
    the host door: here a host root whose /proc is this machine's (a bind mount; root only)."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("bind-mounting /proc needs root")
        pytest.skip("bind-mounting /proc needs root")
    root = tmp_path / "root"
    lock = root / "run" / "vgpukit" / "lock"
    lock.parent.mkdir(parents=True)
    (root / "proc").mkdir()
    subprocess.run(["mount", "--bind", "/proc", str(root / "proc")], check=True)
    holder = subprocess.Popen(["flock", str(lock), "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while b"FLOCK" not in Path("/proc/locks").read_bytes() or not lock.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = subprocess.run(
            [sys.executable, "-m", "vgpukit", "--root", str(root), "--wait", "0.3", "recover"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        who = f"pid {holder.pid} (flock {lock} sleep 30)"
        notice, error = r.stderr.splitlines()
        assert notice == f"vgpukit: waiting for {who}, up to 0.3 s"
        assert r.returncode == 4
        assert error.startswith(f"vgpukit: error: another vgpukit command is changing this host: {who}")
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["umount", "-l", str(root / "proc")], check=True)
