"""The demand datagram protocol: format, credentials, and a non-root tenant speaking for itself only."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from vgpukit.host import Host
from vgpukit.qos.demand import DemandClient, Refusals, decode, encode, open_server, receive

from .conftest import DaemonProc, proc_state, wait_for


def test_encode_decode() -> None:
    msg = decode(encode("0000:3b:00.0", "web-1", True, 42), pid=7, uid=0)
    assert (msg.gpu, msg.tenant, msg.busy, msg.sent_ns, msg.pid) == ("0000:3b:00.0", "web-1", True, 42, 7)
    assert decode(b"1 gpu0 t idle").sent_ns is None
    for bad in (b"", b"2 gpu0 t busy", b"1 gpu0 t maybe", b"1 gpu/0 t busy", b"1 gpu0 t busy x", b"\xff\xfe"):
        with pytest.raises(ValueError):
            decode(bad)


def test_refusals_are_counted_and_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    S = 1_000_000_000
    r = Refusals(logging.getLogger("test-refusals"), interval_s=60)
    with caplog.at_level(logging.DEBUG, "test-refusals"):
        for i in range(1000):  # a flood over 50 s: the first line only
            r.refuse("not-owner" if i % 2 else "malformed", f"pid {i}", i * S // 20)
            r.tick(i * S // 20)
        r.refuse("unknown-tenant", "gpu0/x", 50 * S)  # counted, debug only
        warnings = [x for x in caplog.records if x.levelno == logging.WARNING]
        assert len(warnings) == 1 and "pid 0" in warnings[0].getMessage()
        r.tick(59 * S)
        assert len([x for x in caplog.records if x.levelno == logging.WARNING]) == 1
        r.tick(60 * S)  # the interval ended: one summary of the 999 others
        summary = caplog.records[-1].getMessage()
        assert "999 more" in summary and "in the last 60 s" in summary and "not-owner 500" in summary
        r.tick(120 * S)  # a quiet interval: nothing to say, and the next refusal is logged at once
        n = len(caplog.records)
        r.refuse("malformed", "pid 7", 121 * S)
        assert len(caplog.records) == n + 1 and "pid 7" in caplog.records[-1].getMessage()
    assert r.total == {"malformed": 501, "unknown-tenant": 1, "not-owner": 500}


def test_server_receives_with_credentials(tmp_path: Path) -> None:
    host = Host(tmp_path)
    srv = open_server(host)
    c = DemandClient.for_host(host, "gpu0", "a")
    assert c.busy() and c.idle()
    got = receive(srv)
    assert [decode(d).busy for d, _, _ in got] == [True, False]
    assert all(pid == os.getpid() and uid == os.getuid() for _, pid, uid in got)
    assert receive(srv) == []
    srv.close()
    os.unlink(tmp_path / "run/vgpukit/qos/demand.sock")
    assert not c.busy()  # no daemon: a no-op, never an exception


SENDER = r"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for line in sys.stdin:
    s.sendto(("1 gpu0 " + line.strip() + " busy\n").encode(), sys.argv[1])
    sys.stdout.write("sent\n"); sys.stdout.flush()
"""


@pytest.fixture
def open_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="vgpukit-qos-cred-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.realproc
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root and python3")
def test_non_root_tenant_speaks_only_for_itself(open_root: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    d = DaemonProc(open_root).start()
    try:
        sock = str(d.host.state_dir("qos", "demand.sock"))
        nobody = subprocess.Popen(
            ["/usr/bin/python3", "-c", SENDER, sock],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            user=65534,
            group=65534,
            cwd="/",
        )
        other, off = spawn(), spawn()
        for name, pid, cls in (
            ("mine", nobody.pid, "online"),
            ("other", other.pid, "online"),
            ("off", off.pid, "offline"),
        ):
            tenant = {"class": cls, "share": 30, "pids": [pid], "demand": "notify"}  # spinners: not sampled
            d.req(op="tenant-add", gpu="gpu0", name=name, tenant=tenant)
        DemandClient.for_host(d.host, "gpu0", "off").busy()  # root may speak for anyone
        assert wait_for(lambda: d.status()["off"]["busy"])
        assert nobody.stdin is not None and nobody.stdout is not None
        nobody.stdin.write("other\n")
        nobody.stdin.flush()
        assert nobody.stdout.readline() == "sent\n"
        assert not wait_for(lambda: proc_state(off.pid) in "Tt", timeout=0.5)  # refused: not its process
        assert not d.status()["other"]["busy"]
        assert d.req(op="status")["demand_refused"]["not-owner"] == 1
        nobody.stdin.write("mine\n")
        nobody.stdin.flush()
        assert wait_for(lambda: proc_state(off.pid) in "Tt", timeout=3)  # accepted: preempts offline
        nobody.stdin.close()
        nobody.wait(5)
    finally:
        d.stop()
