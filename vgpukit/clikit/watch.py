"""A long-running command's watch (:mod:`vgpukit.watch`), composed from its App: the host opened afresh
for each refresh, the wiring's uevent source, NVML's events, the safety net's period."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from ..clikit.params import AsciiFloat
from .context import App

if TYPE_CHECKING:
    from ..host import Host
    from ..nvml import Nvml
    from ..nvml.model import EventWatcher
    from ..watch.loop import Watch
    from ..watch.model import View

RESYNC_ENV = "VGPUKIT_RESYNC"

resync_option = click.option(
    "--resync",
    type=AsciiFloat(1, 86400),
    envvar=RESYNC_ENV,
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="The safety net: read the GPUs' side again this often, and the whole host every 12th time (changes "
    "themselves are listened to: kernel uevents, NVML events, inotify; env VGPUKIT_RESYNC).",
)


def opener(app: App) -> Callable[[], tuple[Host, Nvml | None, Callable[[], None]]]:
    """A fresh host and NVML for each refresh (nothing cached from the previous one but the model's)."""

    def open_host() -> tuple[Host, Nvml | None, Callable[[], None]]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, command=app.command, wiring=app.wiring)
        return fresh.host, fresh.nvml, fresh.close

    return open_host


def nvml_events(app: App) -> Callable[[], tuple[EventWatcher | None, Callable[[], None]]]:
    """NVML's event watcher, on a driver handle of its own kept for the watch's life."""

    def open_events() -> tuple[EventWatcher | None, Callable[[], None]]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, wiring=app.wiring)
        nvml = fresh.nvml
        return (nvml.watch_events(None) if nvml is not None else None), fresh.close

    return open_events


def start_watch(
    app: App,
    views: dict[str, View],
    resync: float | None = None,
    dirs: dict[str, tuple[int, str]] | None = None,
    nvml: bool = True,
) -> Watch:
    """Listen to the host from now on and read it once (the model's first, full refresh)."""
    from ..watch.loop import RESYNC, Watch
    from ..watch.model import HostModel

    if resync is None:
        resync = float(os.environ.get(RESYNC_ENV) or RESYNC)
    assert app.wiring is not None
    kernel = app.wiring.open_uevents(app.host, app.sim_dir)
    model = HostModel(opener(app), views)
    watch = Watch(model, app.host, kernel, nvml_events(app) if nvml else None, resync, dirs)
    return watch.start()
