"""MIG devices for CDI, read through the NVML facade, and their nvidia-caps minors.

What CDI needs per MIG device: its UUID, the parent GPU's device minor (``/dev/nvidia<N>``), and the
minors of the GPU-instance and compute-instance access capabilities, which the driver lists in
``/proc/driver/nvidia-caps/mig-minors`` (``gpu<N>/gi<G>/access <minor>``,
``gpu<N>/gi<G>/ci<C>/access <minor>``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ..host import Host
from ..nvml.errors import NvmlError

if TYPE_CHECKING:
    from ..nvml import Nvml

MINOR_LINE = re.compile(r"^(\S+)\s+(\d+)$")
DEVICE_MINOR = re.compile(r"^Device Minor:\s*(\d+)", re.MULTILINE)


class MigSlice(msgspec.Struct, frozen=True):
    uuid: str  # MIG-...
    gpu_bdf: str
    minor: int  # /dev/nvidia<minor>
    gi: int
    ci: int
    gi_cap_minor: int
    ci_cap_minor: int
    gpu_index: int = 0  # the parent's NVML index
    index: int = 0  # the MIG device's position on its GPU (GI then CI order), nvidia-ctk's ``<gpu>:<index>``


def read_mig_minors(host: Host) -> dict[str, int]:
    text = host.read_opt(host.nvidia_mig_minors()) or ""
    out = {}
    for line in text.splitlines():
        m = MINOR_LINE.match(line.strip())
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def gpu_minor(host: Host, bdf: str, index: int) -> int:
    """The GPU's device minor from /proc/driver/nvidia/gpus/<bdf>/information, else its NVML index."""
    info = host.read_opt(host.nvidia_gpu_information(bdf)) or ""
    m = DEVICE_MINOR.search(info)
    return int(m.group(1)) if m else index


def mig_slices(host: Host, nvml: Nvml | None, warnings: list[str]) -> list[MigSlice]:
    """Every compute instance on every MIG-enabled GPU. Empty without NVML."""
    if nvml is None:
        return []
    mig_gpus = [g for g in nvml.gpus() if g.mig_current and not g.lost]  # a lost GPU's cannot be listed
    if not mig_gpus:
        return []
    gpu_instances: Callable[[int], list[Any]] | None = getattr(nvml, "gpu_instances", None)
    if gpu_instances is None:
        warnings.append("this NVML facade cannot list GPU instances; no MIG devices in the CDI spec")
        return []
    minors = read_mig_minors(host)
    out = []
    for gpu in mig_gpus:
        n = gpu_minor(host, gpu.bdf, gpu.index)
        position = 0
        try:
            instances = gpu_instances(gpu.index)
        except NvmlError as exc:  # this GPU stopped answering: its MIG devices are left out, the rest go on
            warnings.append(f"{gpu.bdf}: MIG devices not listed: {exc}")
            continue
        for gi in instances:
            for ci in gi.compute_instances:
                j, position = position, position + 1  # NVML's MIG device index counts skipped ones too
                gi_key, ci_key = f"gpu{n}/gi{gi.id}/access", f"gpu{n}/gi{gi.id}/ci{ci.id}/access"
                if gi_key not in minors or ci_key not in minors:
                    warnings.append(
                        f"{ci.uuid}: no {gi_key} / {ci_key} in mig-minors (nvidia-caps not loaded?); skipped"
                    )
                    continue
                out.append(MigSlice(ci.uuid, gpu.bdf, n, gi.id, ci.id, minors[gi_key], minors[ci_key], gpu.index, j))
    return out
