"""The host's layout, named once: where each device, driver, SR-IOV attribute, mdev parent / type /
instance, IOMMU group and NUMA node lives in sysfs (docs/sysfs-abi.md), and every place under
``/dev``, ``/proc``, ``/etc`` and ``/run`` vgpukit reads or writes. A mixin of
:class:`vgpukit.host.Host`, which supplies the root-aware :meth:`sys`, :meth:`dev`, :meth:`proc`,
:meth:`etc` and :meth:`run`. Paths other programs see (written into specs, units, plans) are the
constants at the top."""

from __future__ import annotations

import re
from pathlib import Path

from .inputs import check_component

# a PCI function's address, as sysfs names it (DDDD:BB:DD.F, lower case), and its short form (BB:DD.F)
BDF_RE = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])\Z", re.ASCII)
SHORT_BDF_RE = re.compile(r"^([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])\Z", re.ASCII)

# Attribute and link names of a PCI function in sysfs (see docs/sysfs-abi.md) and
# of mdev parents (sysfs-bus-vfio-mdev); the directories they live in are Host methods below.
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

# Host paths as other programs see them (written into CDI specs, systemd units, plans).
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # where CDI consumers look for specs, the first the default
SYSTEMD_UNIT_DIR = "/etc/systemd/system"
UDEV_RULES_DIR = "/etc/udev/rules.d"
# The NVIDIA daemons' sockets and the MPS pipe directory a container gets when they exist (nvidia-ctk's list).
NVIDIA_IPC_PATHS = ("/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket", "/tmp/nvidia-mps")
# Where a pod finds its DRA claims' device metadata files (KEP-5304; the CDI spec of each mounts one there).
DRA_METADATA_CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
# This process's open files (the host door resolves what an fd really opened): never under the root.
SELF_FD = "/proc/self/fd"


