"""vGPU records (plain data): types a GPU offers and vGPUs that exist, on either host interface."""

from __future__ import annotations

from typing import Any

from ..records import Record

MDEV, VFIO = "mdev", "vfio"


class VgpuType(Record):
    __slots__ = (  # noqa: RUF023 (field order)
        "gpu", "interface", "type_id", "name", "short", "framebuffer_mb", "max_instances", "available",
        "creatable", "free_vfs", "parents",
    )  # fmt: skip
    gpu: str  # physical GPU BDF
    interface: str  # mdev | vfio
    type_id: str  # "nvidia-232" (mdev) or "1050" (vfio)
    name: str  # as the host reports it: "GRID T4-4Q", "NVIDIA H100-4C"
    short: str  # comparable form: "T4-4Q"
    framebuffer_mb: int | None
    max_instances: int | None
    available: int | None  # mdev: the kernel's available_instances (summed over the GPU's parents)
    creatable: bool  # vfio: listed in creatable_vgpu_types now; mdev: available > 0
    free_vfs: int | None  # vfio: VFs without a vGPU
    parents: tuple[str, ...]  # mdev parents offering it (the GPU, or its VFs)

    def __init__(
        self,
        gpu: str,
        interface: str,
        type_id: str,
        name: str,
        short: str,
        framebuffer_mb: int | None,
        max_instances: int | None,
        available: int | None,
        creatable: bool,
        free_vfs: int | None = None,
        parents: tuple[str, ...] = (),
    ) -> None:
        self._init(
            gpu=gpu,
            interface=interface,
            type_id=type_id,
            name=name,
            short=short,
            framebuffer_mb=framebuffer_mb,
            max_instances=max_instances,
            available=available,
            creatable=creatable,
            free_vfs=free_vfs,
            parents=parents,
        )

    def to_dict(self) -> dict[str, Any]:
        d = self.as_dict()
        d["parents"] = list(self.parents)
        return d


class GpuView(Record):
    __slots__ = ("bdf", "alias", "name", "interface", "parents", "vfs", "missing_vfs", "num_vfs")  # noqa: RUF023 (field order)
    bdf: str
    alias: str | None
    name: str
    interface: str | None  # None: no vGPU host driver interface found (or VFs not enabled)
    parents: tuple[str, ...]  # mdev parents (legacy)
    vfs: tuple[str, ...]  # VFs with nvidia/ (vendor VFIO)
    missing_vfs: int  # VFs configured (sriov_numvfs) but not there: a PF reset took them away
    num_vfs: int  # VFs configured (sriov_numvfs)

    def __init__(
        self,
        bdf: str,
        alias: str | None,
        name: str,
        interface: str | None,
        parents: tuple[str, ...] = (),
        vfs: tuple[str, ...] = (),
        missing_vfs: int = 0,
        num_vfs: int = 0,
    ) -> None:
        self._init(bdf=bdf, alias=alias, name=name, interface=interface, parents=parents, vfs=vfs)
        self._init(missing_vfs=missing_vfs, num_vfs=num_vfs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.bdf,
            "alias": self.alias,
            "name": self.name,
            "interface": self.interface,
            "mdev_parents": list(self.parents),
            "vfs": len(self.vfs),
        }


class Vgpu(Record):
    __slots__ = (  # noqa: RUF023 (field order)
        "id", "gpu", "interface", "type_id", "name", "parent", "vf", "iommu_group", "used_by", "active", "start",
    )  # fmt: skip
    id: str  # mdev UUID (legacy) or VF BDF (vendor VFIO)
    gpu: str
    interface: str
    type_id: str
    name: str
    parent: str | None  # mdev parent
    vf: str | None
    iommu_group: int | None
    used_by: tuple[dict[str, Any], ...]
    active: bool  # False: only defined (an mdevctl definition whose instance does not run)
    start: str | None  # its definition's start mode (auto: made at boot, manual), None: not defined

    def __init__(
        self,
        id: str,
        gpu: str,
        interface: str,
        type_id: str,
        name: str,
        parent: str | None = None,
        vf: str | None = None,
        iommu_group: int | None = None,
        used_by: tuple[dict[str, Any], ...] = (),
        active: bool = True,
        start: str | None = None,
    ) -> None:
        self._init(
            id=id,
            gpu=gpu,
            interface=interface,
            type_id=type_id,
            name=name,
            parent=parent,
            vf=vf,
            iommu_group=iommu_group,
            used_by=used_by,
            active=active,
            start=start,
        )

    @property
    def defined(self) -> str:
        """The DEFINED column, in ``mdev list``'s words: the start mode (``auto``: made again at boot,
        ``manual``), ``no``, or ``-`` where there are no definitions (vGPUs on VFs)."""
        return self.start or ("no" if self.interface == MDEV else "-")

    def to_dict(self) -> dict[str, Any]:
        d = self.as_dict()
        d["used_by"] = list(self.used_by)
        d["in_use"] = bool(self.used_by)
        d["defined"] = self.start is not None
        return d
