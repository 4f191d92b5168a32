"""The Kubernetes doors' servers on grpc.aio (vgpukit.k8s.aio): one event loop for every server of a
process, and a stream the kubelet cancels ends on the plugin's side (its wake-up let go)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc.aio
import pytest

from tests.k8s.apiserver import ApiServer
from tests.k8s.test_device_plugin import VF_POOL, Running, hgx
from tests.k8s.test_dra_plugin import Node, api  # noqa: F401 (fixture)


def until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def running(short_tmp: Path) -> Iterator[Running]:
    r = Running(hgx(short_tmp / "h"))
    yield r
    r.close()


def test_every_resource_is_served_by_grpc_aio_on_one_event_loop(running: Running) -> None:
    k = running.kubelet
    assert k.wait(lambda: VF_POOL in k.endpoints and bool(k.endpoints[VF_POOL].devices))
    plugins = list(running.manager.plugins.values())
    assert len(plugins) >= 3
    assert all(isinstance(p.server, grpc.aio.Server) for p in plugins)
    loops = [t for t in threading.enumerate() if t.name == "vgpukit-dp-loop"]
    assert len(loops) == 1  # one loop, however many resources (no thread per server)


def test_a_list_and_watch_the_kubelet_cancels_ends_and_lets_its_wakeup_go(running: Running) -> None:
    k = running.kubelet
    assert k.wait(lambda: VF_POOL in k.endpoints and bool(k.endpoints[VF_POOL].devices))
    state = running.manager.plugins[VF_POOL].state
    assert until(lambda: len(state.wakes) == 1)  # the kubelet's one stream awaits the next change
    k.endpoints[VF_POOL].stream.cancel()
    assert until(lambda: not state.wakes)  # CancelledError at the await: the stream ended
    state.update([])  # a change after the cancel rings nobody and breaks nothing
    k.restart()  # a new kubelet: registered again, a new stream, served by the same loop
    assert k.wait(lambda: VF_POOL in k.endpoints and bool(k.endpoints[VF_POOL].devices), timeout=20)
    assert until(lambda: len(state.wakes) == 1)


def test_a_health_stream_the_kubelet_cancels_ends_and_lets_its_wakeup_go(short_tmp: Path, api: ApiServer) -> None:  # noqa: F811
    node = Node(hgx(short_tmp / "h"), api)
    try:
        stream = node.kubelet.watch()
        assert node.kubelet.wait(lambda: bool(node.kubelet.health))
        assert until(lambda: len(node.driver.rings) == 1)
        assert isinstance(node.plugin.servers[0], grpc.aio.Server)
        stream.cancel()
        assert until(lambda: not node.driver.rings)
    finally:
        node.close()
    assert not node.plugin.loop.thread.is_alive()  # closing the plugin ends its loop


def test_a_closed_loop_gives_its_descriptors_back() -> None:
    """Each plugin's event loop (its selector, its self-pipe) is closed with it: a process that makes and
    closes plugins (a test run; a plugin restarted in-process) keeps no descriptor per loop."""
    import os

    from vgpukit.k8s.aio import Loop

    def count() -> int:
        return len(os.listdir("/proc/self/fd"))

    Loop("warm").close()  # the executor's and asyncio's first-use files
    before = count()
    for _ in range(10):
        Loop("t").close()
    assert count() <= before
