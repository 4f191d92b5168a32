"""Feedback while the engine works: a progress line on a terminal (a real pseudo-terminal), nothing
extra in a pipe or with --json; a command that finds the host lock held says so at once, naming the
holder a real second process recorded (docs/engine.md)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from tests.engine.helpers import fresh, start, vgpukit

ENABLE = ("sriov", "enable", "nic0", "--vfs", "8", "--driver", "vfio-pci")


def on_terminal(sim: Path, *args: str) -> tuple[int, str]:
    """Run vgpukit with stdin, stdout and stderr on a pseudo-terminal; (exit code, everything shown)."""
    main, sub = os.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    p = subprocess.Popen(
        [sys.executable, "-m", "vgpukit", "--sim", str(sim), *args], stdin=sub, stdout=sub, stderr=sub, env=env
    )
    os.close(sub)
    out = b""
    try:
        while select.select([main], [], [], 60)[0]:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main)
    return p.wait(timeout=60), out.decode(errors="replace")


def test_a_terminal_shows_the_progress_line_then_the_summary(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    rc, shown = on_terminal(sim, *ENABLE, "-v")
    assert rc == 0, shown
    # 11 steps: autoprobe off, create the VFs, bind 8, autoprobe back (-v: each one)
    assert "applying" in shown and "11/11" in shown and "bind VF" in shown
    assert shown.index("11/11") < shown.index("done: create 8 VFs")
    rc, shown = on_terminal(sim, "sriov", "enable", "nic1", "--vfs", "8", "--driver", "vfio-pci")
    assert rc == 0, shown
    assert shown.index("11/11") < shown.index("done: 11 steps (-v lists them)") < shown.index("8 on vfio-pci")


def test_a_pipe_and_json_show_no_progress(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    r = vgpukit(sim, *ENABLE)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "applying" not in r.stdout and "11/11" not in r.stdout
    assert r.stdout.splitlines()[0].startswith("done: ")
    rc, shown = on_terminal(sim, "sriov", "disable", "nic0", "--json")
    assert rc == 0, shown
    assert "applying" not in shown and "1/1" not in shown and shown.lstrip().startswith("{")


HOLDER = """
import sys, time
from pathlib import Path
from vgpukit.engine.lock import host_lock
from vgpukit.host import Host
from vgpukit.sim.kernel import SimKernel
root = Path(sys.argv[1])
with host_lock(Host(root, kernel=SimKernel(root)), "vgpukit partition gpu0 --mig 3g.20gb", 0):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_waiting_for_the_lock_says_so_at_once(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(sim), "4"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        t0 = time.monotonic()
        waiter = start(sim, "--wait", "30", *ENABLE)
        assert waiter.stderr is not None
        line = waiter.stderr.readline()
        told = time.monotonic() - t0
        assert line == f"vgpukit: waiting for pid {holder.pid} (vgpukit partition gpu0 --mig 3g.20gb), up to 30 s\n"
        assert told < 3.5 and holder.poll() is None  # said while the holder still held the lock
        out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err
        assert out.startswith("done: ") and err == ""
    finally:
        holder.kill()
        holder.wait()


def test_no_wait_no_notice(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(sim), "10"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        r = vgpukit(sim, "--wait", "0", *ENABLE)
        assert r.returncode == 4 and r.stderr.count("\n") == 1 and "waiting for" not in r.stderr
        assert f"pid {holder.pid} (vgpukit partition gpu0" in r.stderr
    finally:
        holder.kill()
        holder.wait()
