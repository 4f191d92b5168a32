"""Closing a watch while its NVML thread is inside the driver's wait: the thread's late wake-up is
dropped, never written into a pipe end the watch has closed (EBADF) or into an unrelated file that
reused its descriptor number."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_sim
from vgpukit.nvml.model import EventWatcher, NvmlEvent
from vgpukit.watch.loop import NVML_THREAD, Watch

from .helpers import app_of, model_of


class LateWatcher:
    """Blocks in its first wait until released, then delivers one event (as a driver that answers
    just as the watch is being closed)."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.release = threading.Event()
        self.delivered = False

    def wait(self, timeout: float) -> list[NvmlEvent]:
        self.waiting.set()
        if self.delivered:
            return []
        self.release.wait(30)
        self.delivered = True
        return [NvmlEvent(gpu=0, kind="xid", data=79, time=0.0, seq=1, gi=-1)]

    def close(self) -> None:
        pass


def test_an_nvml_event_after_close_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    late = LateWatcher()
    opener: Callable[[], tuple[EventWatcher | None, Callable[[], None]]] = lambda: (late, lambda: None)  # noqa: E731
    watch = Watch(model_of(sim), app.host, None, opener, resync=3600).start()
    nvml_thread = next(t for t in watch.threads if t.name == NVML_THREAD)
    assert late.waiting.wait(30)
    watch.close()
    reused: list[tuple[int, int]] = [os.pipe() for _ in range(4)]  # take the numbers the watch gave back
    try:
        late.release.set()
        nvml_thread.join(30)
        assert not nvml_thread.is_alive()
        assert errors == []
        for r, _w in reused:
            os.set_blocking(r, False)
            got: Any = None
            try:
                got = os.read(r, 16)
            except BlockingIOError:
                pass
            assert got is None, "the NVML thread wrote into a descriptor the watch had closed"
    finally:
        for r, w in reused:
            os.close(r)
            os.close(w)
        app.close()


def test_a_host_removed_under_a_closed_watch_ends_its_nvml_thread_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI failure of 2026-11-29: a test's simulated host was deleted while the closed watch's NVML
    thread still waited; the simulator's event watcher then failed (its directory gone) and the thread
    ended by an unhandled exception."""
    import shutil

    from vgpukit.sim.nvml_events import SimEventWatcher

    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)
    real = SimEventWatcher(sim, 1, None)
    entered = threading.Event()

    class Gone:
        def wait(self, timeout: float) -> list[NvmlEvent]:
            entered.set()
            time.sleep(0.3)  # the host is removed meanwhile
            return real.wait(timeout)

        def close(self) -> None:
            real.close()

    opener: Callable[[], tuple[EventWatcher | None, Callable[[], None]]] = lambda: (Gone(), lambda: None)  # noqa: E731
    watch = Watch(model_of(sim), app.host, None, opener, resync=3600).start()
    nvml_thread = next(t for t in watch.threads if t.name == NVML_THREAD)
    assert entered.wait(30)
    watch.close()
    app.close()
    shutil.rmtree(sim)
    nvml_thread.join(30)
    assert not nvml_thread.is_alive()
    assert errors == []


def test_an_nvml_watcher_that_fails_is_said_once_and_the_thread_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    sim = make_sim(tmp_path / "h")
    app = app_of(sim)

    class Broken:
        def wait(self, timeout: float) -> list[NvmlEvent]:
            raise FileNotFoundError(2, "No such file or directory")

        def close(self) -> None:
            pass

    opener: Callable[[], tuple[EventWatcher | None, Callable[[], None]]] = lambda: (Broken(), lambda: None)  # noqa: E731
    with caplog.at_level("WARNING", logger="vgpukit.watch"):
        watch = Watch(model_of(sim), app.host, None, opener, resync=3600).start()
        nvml_thread = next(t for t in watch.threads if t.name == NVML_THREAD)
        nvml_thread.join(30)
    try:
        assert not nvml_thread.is_alive()
        assert errors == []
        assert [r.getMessage() for r in caplog.records if "NVML events no longer watched" in r.getMessage()] == [
            "NVML events no longer watched: FileNotFoundError: [Errno 2] No such file or directory"
        ]
    finally:
        watch.close()
        app.close()
