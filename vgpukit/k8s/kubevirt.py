"""The device plugin's KubeVirt mode: devices for VMs, answered the way virt-launcher reads them.

KubeVirt's virt-launcher builds a VM's ``<hostdev>`` elements from environment variables its pod
gets from a device plugin (docs/kubevirt.md, "The contract"): ``PCI_RESOURCE_<NAME>`` holds the PCI
addresses (``DDDD:BB:DD.F``), ``MDEV_PCI_RESOURCE_<NAME>`` the mdev UUIDs, several comma-separated,
``<NAME>`` being the resource name upper-cased with ``/`` and ``.`` turned into ``_``. QEMU then
opens the device's VFIO nodes, which the answer's device specs put in the pod.

=============================  ==========================================  ===================================
resource (``--kubevirt-naming  devices (device plugin ID)                  nvidia naming
vgpukit``)
=============================  ==========================================  ===================================
``vgpukit.io/vm-pci-<v>-<d>``  PCI functions on a VFIO driver with that    NVIDIA functions: ``nvidia.com/``
                               vendor:device (whole GPUs, VFs of any PF),  + pci.ids' device name
                               one per IOMMU group (BDF)                   (``GA102GL_A10``)
``vgpukit.io/vm-vgpu-<type>``  NVIDIA vGPUs: mdevs (UUID), VFs with a      ``nvidia.com/`` + the type's name
                               vGPU type (BDF)                             (``GRID_T4-4Q``)
``vgpukit.io/vm-mdev-<type>``  other mediated devices (UUID)               (vgpukit's name)
=============================  ==========================================  ===================================

One IOMMU group is one device: VFIO hands out groups, and two VMs never share one. A group whose
other members are all on VFIO (or on no driver, or bridges) is offered as its first function (the
others come with it: their nodes are in the answer); a group with a member on a host driver is not
offered (a warning says which), as QEMU could not open it; nor is a PF with VFs enabled (a VM holding
it could reset them: a warning says so).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import iommu
from ..cdi.spec import vendor_vfio
from ..host import VFIO_DEV, Host
from ..mdev import sysfs as mdev_sysfs
from ..mdev.model import MdevParent
from ..node.inventory import PREFIX, Device, Inventory, resource_part, signature, with_holders
from ..pci import PciDevice, Scan
from ..sriov.binding import pf_with_vfs
from ..vgpu import hostview
from ..vgpu.catalog import short_name
from ..vgpu.model import GpuView, Vgpu

if TYPE_CHECKING:
    from ..data.pci_names import PciNames
    from ..nvml import Nvml

PCI_ENV, MDEV_ENV = "PCI_RESOURCE", "MDEV_PCI_RESOURCE"  # KubeVirt's prefixes (kubevirt.io/api core/v1)
NAMINGS = ("vgpukit", "nvidia")
NVIDIA, NVIDIA_VENDOR = "nvidia.com", "10de"
_SPACE = re.compile(r"\s+")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_.]+")


def env_name(prefix: str, resource: str) -> str:
    """KubeVirt's ``ResourceNameToEnvVar``: ``nvidia.com/GA102GL_A10`` -> ``PCI_RESOURCE_NVIDIA_COM_GA102GL_A10``
    (upper case, ``/`` and ``.`` to ``_``; a ``-`` is kept)."""
    return f"{prefix}_{resource.upper().replace('/', '_').replace('.', '_')}"


def nvidia_pci_name(names: PciNames, device: str) -> str:
    """kubevirt-gpu-device-plugin's name of an NVIDIA function: pci.ids' device line upper-cased, ``/``,
    ``.`` and white space to ``_``, anything but ``[A-Za-z0-9_.]`` dropped; the device id when the
    database does not know it."""
    found = names.lookup(NVIDIA_VENDOR, device.lower())[1]
    if not found:
        return device.lower()
    text = _SPACE.sub("_", found.strip().upper().replace("/", "_").replace(".", "_"))
    return _NOT_NAME.sub("", text) or device.lower()


def nvidia_type_name(type_name: str) -> str:
    """kubevirt-gpu-device-plugin's name of a vGPU type: its name with white space runs as ``_``."""
    return _SPACE.sub("_", type_name.strip())


@dataclass
class Offer:
    """One resource: what ``permittedHostDevices`` selects it by, and its devices."""

    name: str
    kind: str  # pci | mdev
    selector: str  # pciVendorSelector (vvvv:dddd) or mdevNameSelector (the type's name)
    devices: list[Device] = field(default_factory=list)


