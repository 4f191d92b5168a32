"""What steps act on: the host door, and the NVML facade opened only when a step needs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..host import Host

if TYPE_CHECKING:
    from ..nvml import Nvml
    from .progress import Progress


@dataclass
class Env:
    host: Host
    nvml_factory: Callable[[], Nvml | None] = field(default=lambda: None, repr=False)
    command: str = ""  # what the lock and journal say is running (the command line)
    wait: float = 30.0  # seconds to wait for the host lock
    # Derived-file refreshers (:data:`vgpukit.engine.step.Refresher`: env -> the steps that bring files
    # describing the host's state, the CDI specs, in line with it), run after every change and recovery.
    # The front end's composition hands them over; the engine names no area.
    derived: tuple[Callable[[Env], list[Any]], ...] = ()
    _nvml: Nvml | None = field(default=None, repr=False)
    _nvml_loaded: bool = field(default=False, repr=False)
    locked: int = field(default=0, repr=False)  # depth of held host-lock sessions
    recovering: bool = field(default=False, repr=False)  # replaying an interrupted command's journal
    # Connections a command already has open (e.g. "libvirt:<uri>"), for its steps to use.
    handles: dict[str, object] = field(default_factory=dict, repr=False)
    # Told about lock waits and each step as it runs (a front end's progress line); None: silent.
    progress: Progress | None = field(default=None, repr=False)

    @property
    def nvml(self) -> Nvml | None:
        if not self._nvml_loaded:
            self._nvml = self.nvml_factory()
            self._nvml_loaded = True
        return self._nvml
