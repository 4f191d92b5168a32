"""Control socket: one JSON request line, one JSON reply line, over a root-only Unix socket.

Requests: ``{"op": "ping" | "status" | "set" | "tenant-add" | "tenant-rm" | "reload", ...}``.
Replies: ``{"ok": true, ...}`` or ``{"ok": false, "error": {<VgpukitError.to_dict()>}}``.
The server checks the peer's credentials (SO_PEERCRED): root or the socket's owner only.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..engine.lock import flocked, try_flock
from ..errors import EXIT_FAILED, Busy, HostIOError, InvalidInput, NotFound, VgpukitError
from ..host import Host

MAX_REQUEST = 1 << 20
_UCRED = struct.Struct("iII")

Handler = Callable[[dict[str, Any]], dict[str, Any]]


def socket_path(host: Host) -> Path:
    return host.state_dir("qos", "control.sock")


def daemon_lock(host: Host) -> AbstractContextManager[int]:
    """One QoS daemon per host: an exclusive ``flock`` on ``/run/vgpukit/qos/daemon.pid`` (holding the
    holder's pid), taken before the daemon touches anything. A second daemon exits 4 naming the first;
    the kernel drops the lock when its holder dies, so a killed daemon never blocks the next one (its
    forked guardian closes its copy of the descriptor: the one this yields)."""

    def take(fd: int, shown: str) -> None:
        if try_flock(fd, shown):
            return
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        who = f"pid {pid}" if pid.isascii() and pid.isdigit() else "another process"
        raise Busy(
            f"a QoS daemon already runs on this host: {who}",
            path=shown,
            hint="talk to it with vgpukit qos status, or stop it first",
        )

    path = host.state_dir("qos", "daemon.pid")
    return flocked(host, path, "the QoS daemon's pid file", take, f"{os.getpid()}\n")


def error_reply(err: VgpukitError) -> dict[str, Any]:
    return {"ok": False, "error": err.to_dict()}


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""


class ControlServer:
    """Non-blocking server multiplexed into the daemon's poll loop."""

    def __init__(self, host: Host, handler: Handler) -> None:
        self.host = host
        self.handler = handler
        path = socket_path(host)
        host.mkdir(path.parent)
        host.remove(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.sock.bind(host.socket_address(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.conns: dict[int, _Conn] = {}

    def fds(self) -> list[socket.socket]:
        return [self.sock, *(c.sock for c in self.conns.values())]

    def close(self) -> None:
        for c in list(self.conns.values()):
            c.sock.close()
        self.conns.clear()
        self.sock.close()

    def ready(self, sock: socket.socket) -> None:
        if sock is self.sock:
            self._accept()
            return
        conn = self.conns.get(sock.fileno())
        if conn is None:
            return
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.buf += data
        if len(conn.buf) > MAX_REQUEST:
            self._reply(conn, error_reply(InvalidInput("request too large")))
            return
        if b"\n" in conn.buf:
            line = conn.buf.split(b"\n", 1)[0]
            self._reply(conn, self._handle(line))

    def _accept(self) -> None:
        try:
            sock, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        _pid, uid, _gid = _UCRED.unpack(creds)
        if uid not in (0, os.getuid()):
            reply = error_reply(VgpukitError(f"permission denied for uid {uid}: root only"))
            try:
                sock.sendall(json.dumps(reply).encode() + b"\n")
            finally:
                sock.close()
            return
        sock.setblocking(False)
        self.conns[sock.fileno()] = _Conn(sock)

    def _handle(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get("op"), str):
                raise InvalidInput('a request is a JSON object with an "op"')
            return self.handler(req)
        except VgpukitError as err:
            return error_reply(err)
        except ValueError as exc:
            return error_reply(InvalidInput(f"bad request: {exc}"))
        except Exception as exc:  # a bug must not take the daemon down
            return error_reply(VgpukitError(f"internal error: {type(exc).__name__}: {exc}"))

    def _reply(self, conn: _Conn, reply: dict[str, Any]) -> None:
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(1.0)
            conn.sock.sendall(json.dumps(reply, default=str).encode() + b"\n")
        except OSError:
            pass
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self.conns.pop(conn.sock.fileno(), None)
        conn.sock.close()


_KINDS: dict[str, type[VgpukitError]] = {}


def _error_from(doc: dict[str, Any]) -> VgpukitError:
    from .. import errors

    if not _KINDS:
        for obj in vars(errors).values():
            if isinstance(obj, type) and issubclass(obj, VgpukitError):
                _KINDS.setdefault(obj.kind, obj)
    cls = _KINDS.get(str(doc.get("error")), VgpukitError)
    err = cls(str(doc.get("message", "daemon error")), hint=doc.get("hint"))
    if cls is VgpukitError and doc.get("exit_code") not in (None, EXIT_FAILED):
        err.exit_code = int(doc["exit_code"])
    return err


def request(host: Host, req: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send one request to the daemon; raises the daemon's error as the same error class."""
    path = socket_path(host)
    address = host.socket_address(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(address)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise NotFound(
                f"the QoS daemon is not running (no {host.display(path)})",
                hint="start it with: vgpukit qos daemon",
            ) from exc
        except PermissionError as exc:
            raise HostIOError(f"permission denied on {host.display(path)}: the QoS socket is root-only") from exc
        sock.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while b"\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
    except TimeoutError as exc:
        raise HostIOError("the QoS daemon did not answer in time") from exc
    finally:
        sock.close()
    try:
        reply = json.loads(buf)
    except ValueError as exc:
        raise HostIOError("the QoS daemon sent an unreadable reply") from exc
    if not reply.get("ok"):
        raise _error_from(reply.get("error") or {})
    return dict(reply)
