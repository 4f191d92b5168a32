"""Enforcement backends: how a tenant is frozen and thawed on the host.

* cgroup v2: ``cgroup.freeze`` (1/0), confirmed by ``frozen 1`` in ``cgroup.events``;
* cgroup v1: ``freezer.state`` (FROZEN/THAWED);
* a pid set: SIGSTOP/SIGCONT (no host files involved; works for real processes on a simulated host);
* a libvirt domain: suspend/resume through :mod:`vgpukit.libvirt.connection` (libvirt imported lazily).

Every backend also reports whether its tenant still exists and how much CPU time it has used (for
the sampling demand fallback). A vanished tenant raises :class:`~vgpukit.errors.NotFound`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Protocol

from .. import processes
from ..errors import InvalidInput, NotFound, Unsupported, VgpukitError
from ..host import Host
from ..libvirt.connection import Session
from .model import Tenant


class Backend(Protocol):
    target: str

    def freeze(self) -> None: ...

    def thaw(self) -> None: ...

    def alive(self) -> bool: ...

    def is_frozen(self) -> bool | None: ...

    def cpu_ns(self) -> int: ...

    def owns(self, pid: int) -> bool: ...


def process_cpu_ns(pid: int) -> int:
    """CPU time of a process through its POSIX CPU clock (no /proc read needed)."""
    clock = ((~pid) << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    try:
        return time.clock_gettime_ns(clock)
    except OSError as exc:
        raise NotFound(f"process {pid} is gone", value=pid) from exc


class PidBackend:
    def __init__(self, host: Host, pids: tuple[int, ...]) -> None:
        self.host = host
        self.pids = list(pids)
        self.target = "pids:" + ",".join(map(str, pids))

    def _signal(self, sig: int) -> None:
        for pid in list(self.pids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                self.pids.remove(pid)
        if not self.pids:
            raise NotFound(f"{self.target}: every process is gone")

    def freeze(self) -> None:
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def alive(self) -> bool:
        self.pids = [p for p in self.pids if processes.alive(self.host, p)]
        return bool(self.pids)

    def is_frozen(self) -> bool | None:
        states = []
        for pid in self.pids:
            now = processes.state(self.host, pid)
            if now is None:
                return None
            states.append(now in ("T", "t"))
        return all(states) if states else None

    def cpu_ns(self) -> int:
        total, seen = 0, 0
        for pid in self.pids:
            try:
                total += process_cpu_ns(pid)
                seen += 1
            except NotFound:
                continue
        if not seen:
            raise NotFound(f"{self.target}: every process is gone")
        return total

    def owns(self, pid: int) -> bool:
        return pid in self.pids


class _CgroupBase:
    def __init__(self, host: Host, path: Path, shown: str) -> None:
        self.host = host
        self.path = path
        self.target = f"cgroup:{shown}"

    def alive(self) -> bool:
        return self.host.is_dir(self.path)

    def procs(self) -> list[int]:
        text = self.host.read_opt(self.path / "cgroup.procs")
        if text is None:
            raise NotFound(f"{self.target}: cgroup is gone", path=self.host.display(self.path))
        return [int(x) for x in text.split()]

    def cpu_ns(self) -> int:
        stat = self.host.read_opt(self.path / "cpu.stat")
        if stat:
            for line in stat.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
        total = 0
        for pid in self.procs():
            try:
                total += process_cpu_ns(pid)
            except NotFound:
                continue
        return total

    def owns(self, pid: int) -> bool:
        try:
            return pid in self.procs()
        except NotFound:
            return False

    def _write(self, name: str, value: str) -> None:
        if not self.host.is_dir(self.path):
            raise NotFound(f"{self.target}: cgroup is gone", path=self.host.display(self.path))
        self.host.write(self.path / name, value)


class Cgroup2Backend(_CgroupBase):
    def freeze(self) -> None:
        self._write("cgroup.freeze", "1")

    def thaw(self) -> None:
        self._write("cgroup.freeze", "0")

    def is_frozen(self) -> bool | None:
        events = self.host.read_opt(self.path / "cgroup.events")
        if events is None:
            return None
        return "frozen 1" in events.splitlines()


class Cgroup1Backend(_CgroupBase):
    def freeze(self) -> None:
        self._write("freezer.state", "FROZEN")

    def thaw(self) -> None:
        self._write("freezer.state", "THAWED")

    def is_frozen(self) -> bool | None:
        state = self.host.read_opt(self.path / "freezer.state")
        return None if state is None else state == "FROZEN"


def cgroup_dir(host: Host, spec: str) -> Path:
    """The directory of a cgroup given as a host path (/sys/fs/cgroup/...) or relative to a mount."""
    base = host.sys("fs", "cgroup")
    if spec.startswith("/"):
        path = host.path(*[p for p in spec.split("/") if p])
        if not str(path).startswith(str(base) + "/"):
            raise InvalidInput(f"cgroup {spec!r} is not under {host.display(base)}", value=spec)
        if not host.is_dir(path):
            raise NotFound(f"cgroup {spec} does not exist", path=spec)
        return path
    rel = [p for p in spec.split("/") if p]
    candidates = []
    if host.exists(base / "cgroup.controllers"):
        candidates.append(host.sys("fs", "cgroup", *rel))
    candidates += [host.sys("fs", "cgroup", "unified", *rel), host.sys("fs", "cgroup", "freezer", *rel)]
    for path in candidates:
        if host.is_dir(path):
            return path
    raise NotFound(
        f"cgroup {spec} does not exist", path=spec, hint="give /sys/fs/cgroup/... or a path below a cgroup mount"
    )


def cgroup_backend(host: Host, spec: str) -> Cgroup1Backend | Cgroup2Backend:
    path = cgroup_dir(host, spec)
    if host.exists(path / "cgroup.freeze"):
        return Cgroup2Backend(host, path, spec)
    if host.exists(path / "freezer.state"):
        return Cgroup1Backend(host, path, spec)
    if host.exists(path / "cgroup.controllers"):
        raise Unsupported(f"cgroup {spec} cannot be frozen (the root cgroup has no cgroup.freeze)")
    raise Unsupported(f"cgroup {spec} has no freezer (neither cgroup.freeze nor freezer.state)")


class DomainBackend:
    """A libvirt domain, suspended and resumed through the libvirt facade (one shared session)."""

    def __init__(self, name: str, libvirt: Session) -> None:
        self.name = name
        self.target = f"domain:{name}"
        self.libvirt = libvirt

    def freeze(self) -> None:
        self.libvirt.get().suspend(self.name)

    def thaw(self) -> None:
        if self.is_frozen():
            self.libvirt.get().resume(self.name)

    def alive(self) -> bool:
        try:
            return self.libvirt.get().domain(self.name).active
        except NotFound:
            return False

    def is_frozen(self) -> bool | None:
        return self.libvirt.get().paused(self.name)

    def cpu_ns(self) -> int:
        return self.libvirt.get().cpu_time_ns(self.name)

    def owns(self, pid: int) -> bool:
        return False


def backend_for(host: Host, tenant: Tenant, libvirt: Session | None = None) -> Backend:
    """The backend of a tenant; raises NotFound when its cgroup, processes or domain are gone.

    Domain tenants use ``libvirt`` (the caller's shared session; a new one on the default URI if None).
    """
    if tenant.kind == "cgroup":
        assert tenant.cgroup is not None
        return cgroup_backend(host, tenant.cgroup)
    if tenant.kind == "pids":
        b = PidBackend(host, tenant.pids)
        if not b.alive():
            raise NotFound(f"tenant {tenant.name}: none of the processes {list(tenant.pids)} exist")
        return b
    assert tenant.domain is not None
    d = DomainBackend(tenant.domain, libvirt or Session())
    if not d.alive():
        raise NotFound(f"tenant {tenant.name}: libvirt domain {tenant.domain} is not running")
    return d


def backend_from_target(host: Host, target: str, libvirt: Session | None = None) -> Backend | None:
    """Rebuild a backend from its ``target`` string (persisted frozen set); None if it is gone."""
    kind, _, rest = target.partition(":")
    try:
        if kind == "cgroup":
            return cgroup_backend(host, rest)
        if kind == "pids":
            return PidBackend(host, tuple(int(p) for p in rest.split(",") if p))
        if kind == "domain":
            return DomainBackend(rest, libvirt or Session())
    except (VgpukitError, ValueError):
        return None
    return None
