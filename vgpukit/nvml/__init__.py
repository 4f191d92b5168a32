"""The NVML facade: what vgpukit needs from NVIDIA's management library, behind one interface.

Two backends implement :class:`Nvml`: ``real`` (nvidia-ml-py, imported lazily) and ``sim`` (state
persisted in a simulated host's directory). :func:`open_nvml` picks one; it returns None on a host
without an NVIDIA driver, and everything that does not need NVML keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class NvmlGpu:
    index: int
    bdf: str  # canonical lower-case DDDD:BB:DD.F
    uuid: str  # GPU-...
    name: str
    mig_capable: bool
    mig_current: bool
    mig_pending: bool


class Nvml(Protocol):
    def gpus(self) -> list[NvmlGpu]: ...


def open_nvml(sim_dir: Path | None) -> Nvml | None:
    if sim_dir is not None:
        from .sim import SimNvml

        return SimNvml(sim_dir)
    from .real import RealNvml

    return RealNvml.try_open()
