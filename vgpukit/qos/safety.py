"""Never leave a tenant frozen.

Three layers (docs/qos.md, "Crash safety"):

1. The *managed set* -- every target the daemon may freeze -- is written to
   ``<state dir>/qos/frozen.json`` before the first freeze of any target in it (atomic replace).
2. A *guardian*: a child forked before anything else, holding the read end of a pipe. The daemon
   writes a heartbeat byte each loop turn. On EOF (the daemon died, even by SIGKILL) the guardian
   thaws every target in the managed set and exits; when heartbeats stop for ``watchdog_s`` (the
   daemon hangs) it thaws them too. So no freeze outlives a live, working daemon by more than the
   watchdog bound.
3. A starting daemon thaws the persisted managed set before it does anything else.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterable

from ..errors import InvalidInput, VgpukitError
from ..host import Host
from ..inputs import load_json
from ..libvirt.connection import Session
from ..logs import logger
from ..stopping import readable
from .backends import backend_from_target

log = logger("vgpukit.qos")


def frozen_path(host: Host) -> os.PathLike[str]:
    return host.state_dir("qos", "frozen.json")


def save_managed(host: Host, targets: Iterable[str]) -> None:
    doc = {"schema": "vgpukit.qos-frozen/v1", "pid": os.getpid(), "targets": sorted(set(targets))}
    host.write_file(host.state_dir("qos", "frozen.json"), json.dumps(doc) + "\n", mode=0o600)


def load_managed(host: Host) -> list[str]:
    path = host.state_dir("qos", "frozen.json")
    text = host.read_doc(path, "QoS managed set", missing_ok=True)
    if not text:
        return []
    try:
        doc = load_json(text, host.display(path))
    except InvalidInput:
        return []
    targets = doc.get("targets") if isinstance(doc, dict) else None
    return [t for t in targets if isinstance(t, str)] if isinstance(targets, list) else []


def thaw_all(host: Host, targets: Iterable[str]) -> list[str]:
    """Thaw every target that still exists; returns those thawed. Never raises."""
    done = []
    libvirt = Session()  # one connection for every domain target, opened only if there is one
    try:
        for target in targets:
            backend = backend_from_target(host, target, libvirt)
            if backend is None:
                continue
            try:
                backend.thaw()
                done.append(target)
            except (VgpukitError, OSError) as exc:
                log.debug("thaw %s: %s", target, exc)
    finally:
        libvirt.close()
    return done


class Guardian:
    """The daemon's side of the guardian child."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid
        self.fd = fd
        self.last = 0.0

    @classmethod
    def start(cls, host: Host, watchdog_s: float, drop: tuple[int, ...] = ()) -> Guardian:
        """Fork the guardian; it closes its copies of ``drop`` (the daemon's lock: a guardian still thawing
        after a ``kill -9`` of the daemon held it, and the next daemon was refused)."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the guardian
            code = 0
            try:
                os.close(w)
                for fd in drop:
                    os.close(fd)
                _guard(host, r, watchdog_s)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(r)
        g = cls(pid, w)
        g.beat(force=True)
        return g

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= 0.1:
            self.last = now
            try:
                os.write(self.fd, b".")
            except OSError:
                pass

    def stop(self) -> None:
        """Orderly shutdown: closing the pipe makes the guardian thaw (a no-op by now) and exit."""
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _guard(host: Host, fd: int, watchdog_s: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # stay until the daemon is gone, then thaw
    try:
        os.setsid()  # out of the daemon's process group: ^C and group kills reach the daemon only
    except OSError:
        pass
    stale = False
    while True:
        ready = readable([fd], watchdog_s)
        if not ready:
            if not stale:
                log.error("qos guardian: no heartbeat for %.1f s, thawing every tenant", watchdog_s)
                thaw_all(host, load_managed(host))
                stale = True
            continue
        data = os.read(fd, 4096)
        if not data:
            thaw_all(host, load_managed(host))
            return
        stale = False
