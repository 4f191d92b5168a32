"""Everything a command needs, wired in one place and built lazily (no globals)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, NotFound
from ..host import Host
from ..inputs import check_text

if TYPE_CHECKING:
    from ..engine import Env
    from ..nvml import Nvml

SIM_MARKER = ".vgpukit-sim"


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
    ) -> None:
        self.root = root
        self.sim_dir = sim_dir
        self.json = json
        self.dry_run = dry_run
        self.debug = debug
        self.wait = wait  # seconds a mutating command waits for the host lock (--wait / VGPUKIT_WAIT)
        self.command = command  # the command line, recorded in the host lock and the journal
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
            if self.sim_dir is not None:
                from ..sim.kernel import SimKernel  # opening it completes or undoes a reaction cut short

                check_sim_dir(self.sim_dir)
                self._host = Host(self.sim_dir, kernel=SimKernel(self.sim_dir), dry_run=self.dry_run)
            else:
                if self.root is not None and not self.root.is_dir():
                    raise NotFound(f"--root {self.root}: no such directory", path=str(self.root))
                self._host = Host(self.root or Path("/"), dry_run=self.dry_run)
        return self._host

    @property
    def env(self) -> Env:
        """What the change engine acts on: this command's host, NVML (opened on demand), lock settings."""
        if self._env is None:
            from ..cdi.refresh import derived_steps as cdi_specs
            from ..engine import Env
            from .progress import progress_for

            # the composition: the derived files kept current after every change (the CDI specs)
            self._env = Env(self.host, lambda: self.nvml, command=self.command, wait=self.wait, derived=(cdi_specs,))
            self._env.progress = progress_for(self.json)
        return self._env

    @property
    def nvml(self) -> Nvml | None:
        """The NVML facade: simulated on a sim host, pynvml otherwise; None where no driver is loaded."""
        if not self._nvml_loaded:
            self._nvml = open_nvml(self.sim_dir)
            self._nvml_loaded = True
        return self._nvml  # type: ignore[no-any-return]

    def close(self) -> None:
        """End of the command: release what was opened (NVML is shut down)."""
        if self._nvml is not None:
            self._nvml.close()
        self._nvml, self._nvml_loaded = None, False


def open_nvml(sim_dir: Path | None) -> Nvml | None:
    """The composition's choice of NVML backend: the simulated driver on a simulated host, else pynvml."""
    if sim_dir is not None:
        from ..sim.nvml import SimNvml

        return SimNvml(sim_dir)
    from ..nvml.real import RealNvml

    return RealNvml.try_open()


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


def check_sim_dir(path: Path) -> None:
    if not (path / SIM_MARKER / "sim.json").is_file():
        raise NotFound(
            f"{path} is not a simulated host",
            path=str(path),
            hint=f"create one with: vgpukit sim init {path} --profile hgx-a100",
        )
