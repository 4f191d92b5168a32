"""A command of vgpukit's whose kernel events come in several batches (VFs created, then bound) costs the
watch one refresh, made once its change engine commits (the journal removed), not one per batch half-done;
a journal left by a killed command holds a burst back HOLD seconds at most; events outside any command
are refreshed as they come."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from tests.conftest import make_sim
from vgpukit.host.notify import Uevent
from vgpukit.watch.loop import Watch
from vgpukit.watch.model import HostModel, Refresh, view
from vgpukit.watch.touch import Touch

from .helpers import app_of


class Feed:
    """A kernel uevent source the test writes to (the Kernel protocol of vgpukit.watch.loop)."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.queue: list[Uevent] = []
        self.lock = threading.Lock()

    def send(self, *bdfs: str) -> None:
        with self.lock:
            self.queue += [Uevent("add", f"/devices/pci0000:00/0000:00:01.0/{b}", "pci") for b in bdfs]
        os.write(self.w, b"x")

    def fileno(self) -> int:
        return self.r

    def read(self) -> list[Uevent]:
        try:
            os.read(self.r, 4096)
        except BlockingIOError:
            pass
        with self.lock:
            out, self.queue = self.queue, []
        return out

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


def _watch(sim: Path) -> tuple[Watch, Feed, list[Touch]]:
    app = app_of(sim)
    seen: list[Touch] = []

    def record(r: Refresh) -> int:
        seen.append(r.touch)
        return len(seen)  # a new value each time: every refresh is a change

    def open_host() -> tuple[object, None, object]:
        fresh = app_of(sim)
        return fresh.host, None, fresh.close

    model = HostModel(open_host, {"seen": view(record, "pci", "docs")})  # type: ignore[arg-type]
    feed = Feed()
    watch = Watch(model, app.host, feed, None, resync=3600).start()
    app.close()  # its host door stays usable: the watch's inotify and stat go through it
    seen.clear()  # the start's full refresh
    return watch, feed, seen


def _until(check: object, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not check() and time.monotonic() < end:  # type: ignore[operator]
        time.sleep(0.01)


def test_a_command_in_batches_is_refreshed_once_at_its_commit(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    journal = sim / "run" / "vgpukit" / "journal"
    journal.parent.mkdir(parents=True, exist_ok=True)
    watch, feed, seen = _watch(sim)
    try:
        journal.write_text("{}\n")  # a command is changing the host
        feed.send("0000:05:00.2", "0000:05:00.3")  # its VFs created...
        time.sleep(0.08)  # (longer than a burst's quiet time, shorter than HOLD)
        feed.send("0000:05:00.2", "0000:05:00.3")  # ...then bound
        time.sleep(0.03)
        journal.unlink()  # committed
        _until(lambda: seen)
        time.sleep(0.2)
        assert len(seen) == 1, [t.why for t in seen]
        assert seen[0].bdfs == {"0000:05:00.2", "0000:05:00.3"} and "docs" in seen[0].kinds
    finally:
        watch.close()


def test_a_journal_left_behind_holds_a_burst_back_a_bounded_time(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    journal = sim / "run" / "vgpukit" / "journal"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text("{}\n")  # a command killed before its commit: the next one repairs it
    watch, feed, seen = _watch(sim)
    try:
        feed.send("0000:05:00.2")
        _until(lambda: seen)
        assert len(seen) == 1 and seen[0].bdfs == {"0000:05:00.2"}
    finally:
        watch.close()


def test_events_outside_a_command_are_refreshed_batch_by_batch(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    watch, feed, seen = _watch(sim)
    try:
        feed.send("0000:05:00.2")
        _until(lambda: seen)
        feed.send("0000:05:00.3")
        _until(lambda: len(seen) == 2)
        assert [t.bdfs for t in seen] == [{"0000:05:00.2"}, {"0000:05:00.3"}]
    finally:
        watch.close()
