"""MIG profile tables (vgpukit/data/mig/profiles.json, described in docs/mig.md) as records: what the
simulated driver plays. JSON, not YAML: ``mig status`` reads it on every MIG host and needs no YAML parser."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from ..data import load_json
from ..errors import NotFound
from .model import CiProfile, GiProfile


class MigModel(msgspec.Struct, frozen=True):
    key: str
    arch: str  # ampere | hopper
    memory_slots: int
    compute_slices: int
    profiles: tuple[GiProfile, ...]
    product_names: tuple[str, ...]
    pci_device_ids: tuple[int, ...]
    without_reset: bool = False  # a MIG mode change applies at once (data: mig_mode_without_reset, with its source)

    @property
    def reset_required(self) -> bool:
        """Ampere keeps a MIG mode change pending until a GPU reset; Hopper and newer apply it at once
        (the table's ``mig_mode_without_reset``, per model)."""
        return not self.without_reset

    def profile(self, profile_id: int) -> GiProfile | None:
        return next((p for p in self.profiles if p.id == profile_id), None)


def _data() -> dict[str, Any]:
    data: dict[str, Any] = load_json("mig/profiles.json")
    return data


def ci_enums() -> dict[int, int]:
    """NVML_COMPUTE_INSTANCE_PROFILE_* per compute-slice count (JSON keys are strings: here ints)."""
    return {int(k): int(v) for k, v in _data()["ci_enums"].items()}


def ci_allowed_table() -> dict[int, dict[int, int]]:
    """A GPU instance's compute-slice count -> {compute-instance slices: max count}."""
    return {int(g): {int(c): int(n) for c, n in row.items()} for g, row in _data()["ci_allowed"].items()}


@cache
def models() -> dict[str, MigModel]:
    data = _data()
    out: dict[str, MigModel] = {}
    for key, m in data["models"].items():
        layout = data["layouts"][m["layout"]]
        profs = []
        for pkey, (name, mib, sms, max_count) in m["profiles"].items():
            geo = layout["profiles"][pkey]
            profs.append(
                GiProfile(
                    id=int(geo["id"]),
                    enum=int(geo["enum"]),
                    name=str(name),
                    slices=int(geo["slices"]),
                    size=int(geo["size"]),
                    memory_mib=int(mib),
                    sms=int(sms),
                    max_count=int(max_count),
                    starts=tuple(int(s) for s in geo["starts"]),
                    media=bool(geo.get("media", False)),
                )
            )
        out[key] = MigModel(
            key=key,
            arch=str(m["arch"]),
            memory_slots=int(layout["memory_slots"]),
            compute_slices=int(layout["compute_slices"]),
            profiles=tuple(sorted(profs, key=lambda p: p.enum)),
            product_names=tuple(m.get("product_names", [])),
            pci_device_ids=tuple(int(x, 16) for x in m.get("pci_device_ids", [])),
            without_reset=bool(m.get("mig_mode_without_reset", False)),
        )
    return out


def model(key: str | None, product_name: str | None = None) -> MigModel:
    """The model by table key, else by NVML product name."""
    table = models()
    if key and key in table:
        return table[key]
    for m in table.values():
        if product_name and product_name in m.product_names:
            return m
    raise NotFound(
        f"no MIG profile table for GPU model {key or product_name!r}",
        value=key or product_name,
        hint=f"known models: {', '.join(sorted(table))}",
    )


def ci_profiles(gi: GiProfile) -> list[CiProfile]:
    """Compute-instance profiles a GPU instance of profile ``gi`` allows."""
    allowed = ci_allowed_table().get(gi.slices, {})
    enums = ci_enums()
    out = []
    for c, max_count in allowed.items():
        full = c == gi.slices
        align = 1 << (c - 1).bit_length()  # 3c aligns like 4c: {0, 4} in a 7g instance
        starts = tuple(range(0, gi.slices - c + 1, align))
        name = gi.name if full else f"{c}c.{gi.name}"
        out.append(
            CiProfile(enum=int(enums[c]), name=name, slices=int(c), max_count=int(max_count), starts=starts, full=full)
        )
    return sorted(out, key=lambda p: p.enum)
