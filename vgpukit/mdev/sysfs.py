"""Mediated devices as the kernel shows them, and the two kernel writes (create, remove).

Everything goes through :class:`vgpukit.host.Host`; kernel errors come back as typed errors with a
message that says what to do.
"""

from __future__ import annotations

import errno
import os

from ..errors import Busy, Conflict, InvalidInput, NoCapacity, NotFound, VgpukitError
from ..holders import Holder, OpenFiles, callers, device_users
from ..host import BDF_RE, IOMMU_GROUP, MDEV_TYPE, MDEV_TYPES, Host
from .model import MdevInstance, MdevParent, MdevType, check_attr_name, check_uuid


def parent_names(host: Host) -> list[str]:
    return host.listdir(host.mdev_parents())


def available(host: Host, parent: str, type_id: str) -> int:
    """How many more instances of ``type_id`` the kernel says fit on ``parent`` now."""
    return host.read_int(host.mdev_type(parent, type_id, "available_instances"), 0, 10) or 0


def read_type(host: Host, parent: str, type_id: str) -> MdevType:
    d = host.mdev_type(parent, type_id)
    return MdevType(
        parent=parent,
        type_id=type_id,
        name=host.read_opt(d / "name"),
        description=host.read_opt(d / "description"),
        device_api=host.read_opt(d / "device_api"),
        available=available(host, parent, type_id),
    )


def read_parent(host: Host, name: str) -> MdevParent:
    d = host.mdev_parent(name)
    if not host.exists(d):
        raise NotFound(f"no mdev parent {name}", device=name, hint="see: vgpukit mdev types")
    numa = host.read_int(d / "numa_node")
    types = tuple(read_type(host, name, t) for t in host.listdir(d / MDEV_TYPES))
    return MdevParent(
        name=name,
        is_pci=bool(BDF_RE.match(name)),
        numa_node=numa if numa is not None and numa >= 0 else None,
        types=types,
    )


def parents(host: Host) -> list[MdevParent]:
    return [read_parent(host, n) for n in parent_names(host)]


def _target(host: Host, link: str) -> str | None:
    """Where a sysfs link leads, as a normalised path (one readlink; sysfs directories are real)."""
    target = host.readlink(link)
    return os.path.normpath(os.path.join(os.path.dirname(link), target)) if target else None


def _parent_by_path(host: Host) -> dict[str, str]:
    base = host.mdev_parents()
    return {t: n for n in parent_names(host) if (t := _target(host, f"{base}/{n}"))}


def _instance(host: Host, uid: str, by_path: dict[str, str]) -> tuple[str, str, str, int | None] | None:
    """(uuid, parent, type, IOMMU group) of one instance, from its three links; None when absent."""
    link = str(host.mdev_device(uid))
    where = _target(host, link)
    if where is None:
        return None
    parent_dir = os.path.dirname(where)
    parent = by_path.get(parent_dir) or by_path.get(os.path.realpath(parent_dir)) or os.path.basename(parent_dir)
    type_id = host.link_name(f"{link}/{MDEV_TYPE}") or "?"
    group = host.link_name(f"{link}/{IOMMU_GROUP}")
    return uid, parent, type_id, int(group) if group and group.isdigit() else None


def _users(host: Host, files: OpenFiles, calling: set[int], uid: str, group: int | None) -> tuple[Holder, ...]:
    """Who uses instance ``uid``: the processes holding its VFIO group node or its VFIO cdev
    (``vfio-dev/vfioN``), except this command's callers that are not VMs (holders.device_users)."""
    found = files.group(group) if group is not None else []
    cdevs = host.mdev_device(uid, "vfio-dev")
    if host.exists(cdevs):
        for name in host.listdir(cdevs):
            found = found + files.holders(host.display(host.dev("vfio", "devices", name)))
    return tuple(device_users(list(dict.fromkeys(found)), calling))


def _with_holders(host: Host, rows: list[tuple[str, str, str, int | None]], holders: bool) -> list[MdevInstance]:
    files, calling = (OpenFiles(host), callers(host)) if holders else (None, set())
    return [
        MdevInstance(
            uuid=u, parent=p, type_id=t, iommu_group=g, holders=_users(host, files, calling, u, g) if files else ()
        )
        for u, p, t, g in rows
    ]


def instances(host: Host, with_holders: bool = True) -> list[MdevInstance]:
    """Every active mdev instance on the host."""
    by_path = _parent_by_path(host)
    rows = [r for uid in host.listdir(host.mdev_devices()) if (r := _instance(host, uid, by_path))]
    return _with_holders(host, rows, with_holders)


def find_instance(host: Host, uid: str) -> MdevInstance | None:
    """One active instance (only its own links are read), or None."""
    uid = check_uuid(uid)
    row = _instance(host, uid, _parent_by_path(host))
    return _with_holders(host, [row], True)[0] if row else None


def create(host: Host, parent: str, type_id: str, uid: str) -> None:
    """Write ``uid`` to the type's ``create``; kernel errors become errors that say what to do."""
    path = host.mdev_type(parent, type_id, "create")
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
    path = host.mdev_device(uid, "remove")
    if not host.exists(host.mdev_device(uid)):
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
    host.write(host.mdev_device(check_uuid(uid), *check_attr_name(attr).split("/")), value)
