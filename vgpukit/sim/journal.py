"""Atomic kernel reactions: an undo log of one control-file write.

The real kernel applies a write to ``sriov_numvfs`` (hundreds of VF functions), ``create`` or
``unbind`` as one step: no process death leaves half of it. The simulator plays a reaction as many
file operations, so each one first records what it is about to change in an *undo log*,
``.vgpukit-sim/inflight.jsonl``:

* line 1, written and fsync'd before the first change: which write is in flight (path, value);
* then, before every change to a path, one line with that path's state *before* the change
  (absent, a file with its content and mode, a symlink with its target, a directory).

The reaction commits by deleting the log (after ``kernel.json`` is saved, which is logged too).
Whoever opens the sim host next (:class:`~vgpukit.sim.kernel.SimKernel`) finds a leftover log and
puts every logged path back, newest first, which leaves the tree and ``kernel.json`` exactly as they
were before the interrupted write. Each undo step is an idempotent "ensure this path is X", so an
undo that is itself killed is simply run again. A reaction that raises is undone the same way at once.

Records are plain ``write(2)`` appends: they outlive the death of the process (the page cache keeps
them), which is what the simulator models; only the header is fsync'd. Power loss is out of scope
(the simulated tree itself is never fsync'd).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

LOG = "inflight.jsonl"
KINDS = ("absent", "file", "link", "dir")


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
    hidden = not os.access(path, os.R_OK)  # a write-only attribute (create, remove, bind) when not root
    if hidden:
        os.chmod(path, mode | 0o400)
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            return {"kind": "file", "data": fh.read(), "mode": mode}
    finally:
        if hidden:
            os.chmod(path, mode)


def _clear(path: str) -> None:
    """Remove whatever is at ``path`` (a directory only when empty: newer entries were undone first)."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    elif os.path.isdir(path):
        os.rmdir(path)


def _restore(path: str, rec: dict[str, Any]) -> None:
    kind = rec["kind"]
    if kind == "absent":
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

    def before(self, path: str) -> None:
        """Record ``path``'s current state; call before changing it."""
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            os.write(self.fd, (json.dumps(self.what) + "\n").encode())
            os.fsync(self.fd)
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        rec = _snapshot(path)
        rec["path"] = path[len(self.root) + 1 :]  # the tree hands in real paths inside the root
        os.write(self.fd, (json.dumps(rec) + "\n").encode("utf-8", "surrogateescape"))

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
