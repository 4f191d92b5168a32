"""The kernel's layout, named once: where each device, driver, SR-IOV attribute, mdev parent / type /
instance, IOMMU group and NUMA node lives in sysfs (docs/sysfs-abi.md), the device nodes under ``/dev``
and the kernel's and driver's files under ``/proc``: what the kernel lays out, the same on every host.
A part of :class:`vgpukit.host.Host` (where files that programs keep live: :mod:`.file_places`)."""

from __future__ import annotations

import re
from pathlib import Path

from ..inputs import check_component
from .contain import Containment

# a PCI function's address, as sysfs names it (DDDD:BB:DD.F, lower case), and its short form (BB:DD.F)
BDF_RE = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])\Z", re.ASCII)
SHORT_BDF_RE = re.compile(r"^([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])\Z", re.ASCII)

# Attribute and link names of a PCI function in sysfs (see docs/sysfs-abi.md) and
# of mdev parents (sysfs-bus-vfio-mdev); the directories they live in are the methods below.
DRIVER = "driver"  # link to the bound driver
DRIVER_OVERRIDE = "driver_override"
CONFIG = "config"  # the function's PCI configuration space (binary; 64 bytes readable without root)
BOOT_VGA = "boot_vga"  # on a VGA controller: 1 on the device the firmware set up as the console
IOMMU_GROUP = "iommu_group"  # link to /sys/kernel/iommu_groups/<n>
PHYSFN = "physfn"  # on a VF: link to its PF
VIRTFN = "virtfn"  # on a PF: virtfn0, virtfn1, ... links to its VFs
SRIOV_TOTALVFS = "sriov_totalvfs"
SRIOV_NUMVFS = "sriov_numvfs"
SRIOV_OFFSET = "sriov_offset"
SRIOV_STRIDE = "sriov_stride"
SRIOV_VF_DEVICE = "sriov_vf_device"
SRIOV_AUTOPROBE = "sriov_drivers_autoprobe"
VFIO_DEV = "vfio-dev"  # the VFIO device cdev directory of a bound function
INFINIBAND = "infiniband"  # on an RDMA-capable function: one directory per RDMA device (mlx5_0)
MDEV_TYPES = "mdev_supported_types"  # on a parent: one directory per type
MDEV_TYPE = "mdev_type"  # on an mdev: link to its type directory
# PCIe AER counters of a function (sysfs-bus-pci-devices-aer_stats): "<ERROR> <count>" lines ending
# with the total (TOTAL_ERR_COR / TOTAL_ERR_FATAL / TOTAL_ERR_NONFATAL)
AER_DEV_CORRECTABLE = "aer_dev_correctable"
AER_DEV_FATAL = "aer_dev_fatal"
AER_DEV_NONFATAL = "aer_dev_nonfatal"

# The name a program gives for its child's standard input as a file argument (libvirt runs
# ``mdevctl define --jsonfile=/dev/stdin``): front ends read their stdin for it, not the path.
STDIN_PATH = "/dev/stdin"


