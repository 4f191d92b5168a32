"""The node's device views a watch keeps (:mod:`vgpukit.watch`), read alike by the device plugin, the DRA
plugin and the exporter:

* ``inventory``: :func:`.inventory.collect` over the model's PCI snapshot (functions a change named
  are read again, the rest kept), recomputed when PCI functions, vgpukit's files or NVML change: the own devices
  (VFs of a pool) of the functions that did not change are kept, the rest read again
  (:func:`.update.update`); a full re-read or a configuration file of vgpukit's collects everything;
* ``held``: the same devices with who holds them (the refresh's one ``/proc`` scan: ``inventory`` reads
  none), read again when a VFIO node is opened or closed too.
"""

from __future__ import annotations

from collections.abc import Callable

from ..health.watched import DEVICES
from ..host import Host
from ..watch.model import Refresh, View, view
from .inventory import Inventory, Options, collect, with_holders
from .update import update


def held_view() -> View:
    """``held``: the ``inventory`` view's devices with who holds them now."""

    def held(r: Refresh) -> Inventory:
        inv = r.value("inventory")
        return with_holders(r.host, inv) if inv is not None else Inventory()

    return view(held, *DEVICES, "holders")


def inventory_views(options: Callable[[Host], Options]) -> dict[str, View]:
    def inventory(r: Refresh) -> Inventory:
        opts, last = options(r.host), r.value("inventory")
        if last is not None and not r.touch.full and not r.touch.settings:  # no full re-read, no settings
            named = r.touch.bdfs | r.touch.added
            kept = update(last, r.host, r.nvml, opts, r.scan, named, r.touch.groups, holders=False)
            if kept is not None:
                return kept
        return collect(r.host, r.nvml, opts, scan=r.scan, holders=False)  # ``held`` reads who holds them

    return {"inventory": view(inventory, *DEVICES), "held": held_view()}
