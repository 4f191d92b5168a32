"""Atomic kernel reactions: an undo log of one control-file write.

The real kernel applies a write to ``sriov_numvfs`` (hundreds of VF functions), ``create`` or
``unbind`` as one step: no process death leaves half of it. The simulator plays a reaction as many
file operations, so each one first records what it is about to change in an *undo log*,
``.vgpukit-sim/inflight.jsonl``:

* line 1, written with the first record: which write is in flight (path, value);
* then, before every change to a path, one line with that path's state *before* the change
  (absent, a file with its content and mode, a symlink with its target, a directory), or for a
  file only appended to, its size (``kernel.jsonl``: the undo cuts it back, whatever its length).

A directory the reaction creates is logged once, as absent: what the reaction then puts inside it
needs no line of its own (undoing "absent" removes the directory with its contents), so creating a
device costs its files' writes, not a log line each; a reaction creating many such paths it knows
absent logs them in one ``write(2)`` (:meth:`Journal.absent`).

The reaction commits by deleting the log (after its changes to ``kernel.json`` are saved, which is
logged too).
Whoever opens the sim host next (:class:`~vgpukit.sim.kernel.SimKernel`) finds a leftover log and
puts every logged path back, newest first, which leaves the tree and ``kernel.json`` exactly as they
were before the interrupted write. Each undo step is an idempotent "ensure this path is X", so an
undo that is itself killed is simply run again. A reaction that raises is undone the same way at once.

Records are plain ``write(2)`` appends: they outlive the death of the process (the page cache keeps
them), which is what the simulator models. Power loss is out of scope (the simulated tree itself is
never fsync'd), so neither is the log.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .files import read_fd

LOG = "inflight.jsonl"
KINDS = ("absent", "file", "link", "dir", "size")


def _snapshot(path: str) -> dict[str, Any]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"kind": "absent"}
    if stat.S_ISLNK(st.st_mode):
        return {"kind": "link", "target": os.readlink(path)}
    if stat.S_ISDIR(st.st_mode):
        return {"kind": "dir"}
    mode = stat.S_IMODE(st.st_mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except PermissionError:  # a write-only attribute (create, remove, bind) when not root
        os.chmod(path, mode | 0o400)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        finally:
            os.chmod(path, mode)
    return {"kind": "file", "data": read_fd(fd), "mode": mode}


def _clear(path: str) -> None:
    """Remove whatever is at ``path``; a directory with what is inside it (it was absent when logged,
    so all of that came later; links are removed, never followed)."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    elif os.path.isdir(path):
        for top, dirs, files in os.walk(path, topdown=False):
            links = [d for d in dirs if os.path.islink(os.path.join(top, d))]
            for name in files + links:
                os.unlink(os.path.join(top, name))
            for name in dirs:
                if name not in links:
                    os.rmdir(os.path.join(top, name))
        os.rmdir(path)


