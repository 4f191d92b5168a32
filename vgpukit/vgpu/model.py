"""vGPU records (plain data): types a GPU offers and vGPUs that exist, on either host interface."""

from __future__ import annotations

from typing import Any

import msgspec

MDEV, VFIO = "mdev", "vfio"


class VgpuType(msgspec.Struct, frozen=True):
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
        d: dict[str, Any] = msgspec.to_builtins(self)
        return d


class GpuView(msgspec.Struct, frozen=True):
    bdf: str
    alias: str | None
    name: str
    interface: str | None  # None: no vGPU host driver interface found (or VFs not enabled)
    parents: tuple[str, ...] = ()  # mdev parents (legacy)
    vfs: tuple[str, ...] = ()  # VFs with nvidia/ (vendor VFIO)
    missing_vfs: int = 0  # VFs configured (sriov_numvfs) but not there: a PF reset took them away
    num_vfs: int = 0  # VFs configured (sriov_numvfs)

    def to_dict(
        self,
    ) -> dict[str, Any]:  # a reshape: gpu, mdev_parents, VFs counted
        return {
            "gpu": self.bdf,
            "alias": self.alias,
            "name": self.name,
            "interface": self.interface,
            "mdev_parents": list(self.parents),
            "vfs": len(self.vfs),
        }


class Vgpu(msgspec.Struct, frozen=True):
    id: str  # mdev UUID (legacy) or VF BDF (vendor VFIO)
    gpu: str
    interface: str
    type_id: str
    name: str
    parent: str | None = None  # mdev parent
    vf: str | None = None
    iommu_group: int | None = None
    used_by: tuple[dict[str, Any], ...] = ()
    active: bool = True  # False: only defined (an mdevctl definition whose instance does not run)
    start: str | None = None  # its definition's start mode (auto: made at boot, manual), None: not defined

    @property
    def defined(self) -> str:
        """The DEFINED column, in ``mdev list``'s words: the start mode (``auto``: made again at boot,
        ``manual``), ``no``, or ``-`` where there are no definitions (vGPUs on VFs)."""
        return self.start or ("no" if self.interface == MDEV else "-")

    def to_dict(self) -> dict[str, Any]:  # a reshape: adds in_use and defined
        d: dict[str, Any] = msgspec.to_builtins(self)
        d["in_use"] = bool(self.used_by)
        d["defined"] = self.start is not None
        return d
