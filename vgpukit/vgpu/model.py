"""vGPU records (plain data): types a GPU offers and vGPUs that exist, on either host interface."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MDEV, VFIO = "mdev", "vfio"


@dataclass(frozen=True)
class VgpuType:
    gpu: str  # physical GPU BDF
    interface: str  # mdev | vfio
    type_id: str  # "nvidia-232" (mdev) or "1050" (vfio)
    name: str  # as the host reports it: "GRID T4-4Q", "NVIDIA H100-4C"
    short: str  # comparable form: "T4-4Q"
    framebuffer_mb: int | None
    max_instances: int | None
    available: int | None  # mdev: the kernel's available_instances (summed over the GPU's parents)
    creatable: bool  # vfio: listed in creatable_vgpu_types now; mdev: available > 0
    free_vfs: int | None = None  # vfio: VFs without a vGPU
    parents: tuple[str, ...] = ()  # mdev parents offering it (the GPU, or its VFs)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parents"] = list(self.parents)
        return d


@dataclass(frozen=True)
class GpuView:
    bdf: str
    alias: str | None
    name: str
    interface: str | None  # None: no vGPU host driver interface found (or VFs not enabled)
    parents: tuple[str, ...] = ()  # mdev parents (legacy)
    vfs: tuple[str, ...] = ()  # VFs with nvidia/ (vendor VFIO)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.bdf,
            "alias": self.alias,
            "name": self.name,
            "interface": self.interface,
            "mdev_parents": list(self.parents),
            "vfs": len(self.vfs),
        }


@dataclass(frozen=True)
class Vgpu:
    id: str  # mdev UUID (legacy) or VF BDF (vendor VFIO)
    gpu: str
    interface: str
    type_id: str
    name: str
    parent: str | None = None  # mdev parent
    vf: str | None = None
    iommu_group: int | None = None
    used_by: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["used_by"] = list(self.used_by)
        d["in_use"] = bool(self.used_by)
        return d
