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
from vgpukit.qos.demand import DemandClient, decode, encode, open_server, receive

from .conftest import DaemonProc, proc_state, wait_for


def test_encode_decode() -> None:
    msg = decode(encode("0000:3b:00.0", "web-1", True, 42), pid=7, uid=0)
    assert (msg.gpu, msg.tenant, msg.busy, msg.sent_ns, msg.pid) == ("0000:3b:00.0", "web-1", True, 42, 7)
    assert decode(b"1 gpu0 t idle").sent_ns is None
    for bad in (b"", b"2 gpu0 t busy", b"1 gpu0 t maybe", b"1 gpu/0 t busy", b"1 gpu0 t busy x", b"\xff\xfe"):
        with pytest.raises(ValueError):
            decode(bad)


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
            d.req(op="tenant-add", gpu="gpu0", name=name, tenant={"class": cls, "share": 30, "pids": [pid]})
        DemandClient.for_host(d.host, "gpu0", "off").busy()  # root may speak for anyone
        assert wait_for(lambda: d.status()["off"]["busy"])
        assert nobody.stdin is not None and nobody.stdout is not None
        nobody.stdin.write("other\n")
        nobody.stdin.flush()
        assert nobody.stdout.readline() == "sent\n"
        assert not wait_for(lambda: proc_state(off.pid) in "Tt", timeout=0.5)  # refused: not its process
        assert not d.status()["other"]["busy"]
        nobody.stdin.write("mine\n")
        nobody.stdin.flush()
        assert wait_for(lambda: proc_state(off.pid) in "Tt", timeout=3)  # accepted: preempts offline
        nobody.stdin.close()
        nobody.wait(5)
    finally:
        d.stop()
