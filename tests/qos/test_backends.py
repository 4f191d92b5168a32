"""Enforcement on real processes and real cgroups (v2 and v1 freezer) of this machine."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from vgpukit.errors import InvalidInput, NotFound, Unsupported
from vgpukit.host import Host
from vgpukit.qos.backends import (
    Cgroup1Backend,
    Cgroup2Backend,
    DomainBackend,
    PidBackend,
    backend_for,
    backend_from_target,
    cgroup_backend,
    process_cpu_ns,
)
from vgpukit.qos.model import Tenant

from .conftest import proc_state, wait_for

pytestmark = pytest.mark.realproc
REAL = Host(Path("/"))
V2 = Path("/sys/fs/cgroup/unified")
V1 = Path("/sys/fs/cgroup/freezer")


def progress(pid: int, dt: float = 0.1) -> int:
    a = process_cpu_ns(pid)
    time.sleep(dt)
    return process_cpu_ns(pid) - a


def test_pid_backend_stops_and_continues(spawn) -> None:  # type: ignore[no-untyped-def]
    p = spawn()
    b = PidBackend(REAL, (p.pid,))
    b.freeze()
    assert wait_for(lambda: proc_state(p.pid) == "T")
    assert b.is_frozen() is True
    assert progress(p.pid) == 0
    b.thaw()
    assert wait_for(lambda: proc_state(p.pid) != "T")
    assert progress(p.pid) > 0
    assert b.cpu_ns() > 0 and b.owns(p.pid) and not b.owns(1)


def test_pid_backend_vanished(spawn) -> None:  # type: ignore[no-untyped-def]
    p = spawn()
    q = spawn()
    b = PidBackend(REAL, (p.pid, q.pid))
    p.kill()
    p.wait()
    b.freeze()  # the survivor is still stopped
    assert wait_for(lambda: proc_state(q.pid) in "Tt") and b.pids == [q.pid]
    q.kill()
    q.wait()
    with pytest.raises(NotFound):
        b.thaw()
    assert not b.alive()
    with pytest.raises(NotFound):
        backend_for(REAL, Tenant("x", "offline", 10, "pids", pids=(q.pid,)))


def _remove_cgroup(path: Path, thaw_file: str, thawed: str) -> None:
    """Thaw the test cgroup, kill what is left in it, and remove it."""
    (path / thaw_file).write_text(thawed)
    for pid in (path / "cgroup.procs").read_text().split():
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass
    wait_for(lambda: not (path / "cgroup.procs").read_text().strip())
    path.rmdir()


@pytest.fixture
def cg2() -> Iterator[Path]:
    if not (V2 / "cgroup.controllers").exists():
        pytest.skip("no cgroup v2 mount at /sys/fs/cgroup/unified")
    path = V2 / f"vgpukit-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    _remove_cgroup(path, "cgroup.freeze", "0")


@pytest.fixture
def cg1() -> Iterator[Path]:
    if not (V1 / "freezer.state").exists() and not V1.is_dir():
        pytest.skip("no cgroup v1 freezer")
    path = V1 / f"vgpukit-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    _remove_cgroup(path, "freezer.state", "THAWED")


def test_cgroup_v2_freeze_thaw(spawn, cg2: Path) -> None:  # type: ignore[no-untyped-def]
    p = spawn()
    (cg2 / "cgroup.procs").write_text(str(p.pid))
    b = cgroup_backend(REAL, str(cg2))
    assert isinstance(b, Cgroup2Backend)
    assert cgroup_backend(REAL, cg2.name).path == cg2  # relative to the mount works too
    b.freeze()
    assert wait_for(lambda: b.is_frozen() is True)
    assert progress(p.pid) == 0
    b.thaw()
    assert wait_for(lambda: b.is_frozen() is False)
    assert progress(p.pid) > 0
    assert b.owns(p.pid) and b.cpu_ns() > 0


def test_cgroup_v1_freeze_thaw(spawn, cg1: Path) -> None:  # type: ignore[no-untyped-def]
    p = spawn()
    (cg1 / "cgroup.procs").write_text(str(p.pid))
    b = cgroup_backend(REAL, str(cg1))
    assert isinstance(b, Cgroup1Backend)
    b.freeze()
    assert wait_for(lambda: b.is_frozen() is True)
    assert progress(p.pid) == 0
    b.thaw()
    assert wait_for(lambda: b.is_frozen() is False)
    assert progress(p.pid) > 0
    assert b.cpu_ns() > 0  # summed over cgroup.procs (v1 has no cpu.stat here)


def test_cgroup_vanished_and_bad_paths(tmp_path: Path) -> None:
    host = Host(tmp_path)
    cg = host.sys("fs", "cgroup", "unified", "t1")
    cg.mkdir(parents=True)
    (cg / "cgroup.freeze").write_text("0")
    (cg / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    b = cgroup_backend(host, "/sys/fs/cgroup/unified/t1")
    b.freeze()
    assert (cg / "cgroup.freeze").read_text() == "1"
    for f in cg.iterdir():
        f.unlink()
    cg.rmdir()
    with pytest.raises(NotFound):
        b.thaw()
    assert not b.alive()
    assert backend_from_target(host, b.target) is None
    with pytest.raises(NotFound):
        cgroup_backend(host, "nope")
    with pytest.raises(InvalidInput):
        cgroup_backend(host, "/etc/passwd")
    host.sys("fs", "cgroup", "unified", "plain").mkdir(parents=True)
    with pytest.raises(Unsupported):
        cgroup_backend(host, "plain")


def test_domain_backend_through_the_libvirt_facade() -> None:
    """libvirt's in-process test driver: domain 'test' runs; suspend/resume are real state changes there."""
    pytest.importorskip("libvirt")
    from vgpukit.libvirt.connection import Session, connect

    session = Session(lv=connect("test:///default"))
    lv = session.get()
    try:
        b = backend_for(Host(Path("/")), Tenant("v", "offline", 10, "domain", domain="test"), session)
        assert isinstance(b, DomainBackend) and b.alive() and b.is_frozen() is False
        b.freeze()
        assert b.is_frozen() is True and lv.paused("test")
        b.thaw()
        b.thaw()  # resuming a running domain is not attempted (the driver would refuse it)
        assert b.is_frozen() is False and b.cpu_ns() > 0
        again = backend_from_target(Host(Path("/")), b.target, session)
        assert isinstance(again, DomainBackend) and again.libvirt.get() is lv  # one connection, shared
        with pytest.raises(NotFound):
            backend_for(Host(Path("/")), Tenant("v", "offline", 10, "domain", domain="vm2"), session)
    finally:
        session.close()
