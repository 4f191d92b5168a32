"""What a user's DEVICE argument names, and the libvirt element that hands it to a VM.

Accepted names (first match wins):

* an mdev UUID (``8-4-4-4-12`` hex): ``/sys/bus/mdev/devices/<uuid>`` -> ``<hostdev type='mdev'>``;
* ``MIG-<uuid>``: refused here (MIG slices go to containers through CDI);
* a PCI function named as :mod:`vgpukit.naming` says (``gpuN``, ``nicN``, BDF, short BDF, GPU
  UUID) -> a PCI device: ``<hostdev type='pci'>``, or ``<interface type='hostdev'>`` for a NIC VF.
  A VF carrying an NVIDIA vendor-VFIO vGPU (``nvidia/current_vgpu_type`` not 0) is what
  "vGPU id" means for per-VF vGPUs; it is rendered ``managed='no'`` because the host driver must
  keep the VF bound.
"""

from __future__ import annotations

import msgspec

from .. import naming
from ..errors import InvalidInput, NotFound, Unsupported
from ..host import BDF_RE, DRIVER, IOMMU_GROUP, MDEV_TYPE, Host
from ..libvirt.domain import Device, HostdevInterface, MdevHostdev, PciAddress, PciHostdev
from ..naming import NvmlSource
from ..pci import Scan, read_device


class AttachTarget(msgspec.Struct, frozen=True):
    """A device on this host that can be handed to a VM."""

    name: str  # as the user typed it
    kind: str  # pci | mdev
    bdf: str | None = None  # PCI devices
    uuid: str | None = None  # mdevs
    parent: str | None = None  # mdev parent (BDF or e.g. "mtty")
    mdev_type: str | None = None
    driver: str | None = None
    iommu_group: int | None = None
    numa_node: int | None = None
    is_vf: bool = False
    is_nic: bool = False
    vgpu_type: str | None = None  # vendor-VFIO vGPU type id on a VF
    console: bool = False  # the console display device (boot_vga)

    @property
    def key(self) -> str:
        return f"mdev:{self.uuid}" if self.kind == "mdev" else f"pci:{self.bdf}"

    @property
    def label(self) -> str:
        return (self.uuid if self.kind == "mdev" else self.bdf) or self.name

    @property
    def managed(self) -> bool:
        """libvirt may rebind the device itself unless the host must keep its driver (vGPU VF)."""
        return self.kind == "pci" and self.vgpu_type is None

    def element(self, *, mac: str | None = None, vlan: int | None = None, managed: bool | None = None) -> Device:
        """The libvirt element for this device."""
        if self.kind == "mdev":
            if mac is not None or vlan is not None:
                raise InvalidInput(f"--mac/--vlan apply to NIC VFs, not to mdev {self.uuid}")
            assert self.uuid is not None
            return MdevHostdev(uuid=self.uuid)
        assert self.bdf is not None
        addr = PciAddress.from_bdf(self.bdf)
        keep = self.managed if managed is None else managed
        if self.is_nic and self.is_vf:
            return HostdevInterface(address=addr, mac=mac, vlan=vlan, managed=keep)
        if mac is not None or vlan is not None:
            raise InvalidInput(f"--mac/--vlan apply to NIC VFs; {self.bdf} is not one", device=self.bdf)
        return PciHostdev(address=addr, managed=keep)


def read_mdev(host: Host, uuid: str, name: str | None = None) -> AttachTarget:
    d = host.mdev_device(uuid)
    if not host.exists(d):
        raise NotFound(f"no mdev {uuid} (nothing at {host.display(d)})", device=uuid, hint="see: vgpukit mdev list")
    parent = host.resolve(d).parent.name
    group = host.link_name(d / IOMMU_GROUP)
    numa = None
    if BDF_RE.match(parent):
        numa = host.read_int(host.pci_device(parent, "numa_node"))
        numa = numa if numa is not None and numa >= 0 else None
    return AttachTarget(
        name=name or uuid,
        kind="mdev",
        uuid=uuid,
        parent=parent,
        mdev_type=host.link_name(d / MDEV_TYPE),
        driver=host.link_name(d / DRIVER),
        iommu_group=int(group) if group and group.isdigit() else None,
        numa_node=numa,
    )


def read_pci(host: Host, bdf: str, name: str | None = None, scan: Scan | None = None) -> AttachTarget:
    dev = scan.device(bdf) if scan is not None else read_device(host, bdf)
    vgpu = host.read_opt(host.pci_device(bdf, "nvidia", "current_vgpu_type"))
    return AttachTarget(
        name=name or bdf,
        kind="pci",
        bdf=bdf,
        driver=dev.driver,
        iommu_group=dev.iommu_group,
        numa_node=dev.numa_node,
        is_vf=dev.is_vf,
        is_nic=dev.kind == "nic",
        vgpu_type=vgpu if vgpu not in (None, "", "0") else None,
        console=dev.boot_vga,
    )


def resolve(host: Host, name: str, nvml: NvmlSource = None, *, scan: Scan | None = None) -> AttachTarget:
    """The device a user named (see :mod:`vgpukit.naming`), read from the host. NotFound / InvalidInput otherwise."""
    if naming.form_of(name) == "mig-uuid":
        raise Unsupported(
            f"{name.strip()} is a MIG slice: MIG slices go to containers (vgpukit cdi generate), not to VMs",
            device=name.strip(),
            hint="give a VM the whole GPU (gpuN) or a vGPU instead",
        )
    t = naming.resolve(host, name, frozenset({naming.PCI, naming.MDEV}), nvml=nvml, scan=scan)
    if t.kind == naming.MDEV:
        assert t.uuid is not None
        return read_mdev(host, t.uuid, name)
    assert t.bdf is not None
    return read_pci(host, t.bdf, name, scan)
