"""mdevctl's refusals in mdevctl's words, for ``vgpukit mdev --mdevctl`` (the shim): scripts and libvirt
read them. vgpukit's own ``mdev`` commands keep vgpukit's messages and rules (an active device is
"nothing to do" there); docs/mdev.md, "mdevctl's answers", has the table.

The order is mdevctl's when it starts a device: the UUID already running, then the parent, then the
type, then the room left.
"""

from __future__ import annotations

from ..host import Host
from . import sysfs
from .model import Definition


def missing_parent(host: Host, parent: str) -> str | None:
    """``Unable to find parent device 'P'`` (with ``Did you mean 'p'?`` when only the case differs),
    or None when the parent is present."""
    names = sysfs.parent_names(host)
    if parent in names:
        return None
    msg = f"Unable to find parent device '{parent}'"
    similar = next((n for n in sorted(names) if n.lower() == parent.lower()), None)
    return f"{msg}. Did you mean '{similar}'?" if similar else msg


def start_refusal(host: Host, d: Definition) -> str | None:
    """Why mdevctl's ``start`` of ``d`` fails before it writes anything, or None."""
    running = sysfs.find_instance(host, d.uuid)
    if running is not None:
        if running.parent != d.parent:
            return "Device exists under different parent"
        if running.type_id != d.type_id:
            return "Device exists with different type"
        return "Device already exists"
    gone = missing_parent(host, d.parent)
    if gone:
        return gone
    if not host.exists(host.mdev_type(d.parent, d.type_id)):
        return f"Parent {d.parent} does not support mdev type {d.type_id}"
    if sysfs.available(host, d.parent, d.type_id) == 0:
        return f"No available instances of {d.type_id} on {d.parent}"
    return None
