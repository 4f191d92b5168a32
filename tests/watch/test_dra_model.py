"""The DRA plugin publishes from the watch's model what it publishes reading the host afresh: the same
devices with the same attributes (an existing vGPU's ``vgpuTypeID`` among them, the vGPUs' types being a
view of the model too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import invoke, make_sim
from tests.watch.helpers import app_of
from vgpukit.clikit.watch import opener
from vgpukit.k8s.cli_host import _dra_opener
from vgpukit.k8s.dra.server import Driver
from vgpukit.k8s.watched import dra_views
from vgpukit.watch.model import HostModel
from vgpukit.watch.touch import Touch


def publication(sim: Path, watched: bool) -> list[dict[str, Any]]:
    app = app_of(sim)
    try:
        driver = Driver("n1", _dra_opener(app), lambda *_: {}, dict)
        if watched:
            driver.model = HostModel(opener(app), dra_views())
            touch = Touch()
            touch.everything("first")
            driver.model.refresh(touch)
        return driver.publication()[0]
    finally:
        app.close()


def test_an_existing_vgpu_is_published_from_the_model_with_its_type(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "t", "t4-mdev")
    assert invoke(sim, "vgpu", "create", "gpu1", "--type", "T4-8Q").exit_code == 0
    fresh, watched = publication(sim, False), publication(sim, True)
    types = [e["attributes"].get("vgpuTypeID") for e in watched if "vgpuTypeID" in e["attributes"]]
    assert types, "no vGPU published with its vgpuTypeID"
    assert watched == fresh
