"""vGPU type catalogues (``vgpukit/data/vgpu/*.yaml``) and vGPU type names.

Catalogues describe types (framebuffer, max instances, display heads). They never decide capacity:
that comes from the host's own reports. The simulator keeps its own tables (vgpukit/sim/data).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import msgspec

from ..data import load_yaml
from ..errors import NotFound
from ..mdev.model import short_name as short_name  # the one comparable form of a type name (mdev types are named so)


class TypeSpec(msgspec.Struct, frozen=True):
    id: int
    name: str  # short name without prefix: "T4-4Q"
    framebuffer_mb: int
    max_instances: int
    num_heads: int
    frl_config: int
    max_resolution: str

    def description(self) -> str:
        """The text NVIDIA's driver shows in an mdev type's ``description``."""
        return (
            f"num_heads={self.num_heads}, frl_config={self.frl_config}, framebuffer={self.framebuffer_mb}M, "
            f"max_resolution={self.max_resolution}, max_instance={self.max_instances}"
        )


class Catalog(msgspec.Struct, frozen=True):
    key: str  # file name without .yaml
    gpu: str
    pci_ids: tuple[str, ...]
    vf_pci_ids: tuple[str, ...]
    interface: str  # mdev | vfio
    framebuffer_mb: int
    homogeneous: bool
    name_prefix: str
    types: tuple[TypeSpec, ...]

    def full_name(self, spec: TypeSpec) -> str:
        return f"{self.name_prefix}{spec.name}"

    def by_id(self, type_id: int) -> TypeSpec | None:
        return next((t for t in self.types if t.id == type_id), None)

    def by_name(self, name: str) -> TypeSpec | None:
        want = short_name(name)
        return next((t for t in self.types if short_name(t.name) == want), None)


DESC_RE = re.compile(r"(\w+)=([^,]+)")


def parse_description(text: str | None) -> dict[str, str]:
    """``num_heads=4, framebuffer=4096M, ...`` -> {"num_heads": "4", "framebuffer": "4096M", ...}."""
    return {k: v.strip() for k, v in DESC_RE.findall(text or "")}


def framebuffer_mb(desc: dict[str, str]) -> int | None:
    fb = desc.get("framebuffer", "")
    m = re.match(r"^(\d+)\s*([MG]?)", fb)
    if not m:
        return None
    return int(m.group(1)) * (1024 if m.group(2) == "G" else 1)


def _load(key: str, doc: dict[str, Any]) -> Catalog:
    return Catalog(
        key=key,
        gpu=doc["gpu"],
        pci_ids=tuple(doc.get("pci_ids", [])),
        vf_pci_ids=tuple(doc.get("vf_pci_ids", [])),
        interface=doc["interface"],
        framebuffer_mb=int(doc["framebuffer_mb"]),
        homogeneous=bool(doc.get("homogeneous", True)),
        name_prefix=doc.get("name_prefix", ""),
        types=tuple(TypeSpec(**t) for t in doc["types"]),
    )


@cache
def catalogs() -> tuple[Catalog, ...]:
    base = resources.files("vgpukit.data").joinpath("vgpu")
    names = sorted(p.name for p in base.iterdir() if p.name.endswith(".yaml"))
    return tuple(_load(n.removesuffix(".yaml"), load_yaml(f"vgpu/{n}")) for n in names)


def catalog(key: str) -> Catalog:
    for c in catalogs():
        if c.key == key:
            return c
    raise NotFound(f"no vGPU catalogue {key!r}", value=key, hint="have: " + ", ".join(c.key for c in catalogs()))


def for_device(ids: str) -> Catalog | None:
    """The catalogue describing a GPU (or its VF) with PCI ids ``vvvv:dddd``."""
    return next((c for c in catalogs() if ids in c.pci_ids or ids in c.vf_pci_ids), None)
