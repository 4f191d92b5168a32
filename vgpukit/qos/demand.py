"""The tenant demand protocol: one datagram per busy/idle change, and a small Python client.

Wire format (documented in docs/qos.md; the C hook in contrib/qos-hook speaks it too): a Unix
datagram socket at ``<state dir>/qos/demand.sock`` (``/run/vgpukit/qos/demand.sock``), mode 0666.
Each datagram is one ASCII line::

    1 <gpu> <tenant> busy|idle [<CLOCK_MONOTONIC ns>]
    1 <gpu> <tenant> need|low|moved <value> <CLOCK_MONOTONIC ns>

The second form is memory QoS (libvgpukit-cuda, docs/cuda.md "Memory QoS"): ``need BYTES`` (an online
tenant's allocation the device refused, BYTES short), ``low BYTES`` (the device's free memory is BYTES
under the watermark), ``moved SEQ`` (an offline tenant's process complied with eviction request SEQ).

The daemon reads the sender's credentials (SO_PASSCRED): root may speak for any tenant, anyone
else only for a tenant that contains the sending process. The timestamp, when given, lets the daemon
measure detection latency. A datagram wakes the daemon at once (no polling on either side).
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from ..errors import InvalidInput
from ..host import Host
from .model import check_key

VERSION = "1"
MAX_DATAGRAM = 512
REFUSAL_LOG_INTERVAL_S = 60
# why a datagram was not acted on; unknown-tenant is normal (a hook in a process that is no tenant,
# a datagram sent before its tenant was added) and only counted, the others are logged, rate-limited
REFUSALS = ("malformed", "unknown-tenant", "not-owner")
_LOGGED = ("malformed", "not-owner")


MEMORY_VERBS = ("need", "low", "moved")


class DemandMsg(msgspec.Struct, frozen=True):
    gpu: str
    tenant: str
    busy: bool
    sent_ns: int | None
    pid: int
    uid: int
    verb: str = ""  # busy | idle | need | low | moved
    value: int = 0  # need/low: bytes, moved: the request's seq


def encode(gpu: str, tenant: str, busy: bool, sent_ns: int | None = None) -> bytes:
    ts = time.monotonic_ns() if sent_ns is None else sent_ns
    return f"{VERSION} {gpu} {tenant} {'busy' if busy else 'idle'} {ts}\n".encode()


def decode(data: bytes, pid: int = 0, uid: int = 0) -> DemandMsg:
    """Parse one datagram; raises ValueError on anything malformed."""
    parts = data.decode("ascii").split()
    memory = len(parts) == 6 and parts[3] in MEMORY_VERBS
    if parts[:1] != [VERSION] or not (memory or (len(parts) in (4, 5) and parts[3] in ("busy", "idle"))):
        raise ValueError(f"malformed demand datagram {data[:80]!r}")
    try:
        check_key(parts[1], "GPU key")
        check_key(parts[2], "tenant name")
    except InvalidInput as err:
        raise ValueError(str(err)) from err
    if memory:
        if not (parts[4].isdigit() and len(parts[4]) <= 20 and parts[5].isdigit()):
            raise ValueError("malformed memory datagram")
        return DemandMsg(parts[1], parts[2], False, int(parts[5]), pid, uid, parts[3], int(parts[4]))
    sent = int(parts[4]) if len(parts) == 5 else None
    return DemandMsg(parts[1], parts[2], parts[3] == "busy", sent, pid, uid, parts[3])


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


class Refusals:
    """Refused datagrams: counted by reason, logged at most one line per interval.

    Anyone on the host may send to the socket, so a log line per refusal would let a local user flood
    the journal. The first refusal after a quiet interval is logged with its sender; the ones after it
    are summarised once per interval ("N more ... in the last 60 s") for as long as they keep coming.
    """

    def __init__(self, log: logging.Logger, interval_s: int = REFUSAL_LOG_INTERVAL_S) -> None:
        self.log = log
        self.interval_s = interval_s
        self.total = dict.fromkeys(REFUSALS, 0)
        self.pending = dict.fromkeys(_LOGGED, 0)
        self.quiet_until: int | None = None  # while set, refusals are only counted

    def refuse(self, reason: str, detail: str, now: int) -> None:
        self.total[reason] += 1
        if reason not in _LOGGED:
            self.log.debug("demand datagram ignored (%s): %s", reason, detail)
            return
        self.tick(now)
        if self.quiet_until is None:
            self.log.warning(
                "demand datagram refused (%s): %s; further refusals are summarised every %d s",
                reason,
                detail,
                self.interval_s,
            )
            self.quiet_until = now + self.interval_s * 1_000_000_000
        else:
            self.pending[reason] += 1

    def tick(self, now: int) -> None:
        """Called from the daemon's housekeeping: the summary line of an interval that ended."""
        if self.quiet_until is None or now < self.quiet_until:
            return
        n = sum(self.pending.values())
        if not n:
            self.quiet_until = None
            return
        reasons = ", ".join(f"{r} {c}" for r, c in self.pending.items() if c)
        self.log.warning("%d more demand datagram(s) refused in the last %d s (%s)", n, self.interval_s, reasons)
        self.pending = dict.fromkeys(_LOGGED, 0)
        self.quiet_until = now + self.interval_s * 1_000_000_000
