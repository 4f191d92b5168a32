"""A watched model of a simulated host, and the fresh read it must equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vgpukit.clikit.context import App
from vgpukit.clikit.watch import opener
from vgpukit.health.watched import health_views
from vgpukit.node.inventory import Inventory, Options, collect, with_holders
from vgpukit.node.views import inventory_views
from vgpukit.watch.model import HostModel, View
from vgpukit.wiring import Wiring


def app_of(sim: Path) -> App:
    return App(sim_dir=sim, wiring=Wiring())


def views() -> dict[str, View]:
    return {**inventory_views(lambda _h: Options(replicas=1)), **health_views(save=False)}


def model_of(sim: Path) -> HostModel:
    return HostModel(opener(app_of(sim)), views())


def read_all(model: HostModel, why: str) -> None:
    """Refresh ``model`` as the watch does when it must read everything (start, lost events)."""
    from vgpukit.watch.touch import Touch

    t = Touch()
    t.everything(why)
    model.refresh(t)


def fresh(sim: Path) -> tuple[Inventory, list[Any]]:
    """The devices with their holders, and the health layer's look, read afresh (no model)."""
    app = app_of(sim)
    try:
        m = HostModel(opener(app), views())
        inv = with_holders(app.host, collect(app.host, app.nvml, Options(replicas=1)))
        read_all(m, "fresh")
        return inv, m.get("health")
    finally:
        app.close()


def state(model: HostModel) -> tuple[Inventory, list[Any]]:
    return model.get("held"), model.get("health")
