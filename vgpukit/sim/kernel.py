"""The simulated kernel: the :class:`~vgpukit.host.KernelPort` of a simulated host.

A write to a control file is dispatched to the first *reaction* whose predicate matches the file's
real (symlink-resolved) path; reactions raise ``OSError(errno)`` exactly where the kernel would.
Writes no reaction claims get sysfs attribute semantics: ENOENT for a missing file, EACCES for a
read-only one, else the value is stored. Reactions live in the modules of :data:`REACTION_MODULES`
(each exports ``REACTIONS``), so a later feature adds its files' behaviour without touching this one.

A reaction is atomic, as in the kernel: its changes go through a :class:`~vgpukit.sim.journal.Journal`
(an undo log), committed when the reaction is done; a reaction that fails is undone at once, one cut
short by a killed process is undone by whoever opens the sim host next (:func:`recover`).
"""

from __future__ import annotations

import errno
import importlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .journal import LOG, Journal, undo
from .state import KernelState, locked, sim_meta_dir
from .tree import SimTree, is_writable

log = logging.getLogger(__name__)

REACTION_MODULES = (
    "vgpukit.sim.reactions_vgpu",  # first: it claims sriov_numvfs of vGPU-capable PFs before the PCI core
    "vgpukit.sim.reactions_pci",
    "vgpukit.sim.reactions_mdev",
)


@dataclass
class Write:
    """One control-file write as a reaction sees it."""

    tree: SimTree
    state: KernelState
    path: Path  # real path of the file inside the sim root
    data: str  # as written (may end in a newline)

    @property
    def value(self) -> str:
        return self.data.strip()

    @property
    def root(self) -> Path:
        return self.tree.root

    def rel(self) -> tuple[str, ...]:
        return self.path.relative_to(self.tree.root).parts


@dataclass(frozen=True)
class Reaction:
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


def recover(root: Path) -> str | None:
    """Undo a reaction a killed process left half-done; the caller holds :func:`locked`."""
    header = undo(root, sim_meta_dir(root) / LOG)
    if header is None:
        return None
    what = f"write {header.get('value', '?')!r} to {header.get('path', '?')}"
    log.warning("simulated kernel: undid the interrupted %s", what)
    return what


class SimKernel:
    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        self.reactions = load_reactions()
        # Crash testing: the process kills itself (SIGKILL) just before its Nth control-file write,
        # as a power cut or kill -9 between two writes would on a real host.
        crash = os.environ.get(CRASH_ENV, "")
        self.crash_at = int(crash) if crash.isascii() and crash.isdigit() else 0
        self.writes = 0
        if (sim_meta_dir(self.root) / LOG).exists():
            with locked(self.root):
                recover(self.root)

    def write(self, path: Path, data: str) -> None:
        self.writes += 1
        if self.crash_at and self.writes >= self.crash_at:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        tree = SimTree(self.root)  # one per write: it remembers resolved directories
        real = Path(tree.inside(path, follow=False))
        with locked(self.root):
            recover(self.root)
            state = KernelState.load(self.root)
            before = json.dumps(vars(state))
            tree.journal = Journal(
                self.root, sim_meta_dir(self.root), {"path": os.path.relpath(real, self.root), "value": data}
            )
            journal = tree.journal
            w = Write(tree, state, real, data)
            try:
                self._react(w)
                if json.dumps(vars(state)) != before:
                    journal.before(str(sim_meta_dir(self.root) / "kernel.json"))
                    state.save(self.root)
            except BaseException:
                journal.rollback()
                raise
            journal.commit()

    def _react(self, w: Write) -> None:
        for reaction in self.reactions:
            if reaction.matches(w):
                reaction.handle(w)
                return
        real = w.path
        if not real.exists():
            raise fail(errno.ENOENT)
        if not is_writable(real):
            raise fail(errno.EACCES)
        w.tree.set_attr(real, w.value)
