"""Moving one PCI function between drivers, and remembering where it came from.

The kernel's recipe (seen on a real kernel): ``driver_override`` alone does not move a bound
device; vgpukit writes the override, unbinds from the current driver, then asks the driver core to
probe (``drivers_probe``). The original driver and override are remembered in
``/run/vgpukit/bind/<bdf>.json`` (through the host door) so ``bind --restore`` can put them back,
and so the undo of a failed command can.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..errors import NotFound, VerifyFailed
from ..host import Host
from ..pci import iommu_group_members, read_device
from .txn import Transaction

VFIO = "vfio-pci"


@dataclass(frozen=True)
class Remembered:
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
    value = host.read_opt(host.pci_device(bdf, "driver_override"))
    return None if value in (None, "", "(null)") else value


def remembered(host: Host, bdf: str) -> Remembered | None:
    text = host.read_opt(host.state_dir("bind", f"{bdf}.json"))
    if not text:
        return None
    try:
        data = json.loads(text)
        return Remembered(bdf, data.get("driver"), data.get("override"), bool(data.get("probe", False)))
    except (ValueError, AttributeError):
        return None


def remember(host: Host, rec: Remembered) -> None:
    host.write_file(host.state_dir("bind", f"{rec.bdf}.json"), json.dumps(asdict(rec), indent=1) + "\n")


def forget(host: Host, bdf: str) -> None:
    host.remove(host.state_dir("bind", f"{bdf}.json"))


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
        host.write(host.sys("bus", "pci", "drivers_probe"), rec.bdf)


def require_driver(host: Host, driver: str) -> None:
    if not host.is_dir(host.pci_driver(driver)):
        hint = f"modprobe {driver}" if driver == VFIO else None
        raise NotFound(f"driver {driver} is not loaded", value=driver, hint=hint)


def group_warnings(host: Host, bdf: str, also_moving: frozenset[str] = frozenset()) -> list[str]:
    """Members of ``bdf``'s IOMMU group that would keep the group from being usable through VFIO."""
    dev = read_device(host, bdf)
    if dev.iommu_group is None:
        return [f"{bdf} has no IOMMU group: is the IOMMU enabled (intel_iommu=on / amd_iommu=on)?"]
    out = []
    for member in iommu_group_members(host, dev.iommu_group):
        if member == bdf or member in also_moving:
            continue
        other = read_device(host, member)
        if other.kind == "bridge" or other.driver in (None, VFIO):
            continue
        out.append(
            f"IOMMU group {dev.iommu_group} also holds {member} (bound to {other.driver}): VFIO hands out whole "
            f"groups, so bind it to {VFIO} too (or unbind it) before giving the group to a VM"
        )
    return out


def bind_to(host: Host, txn: Transaction, bdf: str, driver: str, probe_on_restore: bool = False) -> bool:
    """Move ``bdf`` to ``driver`` (override + unbind + drivers_probe). False when it was there already."""
    cur, override = current_driver(host, bdf), current_override(host, bdf)
    if cur == driver:
        return False
    require_driver(host, driver)
    original = Remembered(bdf, cur, override, probe=probe_on_restore and cur is None)
    if remembered(host, bdf) is None:
        txn.on_failure(f"forget {bdf}'s original driver", lambda: forget(host, bdf))
        remember(host, original)
    txn.on_failure(f"put {bdf} back on {original.describe()}", lambda: put_back(host, original))
    set_override(host, bdf, driver)
    if cur:
        host.write(host.pci_driver(cur, "unbind"), bdf)
    host.write(host.sys("bus", "pci", "drivers_probe"), bdf)
    now = current_driver(host, bdf)
    if now != driver:
        raise VerifyFailed(
            f"{bdf} is bound to {now or 'no driver'} after drivers_probe, not {driver}",
            device=bdf,
            hint=f"check dmesg; is {driver} able to drive this device?",
        )
    txn.record(f"bound {bdf} to {driver}" + (f" (was {cur})" if cur else ""))
    return True


def unbind_from(host: Host, txn: Transaction, bdf: str) -> bool:
    """Unbind ``bdf`` from its driver, remembering it. False when it had none."""
    cur, override = current_driver(host, bdf), current_override(host, bdf)
    if cur is None:
        return False
    original = Remembered(bdf, cur, override)
    if remembered(host, bdf) is None:
        txn.on_failure(f"forget {bdf}'s original driver", lambda: forget(host, bdf))
        remember(host, original)
    txn.on_failure(f"rebind {bdf} to {cur}", lambda: put_back(host, original))
    host.write(host.pci_driver(cur, "unbind"), bdf)
    txn.record(f"unbound {bdf} from {cur}")
    return True


def restore(host: Host, txn: Transaction, bdf: str) -> Remembered:
    """Put ``bdf`` back on its remembered driver (or the kernel's choice when nothing is remembered)."""
    rec = remembered(host, bdf) or Remembered(bdf, None, None, probe=True)
    before = Remembered(bdf, current_driver(host, bdf), current_override(host, bdf))
    if satisfied(rec, before.driver, before.override):
        forget(host, bdf)
        return rec
    txn.on_failure(f"put {bdf} back on {before.describe()}", lambda: put_back(host, before))
    put_back(host, rec)
    if rec.driver and current_driver(host, bdf) != rec.driver:
        raise VerifyFailed(f"{bdf} did not go back to {rec.driver}", device=bdf, hint="check dmesg")
    forget(host, bdf)
    txn.record(f"restored {bdf} to {rec.describe()}")
    return rec
