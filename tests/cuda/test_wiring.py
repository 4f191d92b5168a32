"""vgpukit wiring: `qos tenant add --memory/--inflight`, qos.yaml, and `qos status` memory used/cap."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from vgpukit.cli.main import main

from ..qos.conftest import DaemonProc
from .conftest import Cuda

CAP = 16 << 20


def qos(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["--root", str(root), "qos", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"])


def test_tenant_add_memory_caps_the_tenants_processes(cuda: Cuda, capsys: pytest.CaptureFixture[str]) -> None:
    daemon = DaemonProc(cuda.root).start()
    s = sleeper()
    try:
        rc, _, err = qos(cuda.root, capsys, "tenant", "add", "gpu0", "web", "--class", "online", "--share", "40",
                         "--pid", str(s.pid), "--memory", "16MiB", "--inflight", "2")  # fmt: skip
        assert rc == 0, err
        config = (cuda.root / "run" / "vgpukit" / "cuda" / "web" / "config").read_text()
        assert config == f"memory={CAP}\ninflight=2\ngpu=gpu0\n"
        out = cuda.run("paths", "mem", tenant=False, VGPUKIT_QOS_TENANT="web")  # the config is all it needs
        assert int(out["total"]) == CAP and out["over"] == "2" and int(out["peak"]) == CAP
        holder = cuda.popen("paths", "mem", "hold", str(4 << 20), tenant=False, VGPUKIT_QOS_TENANT="web")
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        rc, out_text, _ = qos(cuda.root, capsys, "status")
        assert rc == 0 and "4MiB/16MiB" in out_text
        rc, out_text, _ = qos(cuda.root, capsys, "status", "--json")
        web = json.loads(out_text)["gpus"][0]["tenants"][0]
        assert (web["memory"], web["memory_used"]) == (CAP, 4 << 20)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        rc, out_text, _ = qos(cuda.root, capsys, "status")
        assert "0B/16MiB" in out_text  # a killed process's memory is not counted
        rc, _, _ = qos(cuda.root, capsys, "tenant", "rm", "gpu0", "web")
        assert rc == 0 and not (cuda.root / "run" / "vgpukit" / "cuda" / "web" / "config").exists()
    finally:
        s.kill()
        s.wait()
        daemon.stop()


def test_memory_from_qos_yaml(cuda: Cuda, tmp_path: Path) -> None:
    s = sleeper()
    conf = tmp_path / "qos.yaml"
    conf.write_text(
        "gpus:\n  gpu0:\n    tenants:\n"
        f"      batch: {{class: offline, share: 50, pids: [{s.pid}], memory: 8MiB, inflight_ms: 100}}\n"
    )
    daemon = DaemonProc(cuda.root, config=conf).start()
    try:
        config = (cuda.root / "run" / "vgpukit" / "cuda" / "batch" / "config").read_text()
        assert config == f"memory={8 << 20}\ninflight_ms=100\ngpu=gpu0\n"
        out = cuda.run("paths", "mem", tenant=False, VGPUKIT_QOS_TENANT="batch")
        assert int(out["total"]) == 8 << 20
    finally:
        s.kill()
        s.wait()
        daemon.stop()


@pytest.mark.parametrize("bad", ["lots", "4XB", "0", "-1", "4GB", "1.5"])  # GB: ambiguous (docs/cli.md, "Sizes")
def test_bad_memory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str) -> None:
    rc, _, err = qos(tmp_path, capsys, "tenant", "add", "gpu0", "x", "--class", "online", "--share", "1",
                       "--pid", "4242", "--memory", bad)  # fmt: skip
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_tenant_library_settings_round_trip() -> None:
    from vgpukit.errors import InvalidInput
    from vgpukit.qos.model import Tenant

    t = Tenant.from_dict("web", {"class": "online", "share": 10, "pids": [4242], "memory": "4GiB", "inflight": 8})
    assert (t.memory, t.inflight, t.inflight_ms) == (4 << 30, 8, None)
    assert t.library_config == {"memory": 4 << 30, "inflight": 8}
    assert Tenant.from_dict("web", t.to_dict()) == t  # runtime.json keeps bytes
    plain = Tenant.from_dict("web", {"class": "online", "share": 10, "pids": [4242]})
    assert plain.library_config == {} and "memory" not in plain.to_dict()
    for bad in ({"memory": True}, {"memory": "4 GiB of it"}, {"inflight": 0}, {"inflight_ms": "100"}):
        with pytest.raises(InvalidInput):
            Tenant.from_dict("web", {"class": "online", "share": 10, "pids": [4242], **bad})
