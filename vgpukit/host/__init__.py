"""The one door to the host (docs/engine.md, "The host door"): :class:`Host`, what its methods take and
return, and the names of the places it knows. Callers outside this package import from here only (and the
listening side from :mod:`vgpukit.host.notify`, loaded only by those who listen); its rooms are its own.
"""

from __future__ import annotations

from .changes import Change
from .door import Host, check_name
from .file_places import CDI_SPEC_DIRS, DRA_METADATA_CONTAINER_DIR, NVIDIA_IPC_PATHS, SYSTEMD_UNIT_DIR, UDEV_RULES_DIR
from .fileio import DirFiles, KernelPort
from .kernel_paths import (
    AER_DEV_CORRECTABLE,
    AER_DEV_FATAL,
    AER_DEV_NONFATAL,
    BDF_RE,
    BOOT_VGA,
    CONFIG,
    DRIVER,
    DRIVER_OVERRIDE,
    INFINIBAND,
    IOMMU_GROUP,
    MDEV_TYPE,
    MDEV_TYPES,
    PHYSFN,
    SHORT_BDF_RE,
    SRIOV_AUTOPROBE,
    SRIOV_NUMVFS,
    SRIOV_OFFSET,
    SRIOV_STRIDE,
    SRIOV_TOTALVFS,
    SRIOV_VF_DEVICE,
    STDIN_PATH,
    VFIO_DEV,
    VIRTFN,
)
from .programs import ProgramResult

__all__ = [
    "AER_DEV_CORRECTABLE",
    "AER_DEV_FATAL",
    "AER_DEV_NONFATAL",
    "BDF_RE",
    "BOOT_VGA",
    "CDI_SPEC_DIRS",
    "CONFIG",
    "DRA_METADATA_CONTAINER_DIR",
    "DRIVER",
    "DRIVER_OVERRIDE",
    "INFINIBAND",
    "IOMMU_GROUP",
    "MDEV_TYPE",
    "MDEV_TYPES",
    "NVIDIA_IPC_PATHS",
    "PHYSFN",
    "SHORT_BDF_RE",
    "SRIOV_AUTOPROBE",
    "SRIOV_NUMVFS",
    "SRIOV_OFFSET",
    "SRIOV_STRIDE",
    "SRIOV_TOTALVFS",
    "SRIOV_VF_DEVICE",
    "STDIN_PATH",
    "SYSTEMD_UNIT_DIR",
    "UDEV_RULES_DIR",
    "VFIO_DEV",
    "VIRTFN",
    "Change",
    "DirFiles",
    "Host",
    "KernelPort",
    "ProgramResult",
    "check_name",
]
