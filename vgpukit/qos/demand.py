"""The tenant demand protocol: one datagram per busy/idle change, and a small Python client.

Wire format (documented in docs/qos.md; the C hook in contrib/qos-hook speaks it too): a Unix
datagram socket at ``<state dir>/qos/demand.sock`` (``/run/vgpukit/qos/demand.sock``), mode 0666.
Each datagram is one ASCII line::

    1 <gpu> <tenant> busy|idle [<CLOCK_MONOTONIC ns>]

The daemon reads the sender's credentials (SO_PASSCRED): root may speak for any tenant, anyone
else only for a tenant that contains the sending process. The timestamp, when given, lets the daemon
measure detection latency. A datagram wakes the daemon at once (no polling on either side).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidInput
from ..host import Host
from .model import check_key

VERSION = "1"
MAX_DATAGRAM = 512


@dataclass(frozen=True)
class DemandMsg:
    gpu: str
    tenant: str
    busy: bool
    sent_ns: int | None
    pid: int
    uid: int


def encode(gpu: str, tenant: str, busy: bool, sent_ns: int | None = None) -> bytes:
    ts = time.monotonic_ns() if sent_ns is None else sent_ns
    return f"{VERSION} {gpu} {tenant} {'busy' if busy else 'idle'} {ts}\n".encode()


def decode(data: bytes, pid: int = 0, uid: int = 0) -> DemandMsg:
    """Parse one datagram; raises ValueError on anything malformed."""
    parts = data.decode("ascii").split()
    if len(parts) not in (4, 5) or parts[0] != VERSION or parts[3] not in ("busy", "idle"):
        raise ValueError(f"malformed demand datagram {data[:80]!r}")
    try:
        check_key(parts[1], "GPU key")
        check_key(parts[2], "tenant name")
    except InvalidInput as err:
        raise ValueError(str(err)) from err
    sent = int(parts[4]) if len(parts) == 5 else None
    return DemandMsg(parts[1], parts[2], parts[3] == "busy", sent, pid, uid)


def socket_path(host: Host) -> Path:
    return host.state_dir("qos", "demand.sock")


def open_server(host: Host) -> socket.socket:
    """Bind the daemon's datagram socket (replacing a stale one) with credential passing on."""
    path = socket_path(host)
    host.mkdir(path.parent)
    host.remove(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.bind(host.socket_address(path))
    os.chmod(path, 0o666)
    sock.setblocking(False)
    return sock


_CREDS = struct.Struct("iII")


def receive(sock: socket.socket) -> list[tuple[bytes, int, int]]:
    """Every pending datagram with the sender's (pid, uid)."""
    out: list[tuple[bytes, int, int]] = []
    while True:
        try:
            data, anc, _flags, _addr = sock.recvmsg(MAX_DATAGRAM, socket.CMSG_SPACE(_CREDS.size))
        except (BlockingIOError, InterruptedError):
            return out
        pid, uid = 0, -1
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid, uid, _gid = _CREDS.unpack(payload[: _CREDS.size])
        out.append((data, pid, uid))


class DemandClient:
    """What a tenant written in Python calls when it has work and when it is done.

    Sending never blocks and never fails the tenant: if no daemon listens, the call is a no-op.
    """

    def __init__(self, path: Path | str, gpu: str, tenant: str) -> None:
        self.path = str(path)
        self.gpu = check_key(gpu, "GPU key")
        self.tenant = check_key(tenant, "tenant name")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)

    @classmethod
    def for_host(cls, host: Host, gpu: str, tenant: str) -> DemandClient:
        return cls(host.socket_address(socket_path(host)), gpu, tenant)

    def send(self, busy: bool) -> bool:
        try:
            self.sock.sendto(encode(self.gpu, self.tenant, busy), self.path)
            return True
        except OSError:
            return False

    def busy(self) -> bool:
        return self.send(True)

    def idle(self) -> bool:
        return self.send(False)

    @contextmanager
    def working(self) -> Iterator[None]:
        self.busy()
        try:
            yield
        finally:
            self.idle()

    def close(self) -> None:
        self.sock.close()