class KernelPaths(Containment):
    """Where the kernel keeps what vgpukit reads and writes: ``/sys``, ``/dev``, ``/proc`` under the root."""

    def sys(self, *parts: str) -> Path:
        return self.path("sys", *parts)

    def dev(self, *parts: str) -> Path:
        return self.path("dev", *parts)

    def proc(self, *parts: str) -> Path:
        return self.path("proc", *parts)

    # ------------------------------------------------------------------ /sys
    # Every sysfs location vgpukit uses is spelled here, once (attribute names: the constants above).
    def pci_devices(self) -> Path:
        """``/sys/bus/pci/devices``: one link per PCI function, named by its address."""
        return self.sys("bus", "pci", "devices")

    def pci_device(self, bdf: str, *parts: str) -> Path:
        return self.sys("bus", "pci", "devices", check_component(bdf, "PCI address"), *parts)

    def pci_driver(self, driver: str, *parts: str) -> Path:
        return self.sys("bus", "pci", "drivers", check_component(driver, "driver name"), *parts)

    def pci_drivers_probe(self) -> Path:
        """Writing a BDF here makes the driver core probe that device (override first)."""
        return self.sys("bus", "pci", "drivers_probe")

    def iommu_group(self, group: int | str, *parts: str) -> Path:
        """``/sys/kernel/iommu_groups/<group>``; its ``devices/`` lists the members."""
        return self.sys("kernel", "iommu_groups", str(group), *parts)

    def mdev_parents(self) -> Path:
        """``/sys/class/mdev_bus``: one link per mdev parent (a PCI address, or e.g. ``mtty``)."""
        return self.sys("class", "mdev_bus")

    def mdev_parent(self, name: str, *parts: str) -> Path:
        return self.sys("class", "mdev_bus", check_component(name, "mdev parent"), *parts)

    def mdev_type(self, parent: str, type_id: str, *parts: str) -> Path:
        """A type directory: ``name``, ``description``, ``available_instances``, ``create``, ``devices/``."""
        return self.mdev_parent(parent, MDEV_TYPES, check_component(type_id, "mdev type"), *parts)

    def mdev_devices(self) -> Path:
        """``/sys/bus/mdev/devices``: one link per active mdev, named by its UUID."""
        return self.sys("bus", "mdev", "devices")

    def mdev_device(self, uuid: str, *parts: str) -> Path:
        return self.sys("bus", "mdev", "devices", check_component(uuid, "mdev UUID"), *parts)

    def numa_nodes(self) -> Path:
        """``/sys/devices/system/node``: ``node<N>/cpulist``, ``node<N>/hugepages``."""
        return self.sys("devices", "system", "node")

    def numa_node(self, node: int | str, *parts: str) -> Path:
        return self.sys("devices", "system", "node", f"node{node}", *parts)

    def net_device(self, name: str, *parts: str) -> Path:
        """``/sys/class/net/<name>``: a network interface; a bridge has a ``bridge`` directory."""
        return self.sys("class", "net", check_component(name, "network interface"), *parts)

    def vfio_group_node(self, group: int | str) -> Path:
        """``/dev/vfio/<group>``: what a VFIO user (QEMU) holds open."""
        return self.dev("vfio", str(group))

    # ------------------------------------------------------------------ /dev
    def vfio_dir(self) -> Path:
        """``/dev/vfio``: the group nodes, and ``devices/vfioN`` (the per-device cdevs)."""
        return self.dev("vfio")

    def vfio_device_node(self, name: str) -> Path:
        """``/dev/vfio/devices/<vfioN>``: a bound function's VFIO device cdev (iommufd)."""
        return self.dev("vfio", "devices", check_component(name, "VFIO device"))

    def dev_node(self, name: str, *parts: str) -> Path:
        """A device node by name: ``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/dri/renderD128``..."""
        return self.dev(name, *parts)

    def nvidia_gpu_node(self, minor: int) -> Path:
        """``/dev/nvidia<minor>``: one NVIDIA GPU."""
        return self.dev(f"nvidia{minor}")

    def nvidia_cap_node(self, minor: int) -> Path:
        """``/dev/nvidia-caps/nvidia-cap<minor>``: a MIG access capability."""
        return self.dev("nvidia-caps", f"nvidia-cap{minor}")

    # ------------------------------------------------------------------ /proc
    def processes(self) -> Path:
        """``/proc``: one directory per process, named by its pid."""
        return self.proc()

    def process(self, pid: int | str, *parts: str) -> Path:
        """``/proc/<pid>/...``: ``stat``, ``comm``, ``cmdline``, ``fd/``."""
        return self.proc(str(pid), *parts)

    def file_locks(self) -> Path:
        """``/proc/locks``: every file lock held, with its holder's pid and the file's device and inode."""
        return self.proc("locks")

    def proc_devices(self) -> Path:
        """``/proc/devices``: the character and block device majors by driver name."""
        return self.proc("devices")

    def nvidia_mig_minors(self) -> Path:
        """``/proc/driver/nvidia-caps/mig-minors``: ``gpu<N>/gi<G>[/ci<C>]/access <minor>`` lines."""
        return self.proc("driver", "nvidia-caps", "mig-minors")

    def nvidia_gpu_information(self, bdf: str) -> Path:
        """``/proc/driver/nvidia/gpus/<bdf>/information``: the driver's facts of one GPU (its minor)."""
        return self.proc("driver", "nvidia", "gpus", check_component(bdf, "PCI address"), "information")
