"""The simulated kernel: the :class:`~vgpukit.host.KernelPort` of a simulated host.

A write to a control file is dispatched to the first *reaction* whose predicate matches the file's
real (symlink-resolved) path; reactions raise ``OSError(errno)`` exactly where the kernel would.
Writes no reaction claims get sysfs attribute semantics: ENOENT for a missing file, EACCES for a
read-only one, else the value is stored. Reactions live in the modules of :data:`REACTION_MODULES`
(each exports ``REACTIONS``), so a later feature adds its files' behaviour without touching this one.

A reaction is atomic, as in the kernel: its changes go through a :class:`~vgpukit.sim.journal.Journal`
(an undo log), committed when the reaction is done; a reaction that fails is undone at once, one cut
short by a killed process is undone by whoever opens the sim host next (:func:`recover`).

A write costs what it changes: the kernel state stays loaded for the life of the :class:`SimKernel`
(read again only when its files' stamp shows another process changed them), and a reaction that
changes it appends what it changed to ``kernel.jsonl``, folded into ``kernel.json`` once the lines
outweigh it.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from .crash import KillAt
from .journal import LOG, Journal, undo
from .state import CHANGES, KERNEL, STORAGE_FAULTS, KernelState, corrupt, locked, sim_meta_dir, stamp

if TYPE_CHECKING:
    from .tree import SimTree


REACTION_MODULES = (
    "vgpukit.sim.reactions_vgpu",  # first: it claims sriov_numvfs of vGPU-capable PFs before the PCI core
    "vgpukit.sim.reactions_pci",
    "vgpukit.sim.reactions_mdev",
    "vgpukit.sim.reactions_reset",
)


class Write:
    """One control-file write as a reaction sees it (a plain class: a command that only reads the
    simulated host creates none, and a dataclass would cost its start-up ~1 ms to define)."""

    __slots__ = ("data", "load", "loaded", "path", "tree")

    def __init__(self, tree: SimTree, load: Callable[[], KernelState], path: Path, data: str) -> None:
        self.tree = tree
        self.load = load  # the kernel state, loaded (or checked current) at its first use
        self.path = path  # real path of the file inside the sim root
        self.data = data  # as written (may end in a newline)
        self.loaded: KernelState | None = None

    @property
    def state(self) -> KernelState:
        if self.loaded is None:
            self.loaded = self.load()
        return self.loaded

    @property
    def value(self) -> str:
        return self.data.strip()

    @property
    def root(self) -> Path:
        return self.tree.root

    def rel(self) -> tuple[str, ...]:
        return self.path.relative_to(self.tree.root).parts


class Change(Protocol):
    """A change the host door is about to make, as its watch is told (``vgpukit.host.Change``)."""

    @property
    def action(self) -> str:  # write | write-file | remove | mkdir | create | append | record
        ...

    @property
    def path(self) -> str:  # as the host sees it
        ...


class Reaction(msgspec.Struct, frozen=True):
    name: str
    matches: Callable[[Write], bool]
    handle: Callable[[Write], None]


def fail(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def load_reactions() -> list[Reaction]:
    out: list[Reaction] = []
    for mod in REACTION_MODULES:
        out.extend(importlib.import_module(mod).REACTIONS)
    return out


CRASH_ENV = "VGPUKIT_SIM_CRASH_AT_WRITE"
CRASH_CHANGE_ENV = "VGPUKIT_SIM_CRASH_AT_CHANGE"
ENGINE_OWN = frozenset({"create", "append", "record"})  # the journal's and the host lock's own writes
COMPACT_BYTES = 64 * 1024  # kernel.jsonl is folded into kernel.json past this and kernel.json's own size


def recover(root: Path) -> str | None:
    """Undo a reaction a killed process left half-done; the caller holds :func:`locked`."""
    header = undo(root, sim_meta_dir(root) / LOG)
    if header is None:
        return None
    what = f"write {header.get('value', '?')!r} to {header.get('path', '?')}"
    from ..logs import logger

    logger(__name__).warning("simulated kernel: undid the interrupted %s", what)
    return what


class SimKernel:
    def __init__(self, root: Path, wait: float | None = None) -> None:
        from .lock import default_wait

        self.root = Path(os.path.realpath(root))
        self.wait = default_wait() if wait is None else wait  # for its lock, as for the host lock (--wait)
        self._reactions: list[Reaction] | None = None  # imported at the first write: a read needs none
        # Crash testing: the process kills itself just before its Nth control-file write, or before its
        # Nth change of any file through the host door (control files, records, specs, removals).
        self.writes = KillAt(os.environ.get(CRASH_ENV, ""))
        self.changes = KillAt(os.environ.get(CRASH_CHANGE_ENV, ""))
        self.state: KernelState | None = None  # as loaded or last saved by this process
        self.stamp: tuple[object, ...] = ()  # the state files' stamp when it was
        self.lock_fd: int | None = None
        self.real_dirs: set[str] = set()
        self.headers: dict[str, int] = {}  # header types of the functions this kernel created (SimTree)
        self.umask: int | None = None  # the process's, read at the first file a reaction creates
        self.char_nodes: bool | None = None  # whether device nodes are real ones (sim init --char-devices)
        if (sim_meta_dir(self.root) / LOG).exists():
            with locked(self.root, self.wait):
                recover(self.root)

    def changing(self, change: Change) -> None:
        """The host door's watch: counts the changes of this host, for ``VGPUKIT_SIM_CRASH_AT_CHANGE``
        (not the engine's own journal and lock writes, which come before the changes they protect), and
        plays the storage faults of this host (``vgpukit sim fault storage``: :mod:`vgpukit.sim.storage`)."""
        if change.action not in ENGINE_OWN:
            self.changes.tick()
        if change.action != "write" and (sim_meta_dir(self.root) / STORAGE_FAULTS).exists():  # each time: a
            from . import storage  # long-running daemon sees faults set after it started

            storage.check(storage.load(self.root), change.action, change.path, self.root)

    def write(self, path: Path, data: str) -> None:
        self.writes.tick()
        # one per write, sharing what the kernel's earlier writes found to be real directories (as a
        # command's Host does; forgotten when a reaction is undone)
        from .uevents import AnnouncingTree, publish  # a command that only reads loads none of the write machinery

        tree = AnnouncingTree(
            self.root,
            resolved=True,
            real_dirs=self.real_dirs,
            umask=self.umask,
            char_nodes=self.char_nodes,
            headers=self.headers,
        )
        real = Path(tree.inside(path, follow=False))
        with self._locked():
            if recover(self.root) is not None:
                self.real_dirs.clear()
                self.headers.clear()
            tree.journal = Journal(
                self.root, sim_meta_dir(self.root), {"path": os.path.relpath(real, self.root), "value": data}
            )
            journal = tree.journal
            w = Write(tree, self._current, real, data)
            try:
                self._react(w)
                if w.loaded is not None and w.loaded.changes:
                    self._save(w.loaded, journal)
            except BaseException:
                self.state = None  # it may hold what the failed reaction changed
                self.real_dirs.clear()  # and the undo removes the directories it made
                self.headers.clear()
                journal.rollback()
                raise
            finally:
                self.umask, self.char_nodes = tree.umask, tree.char_nodes  # learnt once per kernel
            journal.commit()
            publish(self.root, tree.uevents)  # what the write did, announced once it is done (docs/simulator.md)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """:func:`locked`, on a lock file opened once for the life of this kernel."""
        from . import lock

        if self.lock_fd is None:
            self.lock_fd = lock.open_lock(self.root)
        lock.take(self.lock_fd, self.root, self.wait)
        try:
            yield
        finally:
            lock.release(self.lock_fd)

    def _current(self) -> KernelState:
        """The kernel state: the one held, unless another process changed the files since."""
        now = stamp(self.root)
        if self.state is None or now != self.stamp:
            self.state = KernelState.load(self.root)
            self.stamp = now
        return self.state

    def _save(self, state: KernelState, journal: Journal) -> None:
        """Persist the reaction's noted changes: appended to kernel.jsonl, or everything to kernel.json
        when the lines would outweigh it (logged either way, so an interrupted save is undone too)."""
        meta = sim_meta_dir(self.root)
        lines = state.take_changes()
        base, log_now = self.stamp[0], self.stamp[1]
        base_size = base[1] if isinstance(base, tuple) else 0
        log_size = log_now[1] if isinstance(log_now, tuple) else 0
        if log_size + len(lines) > max(COMPACT_BYTES, base_size):
            journal.before(str(meta / KERNEL))
            journal.before(str(meta / CHANGES))
            state.save(self.root)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(meta / CHANGES)
        else:
            journal.before_append(str(meta / CHANGES))
            fd = os.open(meta / CHANGES, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, lines)
                st = os.fstat(fd)
            finally:
                os.close(fd)
            self.stamp = (base, (st.st_ino, st.st_size, st.st_mtime_ns))  # kernel.json is as it was
            return
        self.stamp = stamp(self.root)

    @property
    def reactions(self) -> list[Reaction]:
        if self._reactions is None:
            self._reactions = load_reactions()
        return self._reactions

    def _react(self, w: Write) -> None:
        for reaction in self.reactions:
            if reaction.matches(w):
                try:
                    reaction.handle(w)
                except (KeyError, TypeError, AttributeError, ValueError, IndexError, ArithmeticError) as exc:
                    # the simulator's own data is broken (kernel.json, a hand-edited tree): undone, one line
                    raise corrupt(self.root, sim_meta_dir(self.root) / KERNEL) from exc
                return
        try:
            mode = w.path.stat().st_mode
        except FileNotFoundError:
            raise fail(errno.ENOENT) from None
        if not mode & 0o222:
            raise fail(errno.EACCES)
        w.tree.store(w.path, w.value)
