"""The storage-fault matrix: every mutating command, each file system it writes, each fault.

A *case* is a mutating command on a simulated host after its set-up (what the command needs there: VFs
to bind, an instance to remove...), with the host paths it writes besides the host lock and the
journal. A *fault* makes the file system holding one of those paths full (ENOSPC), over quota
(EDQUOT), read-only (EROFS) or failing (EIO), by one of two means:

* ``knob``: the simulated host's own fact (``vgpukit sim fault storage DIR ERROR``,
  :mod:`vgpukit.sim.storage`), played by the host door's watch; any of the four errnos, on any path;
* ``mount``: a real file system mounted there (root only): a small tmpfs filled to the last byte
  (ENOSPC), or a read-only bind mount of the directory onto itself (EROFS).

Each run checks the promise of docs/engine.md ("Storage faults"): exit 1 with one line naming the file
and what to free or fix (or exit 0 where the command only removes files there and the file system
still lets it), the host exactly as before, and the same command succeeding once the fault is gone.
``python -m tests.engine.storage_matrix [--mount]`` prints the (path x fault x command) table.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import invoke
from tests.doors.harness import host_state
from vgpukit.sim.build import init_sim

VF = "0000:05:00.2"
T4 = "0000:3b:00.0"
UUID = "11111111-2222-3333-4444-555555555555"
LOCK, JOURNAL = "/run/vgpukit/lock", "/run/vgpukit/journal"
ERRNOS = ("ENOSPC", "EDQUOT", "EROFS", "EIO")
MOUNT_ERRNOS = ("ENOSPC", "EROFS")
FILL = ".storage-matrix-fill"  # the file that fills a real tmpfs (not the host's)

HOST_YAML = """version: vgpukit.host/v1
configs:
  a:
    sriov:
      - device: nic1
        vfs: 2
        driver: vfio-pci
    qos:
      gpus:
        gpu0:
          policy: fixed-share
          tenants:
            web: {share: 70, cgroup: /sys/fs/cgroup/machine.slice/web}
"""
MIG_YAML = """version: v1
mig-configs:
  half:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
"""
NODE_XML = """<node>
  <domain type='kvm'><name>vm1</name><memory unit='MiB'>1024</memory>
    <os><type arch='x86_64' machine='q35'>hvm</type></os></domain>
  <domain type='kvm'><name>other</name><memory unit='MiB'>1024</memory>
    <os><type arch='x86_64' machine='q35'>hvm</type></os>
    <devices><hostdev mode='subsystem' type='pci' managed='yes'><source>
      <address domain='0x0000' bus='0x05' slot='0x00' function='0x3'/></source></hostdev></devices>
  </domain>
