"""The node agent's remediation runs when the host says a device's health may have changed, not on a
timer (issue 34): its safety net is an hour here, so a look that comes is one an event asked for."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from tests.watch.helpers import app_of
from vgpukit.clikit.watch import start_watch
from vgpukit.k8s.agent import Agent, kube_api
from vgpukit.k8s.agent_host import AgentHost
from vgpukit.stopping import Stop


class Looks:
    """A remediation runner that counts its looks (and says nothing)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.seen = threading.Condition()

    def __call__(self) -> list[dict[str, object]]:
        with self.seen:
            self.times.append(time.monotonic())
            self.seen.notify_all()
        return []

    def wait(self, n: int, timeout: float = 20) -> bool:
        with self.seen:
            return self.seen.wait_for(lambda: len(self.times) >= n, timeout)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[Looks, Path]]:
    sim = make_sim(tmp_path / "h")
    api = ApiServer("node-1")
    app = app_of(sim)
    host = AgentHost(app.host, start_watch(app, {}, nvml=True))
    client = kube_api(str(api.kubeconfig(tmp_path / "kubeconfig")))
    a = Agent(client, "node-1", lambda _name: None, log=lambda _line: None, retry_s=3600, host=host)  # type: ignore[arg-type,return-value]
    looks = Looks()
    a.remedy, a.remedy_s, a.watch_timeout_s = looks, 3600.0, 1
    stop = Stop()
    thread = threading.Thread(target=a.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert looks.wait(1)  # the look at start
        yield looks, sim
    finally:
        stop.set()
        thread.join(10)
        host.close()
        app.close()
        api.close()


def test_an_xid_makes_the_policy_look_at_once(agent: tuple[Looks, Path]) -> None:
    looks, sim = agent
    assert invoke(sim, "sim", "fault", "xid", "gpu3", "79").exit_code == 0  # an NVML event
    assert looks.wait(2), "no look after an XID (the safety net is an hour)"


def test_a_quarantine_makes_the_policy_look(agent: tuple[Looks, Path]) -> None:
    looks, sim = agent
    assert invoke(sim, "quarantine", "gpu2", "--reason", "bad fan").exit_code == 0  # a change committed
    assert looks.wait(2), "no look after a quarantine"


def test_an_idle_agent_runs_no_look(agent: tuple[Looks, Path]) -> None:
    looks, _sim = agent
    time.sleep(2)  # nothing happens on the host
    assert len(looks.times) == 1, looks.times
