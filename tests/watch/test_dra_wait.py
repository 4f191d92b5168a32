"""The DRA plugin's publisher waits on the watch's model from the version it read, not the version when
it starts waiting: a change that lands while it publishes (the API server is slow, a 1024-VF slice takes
seconds) is published next at once, never left for the next change or ``--interval`` (an hour)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import make_sim, sim_host
from vgpukit.k8s.dra import cluster
from vgpukit.k8s.dra.server import Driver, Plugin
from vgpukit.watch.model import HostModel


class Publisher:
    """Stands in for the API server's side; its first publication races a host change."""

    counters_dropped = capacity_dropped = taints_dropped = False

    def __init__(self, model: HostModel) -> None:
        self.model = model
        self.calls: list[float] = []

    def detected(self) -> Any:
        return cluster.for_version("1.37")  # what the API server serves, as the dry runs found out

    def publish(self, entries: list[dict[str, Any]], parts: dict[str, Any]) -> str | None:
        self.calls.append(time.monotonic())
        if len(self.calls) == 1:
            self.model.poke()  # the host changed while this publication ran (a view's new value)
        return None


def test_a_change_while_publishing_is_published_next_at_once(tmp_path: Path) -> None:
    model = HostModel(lambda: None, {})  # type: ignore[arg-type,return-value]  # no views: versions only
    driver = Driver("n1", lambda: None, lambda *_: {}, dict)  # type: ignore[arg-type,return-value]
    driver.model = model
    driver.publication = lambda: ([], {})  # type: ignore[method-assign]
    publisher = Publisher(model)
    plugin = Plugin(sim_host(make_sim(tmp_path / "h")), driver, interval=3600, publisher=publisher)  # type: ignore[arg-type]
    thread = threading.Thread(target=plugin._publish, args=(publisher,), daemon=True)
    thread.start()
    try:
        end = time.monotonic() + 5
        while len(publisher.calls) < 2 and time.monotonic() < end:
            time.sleep(0.01)
        assert len(publisher.calls) == 2, "the change made while publishing waited for the next one"
    finally:
        plugin.stop.set()
        driver.nudge()
        thread.join(5)
