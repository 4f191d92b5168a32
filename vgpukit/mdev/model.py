"""Records of mediated devices (plain data, no I/O) and input validation."""

from __future__ import annotations

import re
from typing import Any

import msgspec

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
_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z", re.ASCII | re.IGNORECASE)


def check_uuid(text: str) -> str:
    """The canonical lower-case form of an mdev UUID (36 chars); InvalidInput otherwise."""
    t = text.strip()
    if not _UUID_RE.match(t):  # the 8-4-4-4-12 hex form only (what uuid.UUID's canonical form is)
        raise InvalidInput(
            f"invalid mdev UUID {text!r}: expected 36 characters like 83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
            value=text,
        )
    return t.lower()


def new_uuid() -> str:
    import uuid  # only to make one: a listing does not load it

    return str(uuid.uuid4())


def check_type_id(text: str) -> str:
    if not TYPE_ID_RE.fullmatch(text):
        raise InvalidInput(f"invalid mdev type id {text!r}: expected e.g. mtty-2 or nvidia-232", value=text)
    return text


TYPE_NAME_PREFIXES = ("NVIDIA ", "GRID ")  # the vendor words NVIDIA's type names start with


def short_name(name: str) -> str:
    """A type's human name in its comparable form: ``GRID T4-4Q`` / ``NVIDIA H100-4C`` / ``t4-4q`` ->
    ``T4-4Q`` / ``H100-4C`` (white space folded, the vendor's prefix word dropped, upper case)."""
    text = " ".join(name.split())
    for prefix in TYPE_NAME_PREFIXES:
        if text.upper().startswith(prefix.upper()):
            text = text[len(prefix) :]
            break
    return text.upper()


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


class MdevType(msgspec.Struct, frozen=True):
    parent: str
    type_id: str
    name: str | None
    description: str | None
    device_api: str | None
    available: int

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = msgspec.to_builtins(self)
        return d


class MdevParent(msgspec.Struct, frozen=True):
    name: str  # mdev_bus name: a BDF or e.g. "mtty"
    is_pci: bool
    numa_node: int | None
    types: tuple[MdevType, ...]

    def type(self, type_id: str) -> MdevType | None:
        return next((t for t in self.types if t.type_id == type_id), None)

    def to_dict(self) -> dict[str, Any]:  # a reshape: mdevctl-like words (parent, pci)
        return {
            "parent": self.name,
            "pci": self.is_pci,
            "numa_node": self.numa_node,
            "types": [t.to_dict() for t in self.types],
        }


class MdevInstance(msgspec.Struct, frozen=True):
    uuid: str
    parent: str
    type_id: str
    iommu_group: int | None
    holders: tuple[Holder, ...] = ()

    @property
    def in_use(self) -> bool:
        return bool(self.holders)

    def to_dict(self) -> dict[str, Any]:  # a reshape: type_id as type; adds in_use
        return {
            "uuid": self.uuid,
            "parent": self.parent,
            "type": self.type_id,
            "iommu_group": self.iommu_group,
            "in_use": self.in_use,
            "used_by": msgspec.to_builtins(self.holders),
        }


class Definition(msgspec.Struct, frozen=True):
    """A persistent definition in mdevctl's format (``/etc/mdevctl.d/<parent>/<uuid>``)."""

    uuid: str
    parent: str
    type_id: str
    start: str = "manual"  # auto | manual
    attrs: tuple[tuple[str, str], ...] = ()

    @property
    def auto(self) -> bool:
        return self.start == "auto"

    def to_mdevctl(self) -> dict[str, Any]:
        return {"mdev_type": self.type_id, "start": self.start, "attrs": [{k: v} for k, v in self.attrs]}

    def to_dict(self) -> dict[str, Any]:  # a reshape: type_id as type; attributes as mdevctl's list of one-key maps
        return {
            "uuid": self.uuid,
            "parent": self.parent,
            "type": self.type_id,
            "start": self.start,
            "attrs": [{k: v} for k, v in self.attrs],
        }


_UUID_SPACE = "6f1c5a0e-7d2b-4c1e-9a53-0b8f2d4e6a71"  # vgpukit's namespace for planned mdev UUIDs


def planned_uuids(parents: list[str], type_id: str, n: int, taken: set[str]) -> list[str]:
    """``n`` UUIDs for new mdevs of ``type_id`` on ``parents``, derived from them (the k-th one of that
    type there, skipping UUIDs in use), so ``diff`` shows the ones ``apply`` then creates."""
    import uuid  # planning only: the listings load no uuid module

    space = uuid.UUID(_UUID_SPACE)
    out: list[str] = []
    k = 0
    while len(out) < n:
        u = str(uuid.uuid5(space, f"{','.join(sorted(parents))}/{type_id}/{k}"))
        if u not in taken:
            out.append(u)
        k += 1
    return out
