"""End to end with the real QoS daemon: an online tenant preempts an offline one whose kernels are queued
on a shared emulated device; the library's in-flight window bounds what is left queued."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ..qos.conftest import DaemonProc
from .conftest import Cuda

KERNELS, MS = 60, 50  # the offline tenant's 3 s of 50 ms kernels


def gated(cuda: Cuda, tenant: str, *args: str, **env: str) -> subprocess.Popen[str]:
    p = cuda.popen(*args, tenant=False, VGPUKIT_QOS_TENANT=tenant, VGPUKIT_TEST_GATE="1", **env)  # type: ignore[arg-type]
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def go(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None
    p.stdin.write("go\n")
    p.stdin.flush()


def preemption_ms(cuda: Cuda, tmp_path: Path, window: dict[str, str], program: str = "launch", **extra: str) -> float:
    """An offline tenant queues KERNELS x MS ms, then an online one's 1 ms kernel: its latency.
    ``program``: ``launch`` (linked with the emulator) or ``ptxspin`` (its PTX kernel, ``extra`` env)."""
    daemon = DaemonProc(tmp_path).start()
    env = {
        "VGPUKIT_EMU_SHM": str(tmp_path / "device"),
        "VGPUKIT_QOS_GPU": "gpu0",
        "VGPUKIT_QOS_SOCKET": str(daemon.host.state_dir("qos", "demand.sock")),
        **extra,
    }
    batch = gated(cuda, "batch", program, "drain", str(KERNELS), str(MS), **env, **window)
    web = gated(cuda, "web", program, "probe", "1", **env)
    try:
        for name, p, cls in (("batch", batch, "offline"), ("web", web, "online")):
            daemon.req(op="tenant-add", gpu="gpu0", name=name, tenant={"class": cls, "share": 50, "pids": [p.pid]})
        go(batch)
        time.sleep(0.5)  # the offline tenant's queue builds up
        go(web)
        out, err = web.communicate(timeout=30)
        assert web.returncode == 0, err
        return float(out.split("latency_ms=")[1].split()[0])
    finally:
        for p in (batch, web):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
        daemon.stop()


@pytest.mark.parametrize("window", [{"VGPUKIT_CUDA_INFLIGHT": "2"}, {"VGPUKIT_CUDA_INFLIGHT_MS": "100"}])
def test_window_bounds_preemption_latency(cuda: Cuda, tmp_path: Path, window: dict[str, str]) -> None:
    assert preemption_ms(cuda, tmp_path, window) < 2 * MS + 100 + 50  # window + one kernel + detection


def test_without_window_the_queue_decides(cuda: Cuda, tmp_path: Path) -> None:
    assert preemption_ms(cuda, tmp_path, {}) > 1500  # the rest of the offline tenant's 3 s queue
