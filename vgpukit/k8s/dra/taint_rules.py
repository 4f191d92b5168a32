"""DeviceTaintRules taking one GPU out for maintenance (``vgpukit k8s dra-taint-rules``).

A DeviceTaintRule's selector names one device (``spec.deviceSelector{driver, pool, device}``: since 1.35 it
has no CEL or class), but a GPU is published as several devices: the whole GPU (``gpu-0000-03-00-0``), its
shared form (``shared-gpu-...``), its existing MIG slices (``mig-<uuid>``), the MIG slices and vGPUs it could
hold made on demand (``gpu-0000-03-00-0-mig-...``, ``-vgpu-...``), its mdevs and its VFs' vGPUs. So one rule per
device the plugin publishes of the GPU, in the API version of the cluster's release (``resource.k8s.io/v1alpha3``
in 1.34 and 1.35, ``v1beta2`` in 1.36, ``v1`` from 1.37: ``vgpukit/data/k8s/dra.json``).
"""

from __future__ import annotations

import hashlib
from typing import Any

from ...errors import InvalidInput, NotFound
from ...node.dra_names import device_name
from .cluster import _table, release
from .devices import DRIVER

KEY = f"{DRIVER}/maintenance"


def _of_gpu(entry: dict[str, Any], bdf: str) -> bool:
    """Whether a published device is the GPU at ``bdf`` or a piece of it (its name, or the attribute naming
    the GPU: a MIG slice's ``pciBusID``, an mdev's ``parentBusID``, a VF's ``pf``)."""
    name = str(entry["name"]).removeprefix("shared-")
    whole = device_name("gpu", bdf)
    if name == whole or name.startswith(whole + "-"):
        return True
    attrs = entry.get("attributes") or {}
    return any((attrs.get(a) or {}).get("string") == bdf for a in ("pciBusID", "parentBusID", "pf"))


def pieces(bdf: str, entries: list[dict[str, Any]], parts: dict[str, dict[str, Any]]) -> list[str]:
    """The names of the devices published of the GPU at ``bdf``, sorted."""
    every = [*entries, *(d for p in parts.values() for d in p.get("devices") or [])]
    return sorted({str(e["name"]) for e in every if _of_gpu(e, bdf)})


def _rule_name(node: str, device: str) -> str:
    name = f"{node}-{device}-maintenance"
    if len(name) <= 253:
        return name
    return f"{device}-maintenance-{hashlib.sha256(node.encode()).hexdigest()[:10]}"  # a long node name


def check(version: str, effect: str) -> None:
    """Refuse an effect the release's DeviceTaintRule does not take (``None``, a dry run, from 1.35)."""
    if effect == "None" and release(version) == "1.34":
        raise InvalidInput("effect None (a dry run) is served from Kubernetes 1.35 on: give NoExecute or NoSchedule")


def rules(
    version: str, node: str, bdf: str, entries: list[dict[str, Any]], parts: dict[str, dict[str, Any]], effect: str
) -> list[dict[str, Any]]:
    """One DeviceTaintRule per device of the GPU (its taint ``gpu.vgpukit.io/maintenance=planned:<effect>``)."""
    check(version, effect)
    key = release(version)
    names = pieces(bdf, entries, parts)
    if not names:
        raise NotFound(f"{bdf}: the DRA plugin publishes no device of this GPU", device=bdf)
    api = str(_table()["releases"][key]["taint_rules_api"])
    return [
        {
            "apiVersion": api,
            "kind": "DeviceTaintRule",
            "metadata": {"name": _rule_name(node, name)},
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": node, "device": name},
                "taint": {"key": KEY, "value": "planned", "effect": effect},
            },
        }
        for name in names
    ]
