"""Everything a command needs, wired in one place and built lazily (no globals)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InvalidInput
from ..host import Host
from ..inputs import check_text

if TYPE_CHECKING:
    from ..engine import Env
    from ..nvml import Nvml


class Wiring(Protocol):
    """What a command is wired to (:class:`vgpukit.wiring.Wiring`): given by whoever starts it, so
    this toolkit names no kernel, NVML backend or area."""

    def open_host(self, root: Path | None, sim_dir: Path | None, dry_run: bool, wait: float | None = None) -> Host: ...

    def open_nvml(self, sim_dir: Path | None) -> Nvml | None: ...

    def derived(self) -> tuple[Callable[[Env], list[Any]], ...]: ...

    def open_uevents(self, host: Host, sim_dir: Path | None) -> Any: ...


class App:
    """Per-invocation context: where the host is, how to print, whether to act. (A plain class: every
    command creates one, and a dataclass costs start-up time to define.)"""

    def __init__(
        self,
        root: Path | None = None,
        sim_dir: Path | None = None,
        json: bool = False,
        dry_run: bool = False,
        debug: bool = False,
        wait: float = 30.0,
        command: str = "",
        wiring: Wiring | None = None,
        verbose: bool = False,
    ) -> None:
        self.root = root
        self.sim_dir = sim_dir
        self.json = json
        self.dry_run = dry_run
        self.debug = debug
        self.verbose = verbose  # -v: every step of a change, not the summary
        self.wait = wait  # seconds a mutating command waits for the host lock (--wait / VGPUKIT_WAIT)
        self.command = command  # the command line, recorded in the host lock and the journal
        self.wiring = wiring  # None: this App only says where the host is (shell completion)
        self._env: Env | None = None
        self._host: Host | None = None
        self._nvml: Any = None
        self._nvml_loaded = False

    def __repr__(self) -> str:
        return f"App(root={self.root!r}, sim_dir={self.sim_dir!r}, json={self.json}, dry_run={self.dry_run})"

    @classmethod
    def from_env(cls, root: str | None, sim: str | None, **kw: Any) -> App:
        root = _given(root, "--root", "VGPUKIT_ROOT")
        sim = _given(sim, "--sim", "VGPUKIT_SIM")
        if root and sim:
            raise InvalidInput("--root and --sim exclude each other (--sim DIR already sets the root to DIR)")
        return cls(root=Path(root) if root else None, sim_dir=Path(sim) if sim else None, **kw)

    @property
    def is_sim(self) -> bool:
        return self.sim_dir is not None

    @property
    def host(self) -> Host:
        if self._host is None:
            self._host = self._wired().open_host(self.root, self.sim_dir, self.dry_run, self.wait)
        return self._host

    def _wired(self) -> Wiring:
        if self.wiring is None:
            raise RuntimeError("this App was made without its wiring (vgpukit.wiring.Wiring)")
        return self.wiring

    @property
    def env(self) -> Env:
        """What the change engine acts on: this command's host, NVML (opened on demand), lock settings."""
        if self._env is None:
            from ..engine import Env
            from .progress import progress_for

            derived = self._wired().derived()  # the files kept current after every change
            self._env = Env(self.host, lambda: self.nvml, command=self.command, wait=self.wait, derived=derived)
            self._env.progress = progress_for(self.json)
        return self._env

    @property
    def nvml(self) -> Nvml | None:
        """The NVML facade: simulated on a sim host, pynvml otherwise; None where no driver is loaded."""
        if not self._nvml_loaded:
            self._nvml = self._wired().open_nvml(self.sim_dir)
            self._nvml_loaded = True
        return self._nvml  # type: ignore[no-any-return]

    def close(self) -> None:
        """End of the command: release what was opened (NVML is shut down)."""
        if self._nvml is not None:
            self._nvml.close()
        self._nvml, self._nvml_loaded = None, False


def _given(option: str | None, name: str, env: str) -> str | None:
    """The option, else the environment variable; an empty value is refused, never taken as ``/``
    (a script with an unset variable must not act on the real host)."""
    if option is None:
        option = os.environ.get(env)
        name = env
    if option is None:
        return None
    if not option.strip():
        raise InvalidInput(f"{name} is empty: give a directory (unset it to act on the real host)")
    check_text(option, name, max_len=4096)
    return option
