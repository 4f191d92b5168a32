"""Kernel reactions for mediated devices: create / remove with a capacity pool shared by types.

Each parent has a pool of capacity units; a type costs some units (mtty: 24 ports, mtty-1 costs 1,
mtty-2 costs 2, seen on a real kernel). ``available_instances`` of every type is recomputed after
each change. A ``homogeneous`` pool (legacy NVIDIA vGPU) admits one type at a time.

The kernel state keeps each parent's instance count per type (``counts``), so a create or remove
costs the same with 10 or 10,000 instances on the parent (the tree is listed once, for a pool saved
by an older simulator without counts).
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any

from .files import read_attr
from .holders import holders_of
from .kernel import Reaction, Write, fail
from .tree import WO, SimTree
from .uevents import announce, devpath, event, vfio_group

UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def mdev_bus(w: Write) -> Path:
    return w.root / "sys" / "bus" / "mdev"


def _parent_of_types(types_dir: Path, w: Write) -> str | None:
    """The mdev_bus name of a parent directory, found through /sys/class/mdev_bus links."""
    cls = w.root / "sys" / "class" / "mdev_bus"
    real = w.tree.resolve(types_dir.parent)
    if w.tree.resolve(cls / types_dir.parent.name) == real:
        return types_dir.parent.name  # the usual case: a parent is registered under its device name
    for name in os.listdir(cls) if cls.is_dir() else []:
        if w.tree.resolve(cls / name) == real:
            return name
    return None


def instances(parent_dir: Path) -> list[tuple[str, str]]:
    """(uuid, type) of the parent's instances."""
    out = []
    for entry in sorted(parent_dir.iterdir()):
        if UUID_RE.match(entry.name) and os.path.lexists(entry / "mdev_type"):
            out.append((entry.name, os.path.basename(os.readlink(entry / "mdev_type"))))
    return out


def counts(parent_dir: Path, pool: dict[str, Any]) -> dict[str, int]:
    """The parent's instance count per type, kept in the pool (listed from the tree if absent)."""
    if "counts" in pool:
        return dict(pool["counts"])
    out: dict[str, int] = {}
    for _, t in instances(parent_dir):
        out[t] = out.get(t, 0) + 1
    return out


def refresh_available(tree: SimTree, parent_dir: Path, pool: dict[str, Any]) -> None:
    present = pool["counts"]
    used = sum(pool["types"][t]["cost"] * n for t, n in present.items() if t in pool["types"])
    free = pool["pool"] - used
    kinds = {t for t, n in present.items() if n}
    for type_id, spec in pool["types"].items():
        avail = free // spec["cost"]
        if pool.get("homogeneous") and kinds and type_id not in kinds:
            avail = 0
        cap = spec.get("max_instances")
        if cap is not None:
            avail = min(avail, cap - present.get(type_id, 0))
        path = parent_dir / "mdev_supported_types" / type_id / "available_instances"
        if _read_int(path) != max(avail, 0):
            tree.set_attr(path, max(avail, 0))


def _read_int(path: Path) -> int | None:
    try:
        return int(read_attr(path))
    except (OSError, ValueError):
        return None


def _create_match(w: Write) -> bool:
    return w.path.name == "create" and w.path.parent.parent.name == "mdev_supported_types"


def create(w: Write) -> None:
    uid = w.data.rstrip("\n")
    if not UUID_RE.match(uid):
        raise fail(errno.EINVAL)
    uid = uid.lower()
    type_dir = w.path.parent
    type_id = type_dir.name
    parent_dir = type_dir.parent.parent
    parent = _parent_of_types(type_dir.parent, w)
    pool = w.state.mdev_pools.get(parent or "")
    if parent is None or pool is None:
        raise fail(errno.ENODEV)
    if os.path.lexists(mdev_bus(w) / "devices" / uid):
        raise fail(errno.EEXIST)
    if int(read_attr(type_dir / "available_instances")) < 1:
        raise fail(errno.ENOSPC)
    d = parent_dir / uid
    if os.path.lexists(d):
        raise fail(errno.EEXIST)
    present = counts(parent_dir, pool)
    w.tree.mkdir(d)
    w.tree.write_attr(d / "remove", "", WO)
    w.tree.link(d / "mdev_type", type_dir)
    w.tree.link(type_dir / "devices" / uid, d)
    w.tree.link(mdev_bus(w) / "devices" / uid, d)
    w.tree.link(d / "subsystem", mdev_bus(w))
    drivers = mdev_bus(w) / "drivers" / "vfio_mdev"
    w.tree.mkdir(drivers)
    w.tree.link(d / "driver", drivers)
    w.tree.link(drivers / uid, d)
    group = w.state.take_group()
    w.tree.join_group(uid, d, group)
    w.tree.make_devnode(w.tree.devnode("vfio", str(group)), 243, group)
    for rel, value in (pool["types"][type_id].get("attrs") or {}).items():
        w.tree.write_attr(d / rel, value)
    present[type_id] = present.get(type_id, 0) + 1
    w.state.set_counts(parent, present)
    refresh_available(w.tree, parent_dir, pool)
    path = devpath(w.root, Path(w.tree.inside(d, follow=True)))  # as Linux 6.1 announces it (seen: mtty)
    announce(w.tree, event("add", path, "mdev"), event("add", vfio_group(str(group)), "vfio"))
    announce(w.tree, event("bind", path, "mdev", DRIVER="vfio_mdev"))


def _remove_match(w: Write) -> bool:
    return (
        w.path.name == "remove"
        and bool(UUID_RE.match(w.path.parent.name))
        and (os.path.lexists(w.path.parent / "mdev_type"))
    )


def remove(w: Write) -> None:
    if w.value != "1":
        raise fail(errno.EINVAL)
    d = w.path.parent
    uid = d.name
    group = os.path.basename(os.readlink(d / "iommu_group"))
    if holders_of(w.root, group):
        raise fail(errno.EBUSY)
    type_dir = Path(os.path.realpath(d / "mdev_type"))
    parent = _parent_of_types(type_dir.parent, w)
    pool = w.state.mdev_pools[parent or ""]
    parent_dir = type_dir.parent.parent
    present = counts(parent_dir, pool)
    path = devpath(w.root, Path(w.tree.inside(d, follow=True)))
    for p in (type_dir / "devices" / uid, mdev_bus(w) / "devices" / uid, mdev_bus(w) / "drivers" / "vfio_mdev" / uid):
        w.tree.unlink(p)
    announce(w.tree, event("remove", vfio_group(group), "vfio"), event("unbind", path, "mdev"))
    announce(w.tree, event("remove", path, "mdev"))
    w.tree.leave_group(uid, d)
    w.tree.remove_tree(d)
    present[type_dir.name] = max(0, present.get(type_dir.name, 0) - 1)
    w.state.set_counts(parent or "", present)
    refresh_available(w.tree, parent_dir, pool)


REACTIONS = [
    Reaction("mdev create", _create_match, create),
    Reaction("mdev remove", _remove_match, remove),
]
