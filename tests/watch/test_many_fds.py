"""A long-running door in a process with many files open: its waits take descriptors above 1024, which
``select()`` refuses ("filedescriptor out of range"; it happened to the watch in a long test run)."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Run, make_sim
from vgpukit.clikit.watch import nvml_events
from vgpukit.sim.uevents import FeedReader
from vgpukit.stopping import Stop, readable
from vgpukit.watch.loop import Watch

from .helpers import app_of, fresh, model_of, state

MANY = 1100


@pytest.fixture
def crowded() -> Iterator[None]:
    """The lowest descriptors all taken, so every new one is above 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < MANY + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, MANY + 200), hard))
    null = os.open(os.devnull, os.O_RDONLY)
    taken = [os.dup(null) for _ in range(MANY)]
    try:
        yield
    finally:
        for fd in [*taken, null]:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_readable_waits_on_a_descriptor_above_1024(crowded: None) -> None:
    r, w = os.pipe()
    try:
        assert r > 1024
        assert readable([r], 0) == []
        os.write(w, b"x")
        assert readable([r], 1) == [r]
        stop = Stop()
        assert stop.fileno() > 1024 and stop.wait(0.01) is False
    finally:
        os.close(r)
        os.close(w)


def test_the_watch_follows_a_change_with_its_descriptors_above_1024(
    tmp_path: Path, run_cli: Run, crowded: None
) -> None:
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    model = model_of(sim)
    watch = Watch(model, app.host, FeedReader(sim), nvml_events(app), resync=3600).start()
    try:
        assert min(watch.stop_r, watch.nvml_r) > 1024
        version = model.version
        assert run_cli(sim, "sriov", "enable", "nic0", "--vfs", "2").exit_code == 0
        for _ in range(100):
            if state(model) == fresh(sim):
                break
            model.wait(version, 0.2)
        assert state(model) == fresh(sim)
    finally:
        watch.close()
        app.close()