def _truncate(path: str, size: int) -> None:
    """Cut the regular file at ``path`` back to ``size`` bytes (never through a link)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # absent, or a link planted there
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) and os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
    finally:
        os.close(fd)


def _restore(path: str, rec: dict[str, Any]) -> None:
    kind = rec["kind"]
    if kind == "size":
        if type(rec.get("size")) is int:
            _truncate(path, rec["size"])
    elif kind == "absent":
        _clear(path)
    elif kind == "dir":
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            os.unlink(path)
        os.makedirs(path, exist_ok=True)
    elif kind == "link":
        if os.path.lexists(path):
            _clear(path)
        os.symlink(rec["target"], path)
    else:
        if os.path.islink(path) or os.path.isdir(path):
            _clear(path)
        if os.path.exists(path):
            os.chmod(path, 0o644)
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(rec["data"])
        os.chmod(path, rec["mode"])


class Journal:
    """The undo log of the reaction in flight on the sim host rooted at ``root``."""

    def __init__(self, root: Path, meta: Path, what: dict[str, str]) -> None:
        self.root = str(root)
        self.path = meta / LOG
        self.what = what
        self.fd: int | None = None
        self.fresh: set[str] = set()  # directories this reaction created (logged as absent)
        self.logged: set[str] = set()  # paths whose state before the reaction is logged
        self.sealed = False  # the reaction made its last change unlogged (SimTree.store): none may follow

    def is_fresh(self, path: str) -> bool:
        """Whether ``path``'s state before the reaction is logged, or it lies in a directory this
        reaction created (its undo removes it whole): a change to it needs no line of its own."""
        if path in self.logged:
            return True
        if not self.fresh:
            return False
        d = os.path.dirname(path)
        while len(d) > len(self.root):
            if d in self.fresh:
                return True
            d = os.path.dirname(d)
        return False

    def created_dir(self, path: str) -> None:
        """``path`` was absent (logged) and is now a directory this reaction made."""
        self.fresh.add(path)

    def _append(self, lines: str) -> None:
        """Append record lines; the first append creates the log and puts the header before them."""
        if self.sealed:
            raise RuntimeError("simulated kernel: a change after the reaction's last, unlogged one")
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
            lines = json.dumps(self.what) + "\n" + lines
        os.write(self.fd, lines.encode("utf-8", "surrogateescape"))

    def before(self, path: str) -> dict[str, Any] | None:
        """Record ``path``'s current state; call before changing it. Returns what was recorded (None:
        nothing, ``path`` lies in a directory this reaction created)."""
        if self.is_fresh(path):
            return None
        rec = _snapshot(path)
        self._log_states([path], [rec])
        return rec

    def before_all(self, paths: list[str]) -> None:
        """:meth:`before` for each of ``paths``, in one append."""
        paths = [p for p in paths if not self.is_fresh(p)]
        self._log_states(paths, [_snapshot(p) for p in paths])

    def absent(self, paths: list[str]) -> None:
        """Record ``paths`` as absent, in one append: the caller knows none of them exists (it listed
        their directories under the simulator's lock) and creates them next."""
        paths = [p for p in paths if not self.is_fresh(p)]
        self._log_states(paths, [{"kind": "absent"}] * len(paths))

    def _log_states(self, paths: list[str], recs: list[dict[str, Any]]) -> None:
        """Log the states before the reaction of ``paths`` (one append); later changes need no line."""
        self._record(list(zip(paths, recs, strict=True)))
        self.logged.update(paths)

    def before_append(self, path: str) -> None:
        """Record ``path``'s length (or absence); call before appending to it."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self._record([(path, {"kind": "absent"})])
            return
        self._record([(path, {"kind": "size", "size": st.st_size} if stat.S_ISREG(st.st_mode) else _snapshot(path))])

    def _record(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        """Append one line per (real path, state), in one write; nothing when there are none."""
        if records:  # the tree hands in real paths inside the root; lines name them relative to it
            self._append("".join(json.dumps({**rec, "path": p[len(self.root) + 1 :]}) + "\n" for p, rec in records))

    def commit(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            os.unlink(self.path)

    def rollback(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
            undo(Path(self.root), self.path)


def undo(root: Path, log: Path) -> dict[str, Any] | None:
    """Put back every path ``log`` recorded, newest first, then delete the log. Returns its header."""
    if not log.exists():
        return None
    lines = log.read_bytes().decode("utf-8", "surrogateescape").split("\n")
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            break  # a torn last line: the change it announced never started
        if not isinstance(rec, dict) or (records and rec.get("kind") not in KINDS):
            break
        records.append(rec)
    header = records[0] if records else {}
    for rec in reversed(records[1:]):
        rel = str(rec.get("path", ""))
        target = os.path.normpath(os.path.join(root, rel))
        parent = os.path.realpath(os.path.dirname(target))
        if not (target.startswith(str(root) + os.sep) and (parent + os.sep).startswith(str(root) + os.sep)):
            continue  # never act outside the root, whatever the log or a planted link says
        _restore(target, rec)
    os.unlink(log)
    return header
