"""The C clients of the demand protocol: qos-notify and the LD_PRELOAD launch hook (built with gcc)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from vgpukit.qos.demand import decode

from .conftest import REPO, DaemonProc, proc_state, wait_for

HOOK = REPO / "contrib" / "qos-hook"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None, reason="no gcc/make")

FAKE_CUDA = r"""
#include <time.h>
int cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                   unsigned s, void *st, void **p, void **x) {
    (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)s; (void)st; (void)p; (void)x;
    return 0;
}
"""
APP = r"""
#include <time.h>
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                   void **, void **);
int main(void) {
    struct timespec nap = {0, 1000000};
    for (int burst = 0; burst < 2; burst++) {
        for (int i = 0; i < 20; i++) {
            if (cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0)) return 1;
            nanosleep(&nap, 0);
        }
        struct timespec pause = {0, 150000000};
        nanosleep(&pause, 0);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hook")
    subprocess.run(["make", "-s", "-C", str(HOOK), f"O={out}"], check=True)
    (out / "cuda.c").write_text(FAKE_CUDA)
    (out / "app.c").write_text(APP)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out / "libcuda.so"), str(out / "cuda.c")], check=True)
    subprocess.run(
        ["gcc", "-o", str(out / "app"), str(out / "app.c"), f"-L{out}", "-lcuda", f"-Wl,-rpath,{out}"], check=True
    )
    return out


def listen(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.settimeout(3)
    return s


def test_qos_notify_wire_format(build: Path, tmp_path: Path) -> None:
    s = listen(tmp_path / "d.sock")
    env = dict(os.environ, VGPUKIT_QOS_SOCKET=str(tmp_path / "d.sock"))
    before = time.monotonic_ns()
    subprocess.run([str(build / "qos-notify"), "busy", "gpu0", "web"], env=env, check=True)
    msg = decode(s.recv(512))
    assert (msg.gpu, msg.tenant, msg.busy) == ("gpu0", "web", True)
    assert msg.sent_ns is not None and before <= msg.sent_ns <= time.monotonic_ns()
    env.update(VGPUKIT_QOS_GPU="MIG-1:2", VGPUKIT_QOS_TENANT="batch")
    subprocess.run([str(build / "qos-notify"), "idle"], env=env, check=True)
    msg = decode(s.recv(512))
    assert (msg.gpu, msg.tenant, msg.busy) == ("MIG-1:2", "batch", False)
    bad = subprocess.run([str(build / "qos-notify"), "busy", "gpu/0", "x"], env=env)
    assert bad.returncode == 2
    s.close()
    os.unlink(tmp_path / "d.sock")  # no daemon: exit 1, no hang
    assert subprocess.run([str(build / "qos-notify"), "busy"], env=env).returncode == 1


def test_launch_hook_reports_bursts(build: Path, tmp_path: Path) -> None:
    s = listen(tmp_path / "d.sock")
    env = dict(
        os.environ,
        LD_PRELOAD=str(build / "libvgpukit-qos-hook.so"),
        VGPUKIT_QOS_SOCKET=str(tmp_path / "d.sock"),
        VGPUKIT_QOS_GPU="gpu0",
        VGPUKIT_QOS_TENANT="train",
        VGPUKIT_QOS_IDLE_MS="40",
    )
    subprocess.run([str(build / "app")], env=env, check=True, timeout=20)
    states = []
    s.settimeout(0.5)
    while True:
        try:
            states.append(decode(s.recv(512)).busy)
        except TimeoutError:
            break
    assert states[:4] == [True, False, True, False]


def test_c_client_drives_the_daemon(build: Path, daemon: DaemonProc, spawn) -> None:  # type: ignore[no-untyped-def]
    daemon.start()
    on, off = spawn(), spawn()
    for name, p, cls in (("on", on, "online"), ("off", off, "offline")):
        daemon.req(op="tenant-add", gpu="gpu0", name=name, tenant={"class": cls, "share": 50, "pids": [p.pid]})
    env = dict(os.environ, VGPUKIT_QOS_SOCKET=str(daemon.host.state_dir("qos", "demand.sock")))
    notify = str(build / "qos-notify")
    subprocess.run([notify, "busy", "gpu0", "off"], env=env, check=True)
    subprocess.run([notify, "busy", "gpu0", "on"], env=env, check=True)
    assert wait_for(lambda: proc_state(off.pid) in "Tt", timeout=2)
    subprocess.run([notify, "idle", "gpu0", "on"], env=env, check=True)
    assert wait_for(lambda: proc_state(off.pid) not in "Tt", timeout=2)
