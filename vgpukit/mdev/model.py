"""Records of mediated devices (plain data, no I/O) and input validation."""

from __future__ import annotations

import re
import uuid as _uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InvalidInput
from ..holders import Holder

PACK, SPREAD = "pack", "spread"  # placement strategies of 'mdev create' (mdev.placement)

# Whole-string matches (re.fullmatch): a "$" anchor would let a trailing newline through.
TYPE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}")
PARENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}")
# A vendor attribute of an instance: NAME or VENDOR_DIR/NAME below /sys/bus/mdev/devices/<uuid>/.
ATTR_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(/[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?")
# What the kernel itself puts in every device directory (control files, links to the driver, bus,
# group, type): writing one of them is not setting a vendor attribute ("remove" would delete the
# device, "driver/unbind" would unbind it).
KERNEL_ENTRIES = frozenset(
    {
        "remove",
        "create",
        "uevent",
        "bind",
        "unbind",
        "new_id",
        "remove_id",
        "driver",
        "driver_override",
        "subsystem",
        "iommu_group",
        "mdev_type",
        "power",
        "firmware_node",
        "modalias",
        "device",
    }
)
START_MODES = ("auto", "manual")


def check_uuid(text: str) -> str:
    """The canonical lower-case form of an mdev UUID (36 chars); InvalidInput otherwise."""
    t = text.strip()
    try:
        canon = str(_uuid.UUID(t))
    except ValueError:
        canon = ""
    if len(t) != 36 or canon != t.lower():
        raise InvalidInput(
            f"invalid mdev UUID {text!r}: expected 36 characters like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            value=text,
        )
    return canon


def new_uuid() -> str:
    return str(_uuid.uuid4())


def check_type_id(text: str) -> str:
    if not TYPE_ID_RE.fullmatch(text):
        raise InvalidInput(f"invalid mdev type id {text!r}: expected e.g. mtty-2 or nvidia-232", value=text)
    return text


def check_parent_name(text: str) -> str:
    if not PARENT_RE.fullmatch(text):
        raise InvalidInput(f"invalid mdev parent name {text!r}", value=text)
    return text


def check_attr_name(text: str) -> str:
    """A plain vendor attribute (``nvidia/vgpu_params``): no kernel control file, no ``..``, no absolute path."""
    if not ATTR_RE.fullmatch(text) or any(part in KERNEL_ENTRIES for part in text.split("/")):
        raise InvalidInput(
            "invalid mdev attribute name: expected a vendor attribute like nvidia/vgpu_params"
            " (kernel control files such as remove, '..' and absolute paths are refused)"
        )
    return text


@dataclass(frozen=True)
class MdevType:
    parent: str
    type_id: str
    name: str | None
    description: str | None
    device_api: str | None
    available: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MdevParent:
    name: str  # mdev_bus name: a BDF or e.g. "mtty"
    is_pci: bool
    numa_node: int | None
    types: tuple[MdevType, ...]

    def type(self, type_id: str) -> MdevType | None:
        return next((t for t in self.types if t.type_id == type_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "parent": self.name,
            "pci": self.is_pci,
            "numa_node": self.numa_node,
            "types": [t.to_dict() for t in self.types],
        }


@dataclass(frozen=True)
class MdevInstance:
    uuid: str
    parent: str
    type_id: str
    iommu_group: int | None
    holders: tuple[Holder, ...] = ()

    @property
    def in_use(self) -> bool:
        return bool(self.holders)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "parent": self.parent,
            "type": self.type_id,
            "iommu_group": self.iommu_group,
            "in_use": self.in_use,
            "used_by": [asdict(h) for h in self.holders],
        }


@dataclass(frozen=True)
class Definition:
    """A persistent definition in mdevctl's format (``/etc/mdevctl.d/<parent>/<uuid>``)."""

    uuid: str
    parent: str
    type_id: str
    start: str = "manual"  # auto | manual
    attrs: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def auto(self) -> bool:
        return self.start == "auto"

    def to_mdevctl(self) -> dict[str, Any]:
        return {"mdev_type": self.type_id, "start": self.start, "attrs": [{k: v} for k, v in self.attrs]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "parent": self.parent,
            "type": self.type_id,
            "start": self.start,
            "attrs": [{k: v} for k, v in self.attrs],
        }
