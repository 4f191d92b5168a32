"""The NVML facade: what vgpukit needs from NVIDIA's management library, behind one interface.

Two backends implement :class:`Nvml`: :mod:`vgpukit.nvml.real` (nvidia-ml-py, imported lazily) and
the simulator's :mod:`vgpukit.sim.nvml` (state persisted in a simulated host's directory, a faithful
model of the driver). The front end's composition (``vgpukit.clikit.context``) picks one; the facade never
imports the simulator. On a host without an NVIDIA driver there is none, and everything that does not
need NVML keeps working. GPUs are addressed by NVML index; GPU/compute instance ids are opaque driver ids.

Errors raised by either backend are :class:`vgpukit.nvml.errors.NvmlError` subclasses carrying the
NVML return code (``.code``), so callers branch on codes, never on messages.
"""

from __future__ import annotations

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
]
