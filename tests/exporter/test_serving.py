"""The exporter as it runs: a process serving /metrics from its watch's model, following another
command's change, ended cleanly by SIGINT or SIGTERM (its wait is a select on the socket and the
stop's pipe, no polling loop; before, a SIGINT landing inside a scrape was answered as that scrape's
error and the exporter went on, and SIGTERM killed it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import Run, make_sim

ROOT = Path(__file__).resolve().parents[2]


def _interruptible() -> None:
    """SIGINT as a terminal delivers it (a shell's background job, or a test runner, may ignore it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int, timeout: float = 60) -> str:
    end = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
                return str(resp.read().decode())
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_served_metrics_follow_a_change_and_a_signal_ends_it(tmp_path: Path, run_cli: Run, sig: int) -> None:
    sim = make_sim(tmp_path / "h")
    port = _port()
    argv = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "exporter", "--listen", f"127.0.0.1:{port}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible)
    try:
        assert "0000:05:00.2" not in _scrape(port)
        assert run_cli(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci").exit_code == 0
        end = time.monotonic() + 60
        while "0000:05:00.2" not in (text := _scrape(port)) and time.monotonic() < end:
            time.sleep(0.1)
        assert "vgpukit_slice_held{" in text and 'id="0000:05:00.2"' in text
    finally:
        proc.send_signal(sig)
        try:
            _out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # never left running
            raise
    assert proc.returncode == 0 and "Traceback" not in err, err  # a clean end (nothing half-served)
