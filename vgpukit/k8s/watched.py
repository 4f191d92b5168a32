"""The views of the host the long-running Kubernetes doors keep (:mod:`vgpukit.watch`).

* ``inventory``, ``held``: the node's devices and who holds them (:mod:`vgpukit.node.views`; the
  KubeVirt mode's own inventory here);
* ``health``, ``sick``: the health layer's (:mod:`vgpukit.health.watched`), ``sick`` and ``evicting`` as
  the Kubernetes commands read them (:mod:`.cli_health`: quarantined devices too).
"""

from __future__ import annotations

from collections.abc import Callable

from ..health.watched import DEVICES, health_views
from ..host import Host
from ..node.inventory import Inventory, Options
from ..node.views import held_view, inventory_views
from ..watch.model import Refresh, View, view


def kubevirt_views(naming: str) -> dict[str, View]:
    """The KubeVirt mode's inventory (:func:`.kubevirt.collect`, ``naming``: its resource names), with holders."""
    from . import kubevirt

    def inventory(r: Refresh) -> Inventory:
        offers = kubevirt.collect(r.host, naming, scan=r.scan)
        inv = offers.inventory()
        inv.warnings += offers.warnings
        return inv

    return {"inventory": view(inventory, *DEVICES), "held": held_view()}


def k8s_health_views() -> dict[str, View]:
    """The health layer's views (the record kept current), ``sick`` as the Kubernetes commands read it
    (:func:`.unusable.unusable`: a PF's VFs and quarantined devices too), and ``evicting``: the
    quarantined devices whose pods Kubernetes should evict (quarantines are journaled changes: a commit
    refreshes them)."""
    from .. import quarantine as qr
    from .unusable import unusable

    views = health_views(save=True)
    views["sick"] = view(lambda r: unusable(r.host, r.value("health") or []), *DEVICES)
    views["evicting"] = view(lambda r: qr.evicting(r.host), *DEVICES)
    return views


def device_plugin_views(options: Callable[[Host], Options], vms: str | None = None) -> dict[str, View]:
    """The device plugin's: its inventory with who holds the devices (``vms``: the KubeVirt mode's naming),
    health (its record kept current)."""
    devices = kubevirt_views(vms) if vms else inventory_views(options)
    return {**devices, **k8s_health_views()}


def dra_views() -> dict[str, View]:
    """The DRA plugin's: its inventory (one device per GPU share), health, NVML's facts and the vGPUs' types
    for the slices."""
    from .dra.ondemand_vgpu import types_on
    from .dra.slices import NvmlFacts

    views = {**inventory_views(lambda _host: Options(replicas=1)), **k8s_health_views()}
    views["facts"] = view(lambda r: NvmlFacts(r.nvml), *DEVICES)
    views["vgpu_types"] = view(lambda r: types_on(r.host, r.scan), *DEVICES)  # each vGPU's vgpuTypeID
    return views