class SysfsLayout:
    def path(self, *parts: str) -> Path:
        raise NotImplementedError

    def sys(self, *parts: str) -> Path:
        raise NotImplementedError

    def dev(self, *parts: str) -> Path:
        raise NotImplementedError

    def proc(self, *parts: str) -> Path:
        raise NotImplementedError

    def etc(self, *parts: str) -> Path:
        raise NotImplementedError

    def run(self, *parts: str) -> Path:
        raise NotImplementedError

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

    # ------------------------------------------------------------------ /run
    def health_record(self) -> Path:
        """``/run/vgpukit/health/state.json``: the health layer's recent events and what it last saw
        of each device (IOMMU group, VF count, AER totals), to compare the next look with."""
        return self.run("vgpukit", "health", "state.json")

    def dra_claim_records(self) -> Path:
        """``/run/vgpukit/dra/claims``: one record per prepared ResourceClaim (:meth:`dra_claim_record`)."""
        return self.run("vgpukit", "dra", "claims")

    def dra_claim_record(self, uid: str) -> Path:
        """``/run/vgpukit/dra/claims/<uid>.json``: a ResourceClaim the DRA plugin prepared (its devices
        and CDI names), until unprepared; a restarted plugin unprepares from it."""
        return self.run("vgpukit", "dra", "claims", check_component(uid, "claim UID") + ".json")

    def dra_made_record(self, uid: str | None = None) -> Path:
        """``/run/vgpukit/dra/made/<uid>.json``: what the DRA plugin created on demand for a claim (a MIG
        slice's GPU and placement), written before it is created, removed once it is destroyed; without
        ``uid``, the directory."""
        if uid is None:
            return self.run("vgpukit", "dra", "made")
        return self.run("vgpukit", "dra", "made", check_component(uid, "claim UID") + ".json")

    def dra_mig_mode_record(self, bdf: str) -> Path:
        """``/run/vgpukit/dra/mig-mode/<BDF>.json``: the DRA plugin turned MIG mode on for the first slice
        a claim got on this GPU (one that changes mode without a reset); removed when the last slice's
        unprepare turns it off again."""
        return self.run("vgpukit", "dra", "mig-mode", check_component(bdf, "PCI address") + ".json")

    def dra_claim_cdi_spec(self, uid: str) -> Path:
        """``/run/cdi/vgpukit.io-claim-<uid>.json`` (``/var/run/cdi``, where CDI consumers look for
        transient specs): the CDI spec of one prepared claim."""
        return self.run("cdi", "vgpukit.io-claim-" + check_component(uid, "claim UID") + ".json")

    def dra_metadata_dir(self, driver: str, namespace: str, claim: str) -> Path:
        """``/var/lib/kubelet/plugins/<driver>/dra-device-metadata/<namespace>_<claim>``: where the
        kubelet-plugin library (KEP-5304) keeps a prepared claim's device metadata, one directory per request."""
        part = check_component(f"{namespace}_{claim}", "claim name")
        return self.path(
            "var", "lib", "kubelet", "plugins", check_component(driver, "driver"), "dra-device-metadata", part
        )

    def dra_metadata_file(self, driver: str, namespace: str, claim: str, request: str) -> Path:
        """``.../dra-device-metadata/<namespace>_<claim>/<request>/metadata.json``: one request's metadata stream."""
        return self.dra_metadata_dir(driver, namespace, claim) / check_component(request, "request") / "metadata.json"

    def dra_metadata_cdi_spec(self, driver: str, uid: str, request: str) -> Path:
        """``/run/cdi/<driver>-metadata-<uid>-<request>.json``: the CDI spec mounting one request's metadata file."""
        name = f"{driver}-metadata-{check_component(uid, 'claim UID')}-{check_component(request, 'request')}.json"
        return self.run("cdi", check_component(name, "CDI spec"))

    def remedy_state(self, *parts: str) -> Path:
        """``/run/vgpukit/remedy``: what remediation did this boot (``history.json``: each run, its outcome
        and escalations, read by ``vgpukit health``, the exporter and the rate limits)."""
        return self.run("vgpukit", "remedy", *parts)

    def device_resets(self) -> Path:
        """``/run/vgpukit/health/resets.json``: when each device was last reset by vgpukit (BDF -> time):
        the health layer counts no event from before it."""
        return self.run("vgpukit", "health", "resets.json")

    # ------------------------------------------------------------------ /var/lib
    def quarantine_record(self, bdf: str | None = None) -> Path:
        """``/var/lib/vgpukit/quarantine/<bdf>.json``: a device an operator or the remediation policy
        quarantined (survives a reboot: ``vgpukit release`` ends it); without ``bdf``, the directory."""
        if bdf is None:
            return self.path("var", "lib", "vgpukit", "quarantine")
        return self.path("var", "lib", "vgpukit", "quarantine", check_component(bdf, "PCI address") + ".json")

    # ------------------------------------------------------------------ programs
    def cuda_checkpoint_tools(self) -> list[Path]:
        """Where NVIDIA's ``cuda-checkpoint`` utility (driver R550+) is looked for, in order."""
        return [self.path("usr", "bin", "cuda-checkpoint"), self.path("usr", "local", "bin", "cuda-checkpoint")]

    # ------------------------------------------------------------------ /etc
    def ld_cache(self) -> Path:
        """``/etc/ld.so.cache``: the dynamic linker's cache (where the driver's libraries are)."""
        return self.etc("ld.so.cache")

    def libvirt_network(self, name: str) -> Path:
        """``/etc/libvirt/qemu/networks/<name>.xml``: a network libvirt's system instance has defined."""
        return self.etc("libvirt", "qemu", "networks", check_component(name, "libvirt network") + ".xml")

    def mdevctl_dir(self, *parts: str) -> Path:
        """``/etc/mdevctl.d``: mdevctl's persistent definitions, ``<parent>/<uuid>``."""
        return self.etc("mdevctl.d", *parts)

    def mdevctl_scripts(self, kind: str) -> Path:
        """``/etc/mdevctl.d/scripts.d/<kind>``: mdevctl's callout and notifier scripts."""
        return self.etc("mdevctl.d", "scripts.d", kind)

    def nfd_feature_file(self) -> Path:
        """``/etc/kubernetes/node-feature-discovery/features.d/vgpukit``: NFD's local source reads it."""
        return self.etc("kubernetes", "node-feature-discovery", "features.d", "vgpukit")


# The name a program gives for its child's standard input as a file argument (libvirt runs
# ``mdevctl define --jsonfile=/dev/stdin``): front ends read their stdin for it, not the path.
STDIN_PATH = "/dev/stdin"
