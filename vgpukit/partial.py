"""Whole-host reads go on past one bad device: what a read could not read, per device.

A whole-host read (``mig status``, ``export``, ``topo``, ``k8s resources``, ``cdi generate``...) shows
every device it can read and marks the others; each one it could not read is an :class:`Unread`
(the device, its address, why), listed in the command's ``--json`` document under ``unreadable`` and
shown in its table; the command then exits 6 (:class:`vgpukit.errors.Partial`: everything else was
done). docs/health.md, "One bad device".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import msgspec

from .errors import Partial
from .nvml.errors import CODE_NAMES, GPU_IS_LOST, NvmlError
from .nvml.model import NvmlGpu

T = TypeVar("T")


class Unread(msgspec.Struct, frozen=True):
    device: str  # gpuN, or the PCI address
    bdf: str  # "" when NVML cannot say (a lost GPU whose handle it does not give)
    reason: str

    @property
    def label(self) -> str:
        return f"{self.device} ({self.bdf})" if self.bdf and self.bdf != self.device else self.device


def gpu_name(names: Mapping[str, str], gpu: NvmlGpu) -> str:
    """How commands name the GPU: its alias (gpuN), else its NVML index."""
    return names.get(gpu.bdf, f"gpu{gpu.index}") if gpu.bdf else f"gpu{gpu.index}"


def lost_reason(gpu: NvmlGpu) -> str:
    """What NVML answers for a lost GPU, in the words its errors use."""
    return f"GPU {gpu.bdf or f'with NVML index {gpu.index}'} is lost: NVML {CODE_NAMES[GPU_IS_LOST]}"


def unread_gpu(names: Mapping[str, str], gpu: NvmlGpu, exc: NvmlError | None = None) -> Unread:
    return Unread(gpu_name(names, gpu), gpu.bdf, lost_reason(gpu) if exc is None else exc.message)


def lost_gpus(gpus: Iterable[NvmlGpu], names: Mapping[str, str]) -> list[Unread]:
    """The GPUs NVML lists as lost (a read that uses only the list leaves them out or marks them)."""
    return [unread_gpu(names, g) for g in gpus if g.lost]


def each_gpu(
    gpus: Iterable[NvmlGpu], read: Callable[[NvmlGpu], T], names: Mapping[str, str]
) -> tuple[list[tuple[NvmlGpu, T]], list[Unread]]:
    """``read(gpu)`` for every GPU NVML can answer for; the others (lost, or an NVML call on them
    failed) as :class:`Unread`, in NVML order. Only NVML's errors are caught: anything else is a bug
    or a host error that concerns every device."""
    done: list[tuple[NvmlGpu, T]] = []
    unread: list[Unread] = []
    for g in gpus:
        if g.lost:
            unread.append(unread_gpu(names, g))
            continue
        try:
            done.append((g, read(g)))
        except NvmlError as exc:
            unread.append(unread_gpu(names, g, exc))
    return done, unread


def as_json(unread: Iterable[Unread]) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(u) for u in unread]


def error(unread: list[Unread], alone: bool = False) -> Partial:
    """The outcome of a read that left devices out: one line naming the first (and how many more);
    ``alone``: the read asked for that device only (nothing else to show)."""
    first = unread[0]
    more = f"; and {len(unread) - 1} more" if len(unread) > 1 else ""
    where = f"vgpukit health {first.bdf}" if first.bdf else "vgpukit health"
    return Partial(
        f"not read: {first.label}: {first.reason}{more}",
        device=first.bdf or None,
        hint=f"see: {where}" if alone else f"everything else is shown; see: {where}",
    )
