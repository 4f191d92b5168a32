"""What every fuzz case checks, and the simulated host it runs against.

A case runs ``vgpukit.cli.main.main(argv)`` in-process on a copy of one pristine simulated host
(``fuzz-host.yaml``: an A100 with MIG, a T4 with legacy vGPU mdev, a ConnectX-6 with SR-IOV, the
mtty parent) and asserts the input contract of docs/safety.md:

* the exit code is 0, 2, 3, 4 or 5 (1 only where a command documents it: ``mig assert`` reports a
  difference, ``mdev start`` reports a definition that failed to start, ``attach``/``detach`` find
  no libvirtd);
* on failure stderr is at most one line, and every stderr line starts with ``vgpukit: ``;
* never ``internal error``, never a traceback;
* the host tree is unchanged when the exit code is not 0 (paths, symlink targets, file contents).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from vgpukit.cli.main import main

PROFILE = Path(__file__).with_name("fuzz-host.yaml")
OK_CODES = {0, 2, 3, 4, 5}
# lock files are created by readers too (flock needs a file) and carry no state; kernel.json and the
# changes logged since (kernel.jsonl) are the simulated kernel's memory (its IOMMU group counter moves
# on like a real kernel's, even when an instance is created and removed again)
VOLATILE = {".vgpukit-sim/lock", ".vgpukit-sim/nvml.lock", "run/vgpukit/lock", ".vgpukit-sim/kernel.json"}
VOLATILE |= {".vgpukit-sim/kernel.jsonl"}
# the simulated kernel's uevent feed: a failed command that made and rolled back a device announced both, as
# the kernel does (docs/simulator.md); the host itself is as before
VOLATILE |= {".vgpukit-sim/uevents.jsonl"}

Snapshot = dict[str, object]


def snapshot(root: Path) -> Snapshot:
    """Every file (content hash) and symlink (target) under ``root``."""
    out: Snapshot = {}
    base = str(root)
    for d, dirs, files in os.walk(base):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = p[len(base) + 1 :]
            if rel in VOLATILE:
                continue
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif name in files:
                with open(p, "rb") as fh:
                    out[rel] = hashlib.blake2b(fh.read(), digest_size=8).digest()
    return out  # directories show through their contents (the kernel keeps empty bus dirs around)


def diff(a: Snapshot, b: Snapshot) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))[:10]


@dataclass
class Outcome:
    argv: list[str]
    rc: int
    out: str
    err: str


@dataclass
class FuzzHost:
    """A pristine simulated host and a working copy restored after any case that changed it."""

    pristine: Path
    work: Path
    scratch: Path  # cwd of every case: relative paths in hostile arguments land here
    before: Snapshot = field(default_factory=dict)  # what a failed case must leave
    pristine_snapshot: Snapshot = field(default_factory=dict)
    cases: dict[str, int] = field(default_factory=dict)

    @classmethod
    def create(cls, base: Path) -> FuzzHost:
        pristine = base / "pristine"
        rc = main(["sim", "init", str(pristine), "--profile", str(PROFILE)])
        assert rc == 0
        host = cls(pristine, base / "work", base / "scratch" / "a" / "b" / "c")
        host.scratch.mkdir(parents=True)
        host.before = host.pristine_snapshot = snapshot(pristine)
        host.restore()
        return host

    def restore(self) -> None:
        if self.work.exists():
            shutil.rmtree(self.work)
        shutil.copytree(self.pristine, self.work, symlinks=True)

    def run(self, args: list[str], *, group: str, allow_1: bool = False, sim: bool = True) -> Outcome:
        """One case: run, check the contract, restore the host if the case changed it."""
        argv = (["--sim", str(self.work)] if sim else []) + args
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.scratch)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(argv)
        finally:
            os.chdir(cwd)
        self.cases[group] = self.cases.get(group, 0) + 1
        res = Outcome(argv, rc, out.getvalue(), err.getvalue())
        after = snapshot(self.work)
        changed = after != self.before
        try:
            check(res, allow_1=allow_1)
            if rc != 0:
                assert not changed, f"{argv!r} failed with {rc} but changed the host: {diff(self.before, after)}"
        finally:
            if changed:
                self.restore()
        return res


def check(res: Outcome, allow_1: bool = False) -> None:
    ok = OK_CODES | ({1} if allow_1 else set())
    text = f"{res.argv!r} -> {res.rc}\nstderr: {res.err!r}"
    assert res.rc in ok, text
    assert "internal error" not in res.err and "Traceback" not in res.err + res.out, text
    lines = res.err.splitlines()
    assert all(line.startswith("vgpukit: ") for line in lines), text
    if res.rc != 0:  # one error line; warnings (e.g. a rollback step that failed too) may precede it
        assert len([line for line in lines if not line.startswith("vgpukit: warning: ")]) <= 1, text
