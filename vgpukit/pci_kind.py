"""What kind of device a PCI function is (GPU, NIC, NVMe...), and the three sysfs attributes that say it.

:func:`read_kind` is what the device aliases (``gpuN``/``nicN``/``nvmeN``, :func:`vgpukit.naming.aliases`)
need of each function: a command that shows only aliases (``mig status``) reads these instead of the
whole device (:func:`vgpukit.pci.read_device`); :class:`vgpukit.pci.Scan` keeps either for the command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import NotFound
from .host import BOOT_VGA, CONFIG, PHYSFN

if TYPE_CHECKING:
    from .host import Host

NVIDIA = 0x10DE
BMC_VENDORS = frozenset({0x1A03})  # ASPEED: BMC video only, never a GPU anyone computes on


def kind_of(class_code: int, vendor: int, boot_vga: bool = False) -> str:
    """``gpu``, ``display`` (a console: the firmware's boot VGA device or a BMC's VGA controller --
    an NVIDIA GPU that is the console stays a ``gpu``, NVML counts it), ``nic``, ``nvme``,
    ``bridge`` or ``other``."""
    base, sub = class_code >> 16, (class_code >> 8) & 0xFF
    if base == 0x03:
        return "display" if vendor != NVIDIA and (boot_vga or vendor in BMC_VENDORS) else "gpu"
    if base == 0x02:
        return "nic"
    if base == 0x01 and sub == 0x08:
        return "nvme"
    if base == 0x06 and sub in (0x04, 0x09):
        return "bridge"
    return "other"


def hex_id(text: str | None) -> str:
    """A vendor/device ID as sysfs writes it (``0x10de``) in the records' form (``10de``)."""
    if not text:
        return "0000"
    return text.lower().removeprefix("0x").zfill(4)


def read_kind(host: Host, bdf: str) -> tuple[str, str] | None:
    """(vendor, kind) of the function ``bdf`` as :func:`vgpukit.pci.read_device` would give them, or
    None for a VF (it has a ``physfn`` link); one listing and two or three reads."""
    d = host.pci_device(bdf)
    entries = set(host.listdir(d))
    if not entries:
        raise NotFound(f"no PCI device {bdf}", device=bdf, path=host.display(d))
    if PHYSFN in entries:
        return None
    base = f"{d}/"
    vendor = hex_id(host.read_opt(base + "vendor") if "vendor" in entries else None)
    class_code = (host.read_int(base + "class", None) if "class" in entries else None) or 0
    boot_vga = BOOT_VGA in entries and host.read_opt(base + BOOT_VGA) == "1"
    return vendor, kind_of(class_code, int(vendor, 16), boot_vga)


HEADER_TYPE_OFFSET = 0x0E  # the configuration-space byte naming the header layout (bit 7: multi-function)
HEADER_NORMAL = 0  # a normal endpoint; 1: a PCI-to-PCI bridge, 2: a CardBus bridge


def header_type(host: Host, bdf: str) -> int | None:
    """The function's configuration-space header type (0 endpoint, 1 PCI bridge, 2 CardBus bridge),
    from its ``config`` file; None when that cannot be read (read on demand: not part of a :class:`Scan`)."""
    data = host.read_bytes_opt(host.pci_device(bdf, CONFIG), HEADER_TYPE_OFFSET + 1)
    if data is None or len(data) <= HEADER_TYPE_OFFSET:
        return None
    return data[HEADER_TYPE_OFFSET] & 0x7F


def vgpu_type(host: Host, vf: str) -> int:
    """The vGPU type id set on a VF by NVIDIA's vendor-specific VFIO (``nvidia/current_vgpu_type``;
    0: none, or not such a VF): the one read of it, for the vgpu area and the CDI collector."""
    return host.read_int(host.pci_device(vf, "nvidia", "current_vgpu_type"), 0, 10) or 0
