"""The simulated NVIDIA vGPU driver's type tables (``vgpukit/sim/data/nvidia-vgpu.yaml``).

The simulator's own data: the toolkit's catalogue (``vgpukit/data/vgpu``) is a second, independent
source, and tests check that both agree on every type they both describe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ..errors import NotFound
from ..inputs import load_yaml

DATA = "nvidia-vgpu.yaml"


class VgpuType(msgspec.Struct, frozen=True):
    id: int
    name: str  # without the board's prefix: "T4-4Q"
    framebuffer_mb: int
    max_instances: int
    num_heads: int
    frl_config: int
    max_resolution: str

    def description(self) -> str:
        """The ``description`` NVIDIA's driver gives an mdev type."""
        return (
            f"num_heads={self.num_heads}, frl_config={self.frl_config}, framebuffer={self.framebuffer_mb}M, "
            f"max_resolution={self.max_resolution}, max_instance={self.max_instances}"
        )


class Board(msgspec.Struct, frozen=True):
    key: str
    interface: str  # mdev | vfio
    framebuffer_mb: int
    homogeneous: bool
    name_prefix: str
    types: tuple[VgpuType, ...]

    def full_name(self, t: VgpuType) -> str:
        return f"{self.name_prefix}{t.name}"

    def by_id(self, type_id: int) -> VgpuType | None:
        return next((t for t in self.types if t.id == type_id), None)


def _vgpu_type(row: list[Any]) -> VgpuType:
    type_id, name, fb, max_instances, heads, frl, resolution = row
    return VgpuType(int(type_id), str(name), int(fb), int(max_instances), int(heads), int(frl), str(resolution))


def boards() -> dict[str, Board]:
    text = (Path(__file__).resolve().parent / "data" / DATA).read_text()
    doc: dict[str, Any] = load_yaml(text, f"vgpukit/sim/data/{DATA}")["boards"]
    return {
        key: Board(
            key=key,
            interface=str(b["interface"]),
            framebuffer_mb=int(b["framebuffer_mb"]),
            homogeneous=bool(b["homogeneous"]),
            name_prefix=str(b["name_prefix"]),
            types=tuple(_vgpu_type(row) for row in b["types"]),
        )
        for key, b in doc.items()
    }


def board(key: str) -> Board:
    table = boards()
    if key not in table:
        hint = "known: " + ", ".join(table)
        raise NotFound(f"the simulated vGPU driver knows no board {key!r}", value=key, hint=hint)
    return table[key]