</node>
"""


@dataclass(frozen=True)
class Case:
    name: str
    profile: str
    argv: tuple[str, ...]
    writes: tuple[str, ...] = ()  # host paths it writes besides the lock and the journal
    setup: tuple[tuple[str, ...], ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # the set-up's environment (a crash to recover from)


SHIM_DEFINE = ("mdev", "--mdevctl", "define", "-p", T4, "-t", "nvidia-222", "-u", UUID)
ATTACH = ("attach", "vm1", VF, "--config", "--connect", "test://{work}/node.xml")
DETACH = ("detach", "other", "0000:05:00.3", "--config", "--connect", "test://{work}/node.xml")
ENABLE = ("sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci")
VFS = ("sriov", "enable", "nic0", "--vfs", "2")
CREATE = ("mdev", "create", T4, "nvidia-222", "--uuid", UUID)
DEFINE = ("mdev", "define", "-p", T4, "-t", "nvidia-222", "-u", UUID)
PARTITION = ("partition", "gpu0", "--mig", "3g.20gb")
BIND_DIR, MDEVCTL, CDI, VGPUKIT_ETC = "/run/vgpukit/bind", "/etc/mdevctl.d", "/etc/cdi", "/etc/vgpukit"

CASES = (
    Case("sriov enable", "hgx-a100", ENABLE, (BIND_DIR,)),
    Case("sriov enable (CDI on)", "hgx-a100", ENABLE, (BIND_DIR, CDI), (("cdi", "enable"),)),
    Case("sriov disable", "hgx-a100", ("sriov", "disable", "nic0"), (BIND_DIR,), (ENABLE,)),
    Case("bind", "hgx-a100", ("bind", VF, "--driver", "vfio-pci"), (BIND_DIR,), (VFS,)),
    Case("unbind", "hgx-a100", ("unbind", VF), (BIND_DIR,), (VFS,)),
    Case("partition", "hgx-a100", PARTITION),
    Case("partition (CDI on)", "hgx-a100", PARTITION, (CDI,), (("cdi", "enable"),)),
    Case("mig apply", "hgx-a100", ("mig", "apply", "-f", "{work}/mig.yaml", "-c", "half")),
    Case("mig destroy", "hgx-a100", ("mig", "destroy", "gpu0", "--all"), (), (PARTITION,)),
    Case("mig disable", "hgx-a100", ("mig", "disable", "gpu0"), (), (PARTITION, ("mig", "destroy", "gpu0", "--all"))),
    Case("mdev create", "t4-mdev", CREATE),
    Case("mdev create --define", "t4-mdev", (*CREATE, "--define"), (MDEVCTL,)),
    Case("mdev remove", "t4-mdev", ("mdev", "remove", UUID), (), (CREATE,)),
    Case("mdev define", "t4-mdev", ("mdev", "define", UUID), (MDEVCTL,), (CREATE,)),
    Case("mdev undefine", "t4-mdev", ("mdev", "undefine", UUID), (MDEVCTL,), (DEFINE,)),
    Case("mdev start", "t4-mdev", ("mdev", "start", UUID), (), (DEFINE,)),
    Case("mdev stop", "t4-mdev", ("mdev", "stop", UUID), (), (CREATE,)),
    Case("mdev modify", "t4-mdev", ("mdev", "modify", UUID, "--auto"), (MDEVCTL,), (DEFINE,)),
    Case(
        "mdevctl define (shim)",
        "t4-mdev",
        ("mdev", "--mdevctl", "define", "-p", T4, "-t", "nvidia-222", "-u", UUID),
        (MDEVCTL,),
    ),
    Case("vgpu create", "t4-mdev", ("vgpu", "create", "gpu0", "--type", "T4-1B")),
    Case("vgpu remove", "t4-mdev", ("vgpu", "remove", UUID), (), (CREATE,)),
    Case("cdi generate", "hgx-a100", ("cdi", "generate"), (CDI,)),
    Case("cdi enable", "hgx-a100", ("cdi", "enable"), (CDI, VGPUKIT_ETC)),
    Case("cdi disable", "hgx-a100", ("cdi", "disable"), (CDI, VGPUKIT_ETC), (("cdi", "enable"),)),
    Case("units install", "hgx-a100", ("units", "install"), ("/etc/systemd/system", "/etc/udev/rules.d")),
    Case("k8s labels --write", "hgx-a100", ("k8s", "labels", "--write"), ("/etc/kubernetes",)),
    Case("apply (sriov, qos)", "hgx-a100", ("apply", "-f", "{work}/host.yaml", "-c", "a"), (BIND_DIR, VGPUKIT_ETC)),
    Case(
        "attach --config",
        "hgx-a100",
        ("attach", "vm1", VF, "--config", "--connect", "test://{work}/node.xml"),
        (),
        (ENABLE,),
    ),
    Case("detach --config", "hgx-a100", DETACH, (), (ENABLE,)),
    Case("recover", "hgx-a100", ("recover",), (BIND_DIR,), (ENABLE,), {"VGPUKIT_SIM_CRASH_AT_CHANGE": "5"}),
)


def fault_paths(case: Case) -> tuple[str, ...]:
    return (LOCK, JOURNAL, *case.writes)


def mount_paths(case: Case) -> tuple[str, ...]:
    """Where a real file system is mounted: the lock and the journal share /run/vgpukit."""
    return ("/run/vgpukit", *case.writes)


@dataclass
class Outcome:
    code: int
    line: str  # what it said on stderr
    unchanged: bool  # the host exactly as before
    journal_left: bool
    again: int = 0  # the exit code of the same command once the fault is gone (when it failed)

    @property
    def cell(self) -> str:
        if self.code == 0:
            return "ok (takes no space)"
        state = "unchanged" if self.unchanged else ("put back, journal kept" if self.journal_left else "CHANGED")
        return f"exit {self.code}, {state}; again: " + ("ok" if self.again == 0 else f"exit {self.again}")


_READY: dict[str, Path] = {}


def prepared(case: Case, base: Path) -> Path:
    """The simulated host of ``case`` after its set-up (built once per run, copied for each fault)."""
    key = case.name
    if key not in _READY or not _READY[key].exists():
        where = base / "ready" / key.replace(" ", "_").replace("/", "_")
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        work = where / "work"
        work.mkdir()
        (work / "host.yaml").write_text(HOST_YAML)
        (work / "mig.yaml").write_text(MIG_YAML)
        (work / "node.xml").write_text(NODE_XML)
        sim = where / "host"
        init_sim(sim, case.profile)
        for argv in case.setup:
            if case.env:  # a command killed part-way: its journal is what recover works from
                run = subprocess.run([sys.executable, "-m", "vgpukit", "--sim", str(sim), *argv],
                                     env={**os.environ, **case.env}, capture_output=True, check=False)  # fmt: skip
                assert run.returncode < 0, run.stderr
            else:
                r = invoke(sim, *argv)
                assert r.exit_code == 0, (case.name, argv, r.stderr)
        _READY[key] = where
    return _READY[key]


def argv_of(case: Case, work: Path) -> list[str]:
    return [a.replace("{work}", str(work)) for a in case.argv]


def copy_of(case: Case, base: Path, name: str) -> tuple[Path, Path]:
    ready = prepared(case, base)
    dst = base / "runs" / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(ready, dst, symlinks=True)
    return dst / "host", dst / "work"


def state(sim: Path) -> dict[str, object]:
    return {k: v for k, v in host_state(sim).items() if not k.endswith(FILL)}


@contextmanager
def knob(sim: Path, path: str, error: str) -> Iterator[None]:
    from vgpukit.sim import storage

    storage.set_fault(sim, path, error)
    try:
        yield
    finally:
        storage.set_fault(sim, path, None)


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


@contextmanager
def mounted(sim: Path, path: str, error: str) -> Iterator[None]:
    """A real file system at ``path`` of the host ``sim`` with the fault, for the ``with`` block; then
    its content back where it was, the fault gone."""
    where = sim / path.lstrip("/")
    where.mkdir(parents=True, exist_ok=True)
    if error == "EROFS":
        _sh("mount", "--bind", str(where), str(where))
        try:
            _sh("mount", "-o", "remount,ro,bind", str(where))
            yield
        finally:
            _sh("umount", str(where))
        return
    keep = sim.parent / "kept"  # outside the host
    shutil.copytree(where, keep, symlinks=True)
    _sh("mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(where))
    try:
        shutil.copytree(keep, where, symlinks=True, dirs_exist_ok=True)
        fd = os.open(where / FILL, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as exc:  # full to the last block
            assert exc.errno == errno.ENOSPC, exc
        finally:
            os.close(fd)
        yield
        # what the command left there (nothing, when it kept its promise) goes back under the mount
        shutil.rmtree(keep)
        shutil.copytree(where, keep, symlinks=True, ignore=shutil.ignore_patterns(FILL))
    finally:
        _sh("umount", str(where))
    shutil.rmtree(where)
    keep.rename(where)


def row(case: Case, path: str, means: str, base: Path) -> dict[str, Outcome]:
    """``case`` under each fault of ``means`` (``knob`` or ``mount``) at ``path``: the outcome per errno.

    Faults follow each other on one copy of the prepared host while each leaves it as it was (a
    command that succeeds, or ``recover``, which puts back what it can, gets a fresh copy for the next);
    the command then runs once more without a fault: what "again" says for every errno that failed on
    that same, unchanged host."""
    errors = ERRNOS if means == "knob" else MOUNT_ERRNOS
    inject = knob if means == "knob" else mounted
    out: dict[str, Outcome] = {}
    sim: Path | None = None
    waiting: list[Outcome] = []  # failures on the current copy, waiting for the run without a fault
    for n, error in enumerate(errors):
        if sim is None:
            sim, work = copy_of(case, base, f"{means}-{n}")
            argv, before = argv_of(case, work), state(sim)
        with inject(sim, path, error):
            r = invoke(sim, *argv)
            after = state(sim)
        out[error] = Outcome(r.exit_code, r.stderr.strip(), after == before, (sim / JOURNAL[1:]).exists())
        if r.exit_code:
            waiting.append(out[error])
        if r.exit_code == 0 or after != before or n == len(errors) - 1:
            if waiting:
                again = invoke(sim, *argv).exit_code
                for o in waiting:
                    o.again = again
            waiting, sim = [], None
    return out


def table(means: str, base: Path) -> str:
    errors = ERRNOS if means == "knob" else MOUNT_ERRNOS
    rows = ["| command | path | " + " | ".join(errors) + " |", "|---|---|" + "---|" * len(errors)]
    for case in CASES:
        for path in fault_paths(case) if means == "knob" else mount_paths(case):
            cells = row(case, path, means, base)
            rows.append(f"| {case.name} | {path} | " + " | ".join(cells[e].cell for e in errors) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    means = "mount" if "--mount" in sys.argv else "knob"
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"storage-matrix-{os.getpid()}"
    try:
        print(table(means, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
