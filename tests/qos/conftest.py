"""Fixtures: real spinner processes and a real daemon on a temporary host root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vgpukit.host import Host
from vgpukit.qos import control

REPO = Path(__file__).resolve().parents[2]


def proc_state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def wait_for(pred, timeout: float = 5.0, step: float = 0.01) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


@pytest.fixture
def spawn() -> Iterator:  # type: ignore[type-arg]
    procs: list[subprocess.Popen[bytes]] = []

    def start(code: str = "while :; do :; done") -> subprocess.Popen[bytes]:
        p = subprocess.Popen(["/bin/sh", "-c", code])
        procs.append(p)
        return p

    yield start
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        except ProcessLookupError:
            pass
        p.wait()


class DaemonProc:
    def __init__(
        self, root: Path, config: Path | None = None, sim: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.sim = sim
        self.extra_env = env or {}
        self.host = Host(root)
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DaemonProc:
        env = dict(os.environ, PYTHONPATH=str(REPO), **self.extra_env)
        env["VGPUKIT_SIM" if self.sim else "VGPUKIT_ROOT"] = str(self.root)
        cmd = [sys.executable, "-m", "vgpukit", "qos", "daemon"]
        if self.config:
            cmd += ["--config", str(self.config)]
        self.log = open(self.root / "daemon.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=env, stderr=self.log, stdout=self.log)
        sock = control.socket_path(self.host)
        ok = wait_for(lambda: sock.exists() and self._ping(), timeout=10)
        assert ok, (self.root / "daemon.log").read_text()
        return self

    def _ping(self) -> bool:
        try:
            return bool(control.request(self.host, {"op": "ping"}, timeout=1)["ok"])
        except Exception:
            return False

    def req(self, **kw: object) -> dict:  # type: ignore[type-arg]
        return control.request(self.host, dict(kw))

    def status(self, gpu: str = "gpu0") -> dict[str, dict]:  # type: ignore[type-arg]
        gpus = self.req(op="status")["gpus"]
        return {t["name"]: t for g in gpus if g["gpu"] == gpu for t in g["tenants"]}

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=10)
        self.log.close()
        return rc


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProc]:
    d = DaemonProc(tmp_path)
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.stop()
