"""The NVML facade: what vgpukit needs from NVIDIA's management library, behind one interface.

Two backends implement :class:`Nvml`: ``real`` (nvidia-ml-py, imported lazily) and ``sim`` (state
persisted in a simulated host's directory, a faithful model of the driver). :func:`open_nvml` picks
one; it returns None on a host without an NVIDIA driver, and everything that does not need NVML keeps
working. GPUs are addressed by NVML index; GPU/compute instance ids are opaque driver ids.

Errors raised by either backend are :class:`vgpukit.nvml.errors.NvmlError` subclasses carrying the
NVML return code (``.code``), so callers branch on codes, never on messages.
"""

from __future__ import annotations

from pathlib import Path

from .model import CiProfile, ComputeInstance, GiProfile, GpuInstance, GpuLinks, NvLink, Nvml, NvmlGpu, NvmlProcess

__all__ = [
    "CiProfile",
    "ComputeInstance",
    "GiProfile",
    "GpuInstance",
    "GpuLinks",
    "NvLink",
    "Nvml",
    "NvmlGpu",
    "NvmlProcess",
    "open_nvml",
]


def open_nvml(sim_dir: Path | None) -> Nvml | None:
    if sim_dir is not None:
        from ..sim.nvml import SimNvml

        return SimNvml(sim_dir)
    from .real import RealNvml

    return RealNvml.try_open()
