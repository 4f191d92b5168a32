"""The ``vgpukit qos`` commands against a real daemon on a temporary root."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import invoke
from vgpukit.host import Host
from vgpukit.qos.backends import PidBackend
from vgpukit.qos.metrics import Metrics
from vgpukit.qos.model import Gpu, Tenant
from vgpukit.qos.runtime import GpuRuntime

from .conftest import REPO, DaemonProc, proc_state, wait_for


def test_cli_round_trip(daemon: DaemonProc, spawn) -> None:  # type: ignore[no-untyped-def]
    root = daemon.root

    def qos(*args: str):  # type: ignore[no-untyped-def]
        return invoke(None, "--root", str(root), "qos", *args)

    r = qos("status")
    assert r.exit_code == 3 and "not running" in r.stderr
    daemon.start()
    a, b = spawn(), spawn()
    r = qos("set", "gpu0", "--policy", "burst-share", "--slice-ms", "5", "--json")
    doc = json.loads(r.stdout)
    assert (
        r.exit_code == 0
        and doc["schema"] == "vgpukit.qos-set/v1"
        and doc["changed"]
        and doc["settings"]["slice_ms"] == 5
    )
    r = qos("tenant", "add", "gpu0", "a", "--class", "online", "--share", "30", "--pid", str(a.pid), "--dry-run")
    assert r.exit_code == 0 and "dry run" in r.stdout
    r = qos("tenant", "add", "gpu0", "a", "--class", "online", "--share", "30", "--pid", str(a.pid))
    assert r.exit_code == 0 and "add online tenant a" in r.stdout
    r = qos(
        "tenant", "add", "gpu0", "b", "--class", "offline", "--share", "70", "--pid", str(b.pid), "--demand", "sample"
    )
    assert r.exit_code == 0
    r = qos("status", "--json")
    doc = json.loads(r.stdout)
    assert doc["schema"] == "vgpukit.qos-status/v1"
    names = {t["name"]: t for t in doc["gpus"][0]["tenants"]}
    assert names["a"]["class"] == "online" and names["b"]["demand"] == "sample"
    r = qos("status", "gpu0")
    assert r.exit_code == 0 and "burst-share" in r.stdout and "online" in r.stdout
    # the online tenant says busy through the CLI: the offline one is frozen
    assert qos("notify", "gpu0", "b", "busy").exit_code == 0
    assert qos("notify", "gpu0", "a", "busy").exit_code == 0
    assert wait_for(lambda: proc_state(b.pid) in "Tt", timeout=3)
    assert qos("notify", "gpu0", "a", "idle").exit_code == 0
    assert wait_for(lambda: proc_state(b.pid) not in "Tt", timeout=3)
    # errors: one line, the right exit code, the daemon keeps running
    assert qos("tenant", "add", "gpu0", "c", "--class", "online", "--share", "101", "--pid", "5").exit_code == 2
    r = qos("tenant", "add", "gpu0", "c", "--class", "online", "--share", "80", "--pid", str(a.pid))
    assert r.exit_code == 4 and "add up to 110" in r.stderr
    assert qos("tenant", "add", "gpu0", "c", "--class", "online", "--share", "1", "--pid", "999999").exit_code == 3
    assert qos("tenant", "add", "gpu0", "c", "--class", "online", "--share", "1").exit_code == 2
    assert qos("tenant", "rm", "gpu0", "zz").exit_code == 3
    assert qos("set", "gpu0").exit_code == 2
    r = qos("tenant", "rm", "gpu0", "a", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["changed"]


def test_sd_notify_ready_and_metrics_port(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(str(tmp_path / "notify"))
    ns.settimeout(15)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        VGPUKIT_ROOT=str(tmp_path),
        PYTHONPATH=str(REPO),
        NOTIFY_SOCKET=str(tmp_path / "notify"),
        WATCHDOG_USEC="200000",
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "vgpukit", "qos", "daemon", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"],
        env=env,
    )
    try:
        assert b"READY=1" in ns.recv(256)
        assert b"WATCHDOG=1" in ns.recv(256)
        d = DaemonProc(tmp_path)
        wait_for(d._ping)
        x = spawn()
        d.req(op="tenant-add", gpu="gpu0", name="x", tenant={"class": "offline", "share": 20, "pids": [x.pid]})
        import urllib.request

        def scraped() -> str:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()

        assert wait_for(
            lambda: 'vgpukit_qos_target_share_ratio{class="offline",gpu="gpu0",tenant="x"} 0.2' in scraped()
        )
        assert 'vgpukit_qos_config_reloads_total{result="refused"} 0.0' in scraped()
    finally:
        p.terminate()
        assert p.wait(10) == 0


def test_metrics_observer_text() -> None:
    m = Metrics()
    clock = iter(range(0, 10**12, 1000)).__next__
    rt = GpuRuntime(
        Gpu("gpu0", tenants=(Tenant("t", "online", 40, "pids", pids=(os.getpid(),)),)),
        {"t": PidBackend(Host(Path("/")), (os.getpid(),))},
        clock,
        m,
    )
    rt.demand("t", True, clock(), sent_ns=0)
    conf = {"path": "/etc/vgpukit/qos.yaml", "reloads": 2, "reloads_refused": 3, "reload_error": {"message": "x"}}
    m.update([rt.status(clock())], {"config": conf, "demand_refused": {"malformed": 4, "not-owner": 0}})
    text = m.text()
    assert 'vgpukit_qos_config_reloads_total{result="refused"} 3.0' in text
    assert "vgpukit_qos_config_reload_error 1.0" in text
    assert 'vgpukit_qos_demand_refused_total{reason="malformed"} 4.0' in text
    assert 'vgpukit_qos_tenant_state{class="online",gpu="gpu0",state="running",tenant="t"} 1.0' in text
    assert "vgpukit_qos_detection_latency_seconds_count" in text
    assert 'vgpukit_qos_achieved_share_ratio{class="online",gpu="gpu0",tenant="t",window="10s"}' in text


def test_daemon_on_a_simulated_host(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import make_sim

    sim = make_sim(tmp_path / "host")
    d = DaemonProc(sim, sim=True).start()
    try:
        p, q = spawn(), spawn()
        rc = invoke(sim, "qos", "set", "gpu0", "--policy", "fixed-share").exit_code
        for name, pid, share in (("a", p.pid, 20), ("b", q.pid, 30)):
            args = ["gpu0", name, "--class", "offline", "--share", str(share), "--pid", str(pid), "--demand", "sample"]
            rc |= invoke(sim, "qos", "tenant", "add", *args).exit_code
        assert rc == 0
        assert (sim / "run/vgpukit/qos/control.sock").exists()
        assert wait_for(lambda: d.status()["a"]["frozen_s"] > 0.2 and d.status()["b"]["frozen_s"] > 0.2, timeout=5)
    finally:
        assert d.stop() == 0
    assert proc_state(p.pid) not in "Tt" and proc_state(q.pid) not in "Tt"


def test_tenant_changes_refresh_the_gpu_share_spec(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    """qos tenant add/rm change tenants through the daemon; the gpu-share CDI spec follows them."""
    import yaml

    from tests.conftest import make_sim

    sim = make_sim(tmp_path / "host")
    lib = sim / "usr/lib/vgpukit/libvgpukit-cuda.so"
    lib.parent.mkdir(parents=True)
    lib.write_text("library\n")
    spec = sim / "etc/cdi/vgpukit-gpu-share.yaml"
    d = DaemonProc(sim, sim=True).start()
    try:
        assert invoke(sim, "cdi", "enable", "--class", "gpu-share").exit_code == 0
        assert not spec.exists()
        p = spawn("sleep 60")
        r = invoke(sim, "qos", "tenant", "add", "gpu1", "t1", "--class", "online", "--share", "40", "--pid", str(p.pid))
        assert r.exit_code == 0, r.stderr
        assert "write /etc/cdi/vgpukit-gpu-share.yaml (vgpukit.io/gpu-share, 1 device)" in r.stdout
        dev = yaml.safe_load(spec.read_text())["devices"][0]
        assert dev["name"] == "t1" and "VGPUKIT_QOS_GPU=gpu1" in dev["containerEdits"]["env"]
        assert invoke(sim, "qos", "tenant", "rm", "gpu1", "t1").exit_code == 0
        assert not spec.exists()
    finally:
        d.stop()


def test_tenant_add_warns_when_the_cuda_library_is_missing(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    """gpu-share enabled, --memory given, libvgpukit-cuda.so absent: no spec can carry the tenant and no
    cap is enforced; tenant add says so in one warning line (and a warnings field under --json)."""
    from tests.conftest import make_sim

    sim = make_sim(tmp_path / "host")
    d = DaemonProc(sim, sim=True).start()
    try:
        assert invoke(sim, "cdi", "enable", "--class", "gpu-share").exit_code == 0
        p, q = spawn("sleep 60"), spawn("sleep 60")
        args = ["--class", "online", "--share", "40", "--memory", "4GiB", "--pid"]
        r = invoke(sim, "qos", "tenant", "add", "gpu1", "t1", *args, str(p.pid))
        assert r.exit_code == 0, r.stderr
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("vgpukit: warning: "), r.stderr
        assert "/usr/lib/vgpukit/libvgpukit-cuda.so is missing" in lines[0] and "t1" in lines[0]
        r = invoke(sim, "qos", "tenant", "add", "gpu1", "t2", *args, str(q.pid), "--json")
        doc = json.loads(r.stdout)
        assert r.exit_code == 0 and len(doc["warnings"]) == 1 and "libvgpukit-cuda.so is missing" in doc["warnings"][0]
        assert not (sim / "etc/cdi/vgpukit-gpu-share.yaml").exists()
        # with the library in place: no warning
        lib = sim / "usr/lib/vgpukit/libvgpukit-cuda.so"
        lib.parent.mkdir(parents=True)
        lib.write_text("library\n")
        assert invoke(sim, "qos", "tenant", "rm", "gpu1", "t2").exit_code == 0
        r = invoke(sim, "qos", "tenant", "add", "gpu1", "t2", *args, str(q.pid), "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["warnings"] == [] and r.stderr == ""
    finally:
        d.stop()


def test_daemon_metrics_port_in_use_is_one_line_exit_4(tmp_path: Path) -> None:
    """The one metrics server (vgpukit/metrics_server.py) says a port in use as the exporter does."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = dict(os.environ, VGPUKIT_ROOT=str(tmp_path), PYTHONPATH=str(REPO))
        env.pop("NOTIFY_SOCKET", None)
        cmd = ["qos", "daemon", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"]
        out = subprocess.run(
            [sys.executable, "-m", "vgpukit", *cmd], env=env, capture_output=True, text=True, timeout=60
        )
    assert out.returncode == 4, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if "error" in ln]
    assert errors == [
        f"vgpukit: error: port {port} is already in use (hint: another QoS daemon? pick one with --metrics-port)"
    ] or (len(errors) == 1 and f"port {port} is already in use" in errors[0]), out.stderr
    # refused before the daemon said it was ready (systemd's READY=1) or touched a tenant
    assert "daemon ready" not in out.stderr and "stopped" not in out.stderr, out.stderr


def test_daemon_metrics_address_not_here_is_exit_1(tmp_path: Path) -> None:
    """Another bind failure than a port in use: one line, exit 1 (host-io), before the daemon is ready."""
    env = dict(os.environ, VGPUKIT_ROOT=str(tmp_path), PYTHONPATH=str(REPO))
    env.pop("NOTIFY_SOCKET", None)
    cmd = ["qos", "daemon", "--metrics-port", "19602", "--metrics-addr", "192.0.2.1"]  # TEST-NET-1: not ours
    out = subprocess.run([sys.executable, "-m", "vgpukit", *cmd], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "vgpukit: error: cannot listen on 192.0.2.1:19602: " in out.stderr and "daemon ready" not in out.stderr
    assert "Traceback" not in out.stderr
