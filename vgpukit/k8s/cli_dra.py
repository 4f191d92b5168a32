"""``vgpukit k8s resources --kubernetes VERSION``: the ResourceSlices the DRA plugin would publish now for an
API server of that release (:mod:`vgpukit.k8s.dra.cluster`'s rules, :mod:`vgpukit.k8s.dra.pool`'s layout)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..clikit.output import table
from ..engine.env import Env
from .inventory import Inventory


def slices_view(
    opener: Callable[[], tuple[Env, Callable[..., Inventory], Callable[[], None]]],
    health: Callable[[], dict[str, str]],
    version: str,
    partitionable: str,
    node: str,
) -> dict[str, Any]:
    """The release's rules and the slices (generation 1, as a first publish writes them), as the plugin
    with ``--partitionable`` (auto: the release's default of ``DRAPartitionableDevices``) would publish."""
    from .dra import cluster, pool
    from .dra.server import Driver
    from .dra.slices import slice_doc

    server = cluster.for_version(version, None if partitionable == "auto" else partitionable == "on")
    driver = Driver(node, opener, lambda *_: {}, health, "on" if server.partitionable else "off")
    driver.taints_ok = server.taints  # --device-taints auto: as the release's gate
    entries, parts = driver.publication()
    wanted, warnings = pool.layout(node, entries, parts, server)
    docs = [slice_doc(node, name, part, 1, len(wanted)) for name, part in wanted.items()]
    rules = {"version": server.version, "layout": server.layout, "partitionable": server.partitionable}
    return {"kubernetes": rules, "resourceSlices": docs, "sliceWarnings": warnings}


def show(view: dict[str, Any]) -> None:
    """One row per slice: its name, devices, counter sets."""
    k = view["kubernetes"]
    shape = "counter sets beside devices" if k["layout"] == "combined" else "counter sets in slices of their own"
    gate = "partitionable devices" if k["partitionable"] else "static view (DRAPartitionableDevices off)"
    rows = [
        (
            d["metadata"]["name"],
            len(d["spec"].get("devices") or []),
            ", ".join(c["name"] for c in d["spec"].get("sharedCounters") or []),
        )
        for d in view["resourceSlices"]
    ]
    table(f"ResourceSlices for Kubernetes {k['version']}: {shape}, {gate}", ["SLICE", "DEVICES", "COUNTER SETS"], rows)
    for line in view["sliceWarnings"]:
        table(None, ["WARNING"], [(line,)])