@dataclass
class Offers:
    resources: dict[str, Offer] = field(default_factory=dict)
    pci: dict[str, PciDevice] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # every mdev type name offered here -> its resource
    type_ids: dict[str, str] = field(default_factory=dict)  # and type id -> type name
    dra: set[str] = field(default_factory=set)  # what the DRA driver offers VMs here: vf, vgpu, mdev

    def add(self, name: str, kind: str, selector: str, dev: Device) -> None:
        self.resources.setdefault(name, Offer(name, kind, selector)).devices.append(dev)

    def inventory(self) -> Inventory:
        return Inventory({n: sorted(o.devices, key=lambda d: d.id) for n, o in self.resources.items()}, self.pci)


class _Nodes:
    """The device nodes a VM's QEMU opens for one IOMMU group: ``/dev/vfio/vfio`` and the group's node,
    and with iommufd (``/dev/iommu`` present) ``/dev/iommu`` and each member's ``/dev/vfio/devices/vfioN``."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.groups = set(host.listdir(host.vfio_dir()))
        self.iommufd = host.exists(host.dev_node("iommu"))

    def shown(self, path: object) -> str:
        return self.host.display(str(path))

    def __call__(self, group: int, cdev_dirs: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(nodes, the nodes a user holds open) of a group; None when its group node is missing."""
        if str(group) not in self.groups:
            return None
        node = self.shown(self.host.vfio_group_node(group))
        cdevs = [self.shown(self.host.vfio_device_node(n)) for d in cdev_dirs for n in self.host.listdir(d)]
        nodes = [self.shown(self.host.dev("vfio", "vfio")), node]
        if self.iommufd:
            nodes += [self.shown(self.host.dev_node("iommu")), *cdevs]
        return tuple(dict.fromkeys(nodes)), (node, *cdevs)


def _on_vfio(host: Host, d: PciDevice) -> bool:
    return bool(d.driver) and ("vfio" in (d.driver or "") or vendor_vfio(host, d))


def collect(host: Host, naming: str = "vgpukit", scan: Scan | None = None) -> Offers:
    """Every device a VM can be given now, by resource (one read of sysfs; holders read by the caller)."""
    scan = scan or Scan(host)
    out = Offers(pci={d.bdf: d for d in scan.devices()})
    names = scan.names if naming == "nvidia" else None
    views = hostview.gpus(host, scan)
    vgpus = {v.id: v for v in hostview.vgpus(host, views)}
    nodes = _Nodes(host)
    _pci(host, out, nodes, vgpus, names)
    parents = mdev_sysfs.parents(host)
    _mdevs(host, out, nodes, vgpus, naming, views, parents)
    pfs = {d.physfn for d in out.pci.values() if d.is_vf}
    if any(pf in out.pci and out.pci[pf].kind != "gpu" for pf in pfs):  # bound to vfio-pci at prepare
        out.dra.add("vf")
    if any(v.interface for v in views):  # vGPUs there or made at prepare
        out.dra.add("vgpu")
    gpu_parents = {p for v in views for p in v.parents}
    if any(p.name not in gpu_parents for p in parents):
        out.dra.add("mdev")
    return out


def _pci(host: Host, out: Offers, nodes: _Nodes, vgpus: dict[str, Vgpu], names: PciNames | None) -> None:
    groups: dict[int, list[PciDevice]] = {}
    for d in out.pci.values():
        if d.iommu_group is not None and _on_vfio(host, d):
            groups.setdefault(d.iommu_group, []).append(d)
    for group, fns in sorted(groups.items()):
        first = sorted(fns, key=lambda f: f.bdf)[0]
        blockers = iommu.blockers(host, group, {f.bdf for f in fns})
        if blockers:
            others = ", ".join(f"{b.bdf} ({b.driver})" for b in blockers)
            out.warnings.append(f"{first.bdf}: IOMMU group {group} also holds {others}: not offered to VMs")
            continue
        pf = next((f for f in fns if f.sriov is not None and f.sriov.num_vfs), None)
        if pf is not None and pf.sriov is not None:
            out.warnings.append(f"{pf_with_vfs(pf.bdf, pf.sriov.num_vfs)}: not offered to VMs")
            continue
        members = iommu.members(host, group)
        found = nodes(group, [str(host.pci_device(m, VFIO_DEV)) for m in members if m in out.pci])
        if found is None:
            out.warnings.append(f"{first.bdf} is on {first.driver} but /dev/vfio/{group} is missing; skipped")
            continue
        v = vgpus.get(first.bdf)
        if v is not None:
            name = f"{NVIDIA}/{nvidia_type_name(v.name)}" if names else f"{PREFIX}/vm-vgpu-{_part(v.name)}"
        elif names is not None and first.vendor == NVIDIA_VENDOR:
            name = f"{NVIDIA}/{nvidia_pci_name(names, first.device)}"
            if name == f"{NVIDIA}/{first.device.lower()}" and name not in out.resources:
                out.warnings.append(_unnamed(names, first.device, name))
        else:
            name = f"{PREFIX}/vm-pci-{first.vendor}-{first.device}"
        env = (f"{env_name(PCI_ENV, name)}={first.bdf}",)
        dev = Device(first.bdf, first.bdf, first.numa_node, None, found[0], env, watch=found[1])
        out.add(name, "pci", f"{first.vendor}:{first.device}", dev)


