"""Moving one PCI function between drivers, and remembering where it came from.

The kernel's recipe (seen on a real kernel): ``driver_override`` alone does not move a bound
device; vgpukit writes the override, unbinds from the current driver, then asks the driver core to
probe (``drivers_probe``). The original driver and override are remembered in
``/run/vgpukit/bind/<bdf>.json`` (through the host door) so ``bind --restore`` can put them back,
and so the undo of a failed command can.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from ..errors import InvalidInput, NotFound
from ..host import Host
from ..inputs import has_control, load_json

VFIO = "vfio-pci"
DRIVER_MODES = ("default", VFIO, "none")  # what `sriov enable --driver` accepts


class Remembered(msgspec.Struct, frozen=True):
    """How to put a device back: its original driver and override; ``probe``: let the kernel choose."""

    bdf: str
    driver: str | None
    override: str | None
    probe: bool = False

    def describe(self) -> str:
        if self.driver:
            return self.driver
        return "the kernel's default driver" if self.probe else "no driver"


def current_driver(host: Host, bdf: str) -> str | None:
    return host.link_name(host.pci_device(bdf, "driver"))


def current_override(host: Host, bdf: str) -> str | None:
    return override_value(host.read_opt(host.pci_device(bdf, "driver_override")))


def override_value(text: str | None) -> str | None:
    """``driver_override`` as read (None: absent) -> the override, or None when there is none."""
    return None if text in (None, "", "(null)") else text


def record_path(host: Host, bdf: str) -> Path:
    return host.state_dir("bind", f"{bdf}.json")


def remembered(host: Host, bdf: str) -> Remembered | None:
    """The bind record of ``bdf``; a record that cannot be read is refused (exit 2), never guessed."""
    text = host.read_raw_opt(record_path(host, bdf))
    return None if text is None else parse_record(host, bdf, text)


def parse_record(host: Host, bdf: str, text: str) -> Remembered:
    """The bind record ``text`` of ``bdf`` (as read or written); refused (exit 2) when it is not one."""
    where = host.display(record_path(host, bdf))
    doc = load_json(text, where)
    if not isinstance(doc, dict) or set(doc) - {"bdf", "driver", "override", "probe"}:
        raise InvalidInput(f"{where}: not a bind record", path=where, hint=_CORRUPT_HINT)
    driver, override, probe = doc.get("driver"), doc.get("override"), doc.get("probe", False)
    for value in (driver, override):
        if value is not None and (not isinstance(value, str) or not value or has_control(value) or "/" in value):
            raise InvalidInput(f"{where}: not a bind record (bad driver name)", path=where, hint=_CORRUPT_HINT)
    if not isinstance(probe, bool):
        raise InvalidInput(f"{where}: not a bind record (probe must be true or false)", path=where, hint=_CORRUPT_HINT)
    return Remembered(bdf, driver, override, probe)


_CORRUPT_HINT = "bind the device yourself (vgpukit bind DEVICE --driver NAME), then remove the record"


def remembered_lenient(host: Host, bdf: str) -> Remembered | None:
    """Like :func:`remembered`, but a corrupt record reads as none (for display and planning)."""
    try:
        return remembered(host, bdf)
    except InvalidInput:
        return None


def record_text(rec: Remembered) -> str:
    """The bind record of ``rec.bdf``, as :func:`remember` writes it."""
    return json.dumps(msgspec.to_builtins(rec), indent=1) + "\n"


def remember(host: Host, rec: Remembered) -> str:
    """Write the bind record of ``rec.bdf``; its text."""
    text = record_text(rec)
    host.write_file(record_path(host, rec.bdf), text)
    return text


def forget(host: Host, bdf: str) -> None:
    host.remove(record_path(host, bdf))


def set_override(host: Host, bdf: str, value: str | None) -> None:
    """Write ``driver_override``; None clears it (the kernel wants a newline, not an empty write)."""
    if current_override(host, bdf) != value:
        host.write(host.pci_device(bdf, "driver_override"), value or "\n")


def satisfied(rec: Remembered, driver: str | None, override: str | None) -> bool:
    """Is a device on ``driver`` with ``override`` already where ``rec`` says it belongs?"""
    if override != rec.override:
        return False
    if rec.driver:
        return driver == rec.driver
    if rec.probe:  # "the kernel's choice": any driver the kernel picked by itself
        return driver not in (None, VFIO)
    return driver is None


def put_back(host: Host, rec: Remembered) -> None:
    """Best effort to reach ``rec``'s state from whatever state the device is in now."""
    set_override(host, rec.bdf, rec.override)
    cur = current_driver(host, rec.bdf)
    if satisfied(rec, cur, rec.override):
        return
    if cur:
        host.write(host.pci_driver(cur, "unbind"), rec.bdf)
    if rec.driver and host.exists(host.pci_driver(rec.driver, "bind")):
        host.write(host.pci_driver(rec.driver, "bind"), rec.bdf)
    elif rec.driver or rec.probe:
        host.write(host.pci_drivers_probe(), rec.bdf)


def require_driver(host: Host, driver: str) -> None:
    if not host.is_dir(host.pci_driver(driver)):
        hint = f"modprobe {driver}" if driver == VFIO else None
        raise NotFound(f"driver {driver} is not loaded", value=driver, hint=hint)


def group_warnings(host: Host, bdf: str, also_moving: frozenset[str] = frozenset()) -> list[str]:
    """Members of ``bdf``'s IOMMU group that would keep the group from being usable through VFIO, and
    the VFs of a PF (``bdf``) that stay enabled under it."""
    from .. import iommu
    from ..host import IOMMU_GROUP

    numvfs = (host.read_opt(host.pci_device(bdf, "sriov_numvfs")) or "").strip()
    vfs = [pf_with_vfs(bdf, int(numvfs))] if numvfs.isdigit() and int(numvfs) else []
    group = host.link_name(host.pci_device(bdf, IOMMU_GROUP))
    if group is None or not group.isdigit():
        return [f"{bdf} has no IOMMU group: is the IOMMU enabled (intel_iommu=on / amd_iommu=on)?", *vfs]
    return vfs + [
        f"IOMMU group {group} also holds {b.bdf} (bound to {b.driver}): VFIO hands out whole "
        f"groups, so bind it to {VFIO} too (or unbind it) before giving the group to a VM"
        for b in iommu.blockers(host, int(group), {bdf, *also_moving})
    ]


def pf_with_vfs(bdf: str, numvfs: int) -> str:
    """The one warning about a PF with VFs enabled given to VFIO (bind) or offered to VMs (KubeVirt):
    a VM holding the PF can reset it, and its VFs with it (docs/sriov.md)."""
    return (
        f"{bdf} is a PF with {numvfs} VFs enabled: a VM given the PF can reset it and its VFs with it (and"
        f" many PF drivers take the VFs down when unbound); disable them first"
        f" (vgpukit sriov disable {bdf}) to give the PF to a VM"
    )
