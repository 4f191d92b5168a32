"""The watched model follows the host change by change, and never stays stale when events are lost."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from tests.conftest import Run, make_sim
from vgpukit.clikit.watch import nvml_events
from vgpukit.host.notify import IN_Q_OVERFLOW, Lost, parse
from vgpukit.sim.uevents import FeedReader
from vgpukit.watch.loop import Watch
from vgpukit.watch.touch import Touch

from .helpers import app_of, fresh, model_of, state


def _full() -> Touch:
    t = Touch()
    t.everything("start")
    return t


def _settled(watch: Watch, sim: Path, timeout: float = 20.0) -> bool:
    """The model equals a fresh read (the watch's thread catches up with the changes made)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if state(watch.model) == fresh(sim):
            return True
        watch.model.wait(watch.model.version, 0.2)
    return False


def test_each_change_reaches_the_model_through_its_events(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    model = model_of(sim)
    watch = Watch(model, app.host, FeedReader(sim), nvml_events(app), resync=3600).start()
    try:
        steps = [
            ("sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci"),
            ("sriov", "enable", "nic1", "--vfs", "2"),
            ("bind", "0000:25:00.2", "--driver", "vfio-pci"),
            ("partition", "gpu2", "--mig", "3g.20gb"),
            ("sim", "hold", "0000:05:00.3"),
            ("sim", "fault", "xid", "gpu1", "79"),
            ("sriov", "disable", "nic1"),
        ]
        full_before = model.stats.full
        for args in steps:
            assert run_cli(sim, *args).exit_code == 0, args
            assert _settled(watch, sim), f"the model did not follow: {args}"
        assert model.stats.full == full_before, "a change was followed by a full re-read, not by its events"
    finally:
        watch.close()
        app.close()


def test_a_flooded_feed_ends_in_a_full_reread_never_a_stale_view(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "h")
    model = model_of(sim)
    model.refresh(_full())
    reader = FeedReader(sim, buffer=2048)  # a small receive buffer: a burst of VFs outruns it
    assert run_cli(sim, "sriov", "enable", "nic0", "--vfs", "16", "--driver", "vfio-pci").exit_code == 0
    assert run_cli(sim, "sriov", "enable", "nic2", "--vfs", "16", "--driver", "vfio-pci").exit_code == 0
    touch = Touch()
    with pytest.raises(Lost):
        reader.read()
    model.refresh(touch)  # what a watch would do had it ignored the loss: nothing named, nothing re-read
    assert state(model) != fresh(sim)
    touch.everything("lost")
    model.refresh(touch)
    assert state(model) == fresh(sim)
    assert reader.read() == []  # it goes on from the end
    assert run_cli(sim, "unbind", "0000:05:00.2").exit_code == 0  # a few events: within the buffer
    assert [(e.action, e.subsystem) for e in reader.read()] == [("remove", "vfio"), ("unbind", "pci")]


def test_the_watch_rereads_everything_when_its_feed_is_outrun(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    model = model_of(sim)
    watch = Watch(model, app.host, FeedReader(sim, buffer=512), None, resync=3600).start()
    try:
        full = model.stats.full
        assert run_cli(sim, "sriov", "enable", "nic3", "--vfs", "16", "--driver", "vfio-pci").exit_code == 0
        assert _settled(watch, sim)
        assert model.stats.full > full  # the loss was noticed: a full re-read, not a partial view
    finally:
        watch.close()
        app.close()


def test_an_inotify_queue_overflow_reads_everything(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    watch = Watch(model_of(sim), app.host, None, None, resync=3600)
    try:
        raw = struct.pack("iIII", -1, IN_Q_OVERFLOW, 0, 0)  # what the kernel queues when the queue is full
        touch = Touch()
        for ev in parse(raw, {}):
            watch._file_event(ev, touch)
        assert touch.full
    finally:
        watch.inotify.close()
        app.close()
