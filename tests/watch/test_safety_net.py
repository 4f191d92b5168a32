"""The safety net in two tiers (docs/decisions.md, "The safety net"): its looks read the GPUs' side
again (what NVML changes without an event), every FULL_EVERY-th look reads everything, and a watch
without kernel uevents reads everything at every look."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Run, make_sim
from vgpukit.sim.uevents import FeedReader
from vgpukit.watch.loop import FULL_EVERY, Watch
from vgpukit.watch.touch import Touch

from .helpers import app_of, fresh, model_of, state


def _start() -> Touch:
    t = Touch()
    t.everything("start")
    return t


def test_the_safety_nets_looks_read_the_gpus_side_and_every_twelfth_everything(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    watch = Watch(model_of(sim), app.host, FeedReader(sim), None, resync=3600)
    try:
        looks = [watch.safety_net() for _ in range(2 * FULL_EVERY)]
        assert all(t.net for t in looks)
        assert [i + 1 for i, t in enumerate(looks) if t.full] == [FULL_EVERY, 2 * FULL_EVERY]
        light = looks[0]
        assert light.kinds == {"pci", "nvml"} and not light.bdfs and not light.settings
    finally:
        watch.inotify.close()
        app.close()


def test_without_kernel_uevents_every_look_reads_everything(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    watch = Watch(model_of(sim), app.host, None, None, resync=3600)
    try:
        assert all(watch.safety_net().full for _ in range(3))
        assert "everything every 3600 s" in watch.describe()
    finally:
        watch.inotify.close()
        app.close()


def test_a_light_look_catches_a_mig_layout_no_event_announced(tmp_path: Path, run_cli: Run) -> None:
    """The model is not told of the change (no event reaches it: the watch's thread is not running, as
    for a MIG layout another tool made through NVML); the safety net's light look brings it in line."""
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    model = model_of(sim)
    watch = Watch(model, app.host, FeedReader(sim), None, resync=3600)
    try:
        model.refresh(_start())
        assert run_cli(sim, "partition", "gpu2", "--mig", "3g.20gb").exit_code == 0
        assert state(model) != fresh(sim), "the change must be one the model has not seen"
        full_before = model.stats.full
        model.refresh(watch.safety_net())
        assert model.stats.full == full_before, "the light look must not be a full re-read"
        assert state(model) == fresh(sim)
    finally:
        watch.inotify.close()
        app.close()
