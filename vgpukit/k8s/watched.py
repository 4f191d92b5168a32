"""The views of the host the long-running Kubernetes doors and the exporter keep (:mod:`vgpukit.watch`).

* ``inventory``: :func:`.inventory.collect` over the model's PCI snapshot (functions a change named
  are read again, the rest kept), recomputed when PCI functions, vgpukit's files or NVML change;
* ``held``: the same devices with who holds them (one ``/proc`` scan), read again when a VFIO node is
  opened or closed too;
* ``health``, ``sick``: the health layer's look (its record kept current, as ``vgpukit health`` does,
  when ``save``) and the unusable devices (BDFs and MIG device UUIDs -> why).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..health import check, fact, xid
from ..health import log as record_log
from ..host import Host
from ..watch.model import Refresh, View, view
from .inventory import Inventory, Options, collect, with_holders

DEVICES = ("pci", "docs", "nvml")


def inventory_views(options: Callable[[Host], Options]) -> dict[str, View]:
    def inventory(r: Refresh) -> Inventory:
        return collect(r.host, r.nvml, options(r.host), scan=r.scan)

    def held(r: Refresh) -> Inventory:
        inv = r.value("inventory")
        return with_holders(r.host, inv) if inv is not None else Inventory()

    return {"inventory": view(inventory, *DEVICES), "held": view(held, *DEVICES, "holders")}


def health_views(save: bool, table: xid.XidTable | None = None) -> dict[str, View]:
    xids = table or xid.builtin()

    def health(r: Refresh) -> list[Any]:
        record = record_log.load(r.host)
        # NVML's events since the record's cursor, as every look reads them (the watch's own NVML thread
        # only says when to look: a second consumer of the events would record them twice)
        found = check.look(r.host, r.nvml, xids, record, scan=r.scan)
        if save:
            record_log.save(r.host, record)
        return found.devices

    def sick(r: Refresh) -> dict[str, str]:
        devices = r.value("health") or []
        return {**fact.unusable(devices), **fact.unusable_slices(devices)}

    return {"health": view(health, *DEVICES), "sick": view(sick, *DEVICES)}


def dra_views() -> dict[str, View]:
    """The DRA plugin's: its inventory (one device per GPU share), health, and NVML's facts for the slices."""
    from .dra.slices import NvmlFacts

    views = {**inventory_views(lambda _host: Options(replicas=1)), **health_views(save=True)}
    views["facts"] = view(lambda r: NvmlFacts(r.nvml), *DEVICES)
    return views
