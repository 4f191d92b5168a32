"""One QoS daemon per host: a second one refuses (exit 4, naming the first's pid) and leaves the first's
control socket alone (a second process, started as an operator would)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vgpukit.qos import control

from .conftest import REPO, DaemonProc

pytestmark = pytest.mark.realproc


def test_second_daemon_refuses_and_leaves_the_first_reachable(daemon: DaemonProc) -> None:
    daemon.start()
    assert daemon.proc is not None
    first = daemon.proc.pid
    env = dict(os.environ, PYTHONPATH=str(REPO), VGPUKIT_ROOT=str(daemon.root))
    second = subprocess.run(
        [sys.executable, "-m", "vgpukit", "qos", "daemon"], env=env, capture_output=True, text=True, timeout=15
    )
    assert second.returncode == 4, second.stderr
    assert f"pid {first}" in second.stderr
    assert "error:" in second.stderr.splitlines()[-1]
    # the first daemon still owns its socket and answers
    assert control.socket_path(daemon.host).exists()
    assert control.request(daemon.host, {"op": "ping"}, timeout=2)["pid"] == first
    assert daemon.stop() == 0
