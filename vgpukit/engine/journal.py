"""The intent journal: what must be put back, written durably before each change.

``<root>/run/vgpukit/journal`` holds one JSON line per inverse step, appended and ``fsync``'d
before the forward change starts; the first line names the command. A command that finishes
(applied, or rolled back) removes the file. A file that is still there when the next mutating
command takes the host lock belongs to a command that died: its inverses are replayed newest first
(see :func:`vgpukit.engine.executor.recover`). A torn last line (killed mid-write) is ignored: the
change it announced had not started.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInput, VgpukitError
from ..host import Change, Host
from ..inputs import load_json
from ..logs import logger

MAX_JOURNAL = 64 * 1024 * 1024


@dataclass
class Pending:
    """A journal left by a command that did not finish."""

    command: str
    pid: int | None
    started: float | None
    entries: list[dict[str, Any]] = field(default_factory=list)


class Journal:
    def __init__(self, host: Host, command: str) -> None:
        self.host = host
        self.path = host.state_dir("journal")
        self.shown = host.display(self.path)
        self.count = 0
        host.mkdir(self.path.parent)
        host.resolve(self.path.parent)  # refuse a run/vgpukit that leads outside the root
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        self.fd = host.through(Change("create", self.shown), lambda: os.open(self.path, flags, 0o600))
        head = {"schema": "vgpukit.journal/v1", "command": command, "pid": os.getpid(), "started": time.time()}
        try:
            self._append([head])
        except VgpukitError:  # a full or failing file system: leave no headless journal behind
            self.close(committed=False)
            raise
        host.sync_dir(self.path.parent)

    def _append(self, docs: list[dict[str, Any]]) -> None:
        data = memoryview("".join(json.dumps(d, separators=(",", ":"), default=str) + "\n" for d in docs).encode())

        def write() -> None:
            nonlocal data
            while data:
                data = data[os.write(self.fd, data) :]
            os.fsync(self.fd)

        self.host.through(Change("append", self.shown), write)

    def add(self, entry: dict[str, Any]) -> None:
        self.add_all([entry])

    def add_all(self, entries: list[dict[str, Any]]) -> None:
        """Journal ``entries`` (one line each) durably: one write, one fsync."""
        if entries:
            self._append(entries)
            self.count += len(entries)

    def close(self, committed: bool = True) -> None:
        """The command is over: nothing is left to put back. ``committed``: its change is made, so a
        journal that cannot be removed must not survive to undo it (emptied instead, or the error says
        so); otherwise (rolled back, or never started) a journal left behind only replays inverses that
        change nothing, and a failure to remove it is only logged."""
        try:
            self.host.remove(self.path)
        except VgpukitError as exc:
            if committed and not self._emptied():
                raise type(exc)(
                    f"{exc.message}; the change was made, but its journal is still there and the next"
                    " vgpukit command would undo it",
                    path=exc.path,
                    errno=exc.errno,
                    hint="once the file system is fixed, run 'vgpukit recover --discard' before anything else",
                ) from exc
            if not committed:
                logger("vgpukit.engine").warning("could not remove the journal: %s", exc)
        finally:
            os.close(self.fd)
        self.host.sync_dir(self.path.parent)

    def _emptied(self) -> bool:
        """Empty the journal in place (a committed change whose journal cannot be unlinked): True when done."""

        def empty() -> None:
            os.ftruncate(self.fd, 0)
            os.fsync(self.fd)

        try:
            self.host.through(Change("record", self.shown), empty)
        except VgpukitError:
            return False
        return True


def pending(host: Host) -> Pending | None:
    path = host.state_dir("journal")
    if not os.path.lexists(path):
        return None
    text = host.read_raw_opt(path) or ""  # an unreadable journal is an error, never "nothing to do"
    if not text.strip():  # emptied by a command whose change was made but whose journal could not be removed
        return None
    lines = text.split("\n")
    docs: list[dict[str, Any]] = []
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            doc = load_json(line, f"{host.display(path)} line {n + 1}", max_bytes=MAX_JOURNAL)
        except InvalidInput:  # a torn last line: the change it announced never started
            if n >= len(lines) - 2:
                break
            raise
        if isinstance(doc, dict):
            docs.append(doc)
    if not docs or docs[0].get("schema") != "vgpukit.journal/v1":
        return Pending("unknown command", None, None, docs)
    head = docs[0]
    pid = head.get("pid")
    return Pending(str(head.get("command", "")), pid if isinstance(pid, int) else None, head.get("started"), docs[1:])


def discard(host: Host) -> None:
    path = host.state_dir("journal")
    host.remove(path)
    host.sync_dir(path.parent)