def _unnamed(names: PciNames, device: str, name: str) -> str:
    """The warning for an NVIDIA function the PCI ID database cannot name: kubevirt-gpu-device-plugin names
    it from its own pci.ids, so VM manifests written for that plugin ask for another name (decided in
    docs/kubevirt.md: no guess from vgpukit's own list, whose names are not pci.ids')."""
    where = "no pci.ids on this host" if names.source == "builtin" else f"its {names.source} does not know it"
    return (
        f"{NVIDIA_VENDOR}:{device.lower()} offered as {name} ({where}): kubevirt-gpu-device-plugin names it from"
        " its own pci.ids; install the pci.ids package (Debian: pci.ids)"
        " for the same names"
    )


def _part(type_name: str) -> str:
    return resource_part(short_name(type_name))


def _mdev_resource(type_name: str, type_id: str, vgpu: bool, naming: str) -> str:
    if not vgpu:
        return f"{PREFIX}/vm-mdev-{resource_part(type_id)}"
    return f"{NVIDIA}/{nvidia_type_name(type_name)}" if naming == "nvidia" else f"{PREFIX}/vm-vgpu-{_part(type_name)}"


def _mdevs(
    host: Host,
    out: Offers,
    nodes: _Nodes,
    vgpus: dict[str, Vgpu],
    naming: str,
    views: list[GpuView],
    parents: list[MdevParent],
) -> None:
    type_names: dict[tuple[str, str], str] = {}
    gpu_parents = {p for v in views for p in v.parents}
    for p in parents:
        for t in p.types:
            tname = type_names[(p.name, t.type_id)] = t.name or t.type_id
            out.type_ids[t.type_id] = tname
            out.types[tname] = _mdev_resource(tname, t.type_id, p.name in gpu_parents, naming)
    for inst in mdev_sysfs.instances(host, with_holders=False):
        tname = type_names.get((inst.parent, inst.type_id)) or inst.type_id
        cdevs = [str(host.mdev_device(inst.uuid, VFIO_DEV))]
        found = None if inst.iommu_group is None else nodes(inst.iommu_group, cdevs)
        if found is None:
            out.warnings.append(f"mdev {inst.uuid} has no VFIO group node; skipped")
            continue
        name = _mdev_resource(tname, inst.type_id, inst.uuid in vgpus, naming)
        parent = out.pci.get(inst.parent)
        env = (f"{env_name(MDEV_ENV, name)}={inst.uuid}",)
        dev = Device(inst.uuid, inst.parent, parent.numa_node if parent else None, None, found[0], env, watch=found[1])
        out.add(name, "mdev", tname, dev)


class Poller:
    """The KubeVirt mode's view of the host per poll: a full :func:`collect` when the inventory's
    :func:`~vgpukit.node.inventory.signature` changed, else only the holders read again."""

    def __init__(self, open_host: Callable[[], tuple[Host, Nvml | None, Callable[[], None]]], naming: str) -> None:
        self.open_host = open_host
        self.naming = naming
        self.inv: Inventory | None = None
        self.sig: tuple[object, ...] = ()

    def __call__(self) -> Inventory:
        host, _nvml, close = self.open_host()
        try:
            sig = signature(host, None, (self.naming,))
            if self.inv is None or sig != self.sig:
                offers = collect(host, self.naming)
                self.inv, self.sig = with_holders(host, offers.inventory()), sig
                self.inv.warnings += offers.warnings
            else:
                self.inv = with_holders(host, self.inv)
            return self.inv
        finally:
            close()
