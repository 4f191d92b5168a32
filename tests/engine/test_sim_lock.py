"""The simulated kernel's own lock (``.vgpukit-sim/lock``): a command that finds it held by a command stopped
in the middle of a kernel reaction waits no longer than ``--wait``, says once whom it waits for, and gives up
with exit 4 naming the holder (it waited without limit, silently). And the host lock held by a process that
is not vgpukit (an admin's ``flock``; on a simulated host /proc lists no real process) says how to find it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.engine.helpers import fresh, vgpukit

# a command stopped in the middle of a reaction: it holds the simulated kernel's lock (and its reaction log)
STOPPED = """
import os, signal, sys
from pathlib import Path
from vgpukit.sim.state import locked
sys.argv = ["vgpukit", "sriov", "enable", "nic0", "--vfs", "4"]
with locked(Path(os.environ["SIM"])):
    print("locked", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""


def test_a_stopped_reaction_holds_others_no_longer_than_wait(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    holder = subprocess.Popen(
        [sys.executable, "-c", STOPPED], stdout=subprocess.PIPE, text=True, env={**os.environ, "SIM": str(sim)}
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        start = time.monotonic()
        r = vgpukit(sim, "--wait", "2", "sriov", "enable", "nic1", "--vfs", "2", timeout=30)
        took = time.monotonic() - start
        assert r.returncode == 4, r.stderr
        who = f"pid {holder.pid} (vgpukit sriov enable nic0 --vfs 4)"
        assert f"vgpukit: simulated kernel busy: waiting for {who}, up to 2 s" in r.stderr
        (error,) = [line for line in r.stderr.splitlines() if line.startswith("vgpukit: error:")]
        assert who in error and "--wait SECONDS" in error
        assert took < 15
        r = vgpukit(sim, "--wait", "0", "sriov", "enable", "nic1", "--vfs", "2", timeout=30)
        assert r.returncode == 4 and "waiting for" not in r.stderr  # --wait 0: no wait, no notice
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.wait(10)
    assert vgpukit(sim, "sriov", "enable", "nic1", "--vfs", "2").returncode == 0  # released with its process


def test_an_unnamed_holder_of_the_host_lock_is_pointed_at(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    lock = sim / "run" / "vgpukit" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(["flock", str(lock), "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while vgpukit(sim, "--wait", "0", "sriov", "enable", "nic0", "--vfs", "1").returncode != 4:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = vgpukit(sim, "--wait", "0", "sriov", "enable", "nic0", "--vfs", "1")
        assert r.returncode == 4
        assert "another process holds this host's lock: a process that is not a vgpukit command" in r.stderr
        assert f"fuser -v {lock}" in r.stderr
    finally:
        holder.kill()
        holder.wait()
