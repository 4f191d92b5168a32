"""Mediated devices as the kernel shows them, and the two kernel writes (create, remove).

Everything goes through :class:`vgpukit.host.Host`; kernel errors come back as typed errors with a
message that says what to do.
"""

from __future__ import annotations

import errno
import os

from ..errors import Busy, Conflict, InvalidInput, NoCapacity, NotFound, VgpukitError
from ..holders import group_holders
from ..host import Host
from ..pci import BDF_RE
from .model import MdevInstance, MdevParent, MdevType, check_attr_name, check_uuid


def parent_names(host: Host) -> list[str]:
    return host.listdir(host.sys("class", "mdev_bus"))


def read_type(host: Host, parent: str, type_id: str) -> MdevType:
    d = host.sys("class", "mdev_bus", parent, "mdev_supported_types", type_id)
    return MdevType(
        parent=parent,
        type_id=type_id,
        name=host.read_opt(d / "name"),
        description=host.read_opt(d / "description"),
        device_api=host.read_opt(d / "device_api"),
        available=host.read_int(d / "available_instances", 0, 10) or 0,
    )


def read_parent(host: Host, name: str) -> MdevParent:
    d = host.sys("class", "mdev_bus", name)
    if not host.exists(d):
        raise NotFound(f"no mdev parent {name}", device=name, hint="see: vgpukit mdev types")
    numa = host.read_int(d / "numa_node")
    types = tuple(read_type(host, name, t) for t in host.listdir(d / "mdev_supported_types"))
    return MdevParent(
        name=name,
        is_pci=bool(BDF_RE.match(name)),
        numa_node=numa if numa is not None and numa >= 0 else None,
        types=types,
    )


def parents(host: Host) -> list[MdevParent]:
    return [read_parent(host, n) for n in parent_names(host)]


def _parent_by_path(host: Host) -> dict[str, str]:
    return {os.path.realpath(host.sys("class", "mdev_bus", n)): n for n in parent_names(host)}


def instances(host: Host, with_holders: bool = True) -> list[MdevInstance]:
    """Every active mdev instance on the host."""
    by_path = _parent_by_path(host)
    rows: list[tuple[str, str, str, int | None]] = []
    base = host.sys("bus", "mdev", "devices")
    for uid in host.listdir(base):
        link = base / uid
        real = os.path.realpath(link)
        parent = by_path.get(os.path.dirname(real), os.path.basename(os.path.dirname(real)))
        type_id = host.link_name(link / "mdev_type") or "?"
        group = host.link_name(link / "iommu_group")
        rows.append((uid, parent, type_id, int(group) if group and group.isdigit() else None))
    holders = group_holders(host, {g for *_, g in rows if g is not None}) if with_holders else {}
    return [
        MdevInstance(
            uuid=u, parent=p, type_id=t, iommu_group=g, holders=tuple(holders.get(g, []) if g is not None else [])
        )
        for u, p, t, g in rows
    ]


def find_instance(host: Host, uid: str) -> MdevInstance | None:
    uid = check_uuid(uid)
    return next((i for i in instances(host) if i.uuid == uid), None)


def create(host: Host, parent: str, type_id: str, uid: str) -> None:
    """Write ``uid`` to the type's ``create``; kernel errors become errors that say what to do."""
    path = host.sys("class", "mdev_bus", parent, "mdev_supported_types", type_id, "create")
    if not host.exists(path):
        raise NotFound(f"parent {parent} has no mdev type {type_id}", device=parent, hint="see: vgpukit mdev types")
    try:
        host.write(path, uid)
    except VgpukitError as err:
        raise _create_error(err, parent, type_id, uid) from err


def _create_error(err: VgpukitError, parent: str, type_id: str, uid: str) -> VgpukitError:
    code = err.errno
    new: VgpukitError
    if code == errno.EEXIST:
        new = Conflict(f"an mdev with UUID {uid} already exists", hint="pick another --uuid or omit it")
    elif code in (errno.ENOSPC, errno.EUSERS):
        new = NoCapacity(
            f"no capacity left for {type_id} on {parent}",
            hint="remove instances or use another parent (see: vgpukit mdev types)",
        )
    elif code == errno.EINVAL:
        new = InvalidInput(f"{parent} refused to create {type_id} {uid} (EINVAL)")
    elif code == errno.ENODEV:
        new = NotFound(f"mdev parent {parent} is not registered (ENODEV)", hint="is its driver loaded?")
    else:
        return err
    new.device, new.path, new.errno, new.value = parent, err.path, code, uid
    return new


def remove(host: Host, uid: str) -> None:
    path = host.sys("bus", "mdev", "devices", uid, "remove")
    if not host.exists(host.sys("bus", "mdev", "devices", uid)):
        raise NotFound(f"no active mdev {uid}", value=uid, hint="see: vgpukit mdev list")
    try:
        host.write(path, "1")
    except VgpukitError as err:
        if err.errno == errno.EBUSY:
            raise Busy(
                f"mdev {uid} is in use; the kernel refused to remove it",
                hint="stop or detach the VM using it first",
                errno=err.errno,
                value=uid,
            ) from err
        raise


def write_attr(host: Host, uid: str, attr: str, value: str) -> None:
    """Set a vendor attribute of an instance (mdevctl ``attrs``), e.g. ``nvidia/vgpu_params``; never a
    kernel control file (``remove``...)."""
    host.write(host.sys("bus", "mdev", "devices", check_uuid(uid), *check_attr_name(attr).split("/")), value)
