"""The node agent listens to its host: a busy host is tried again when its lock is let go, a config
refused for devices in use when the host changes and a dry run says it would pass (no timer: the
agent's retry period is an hour here)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from tests.watch.helpers import app_of
from vgpukit.clikit.watch import start_watch
from vgpukit.k8s.agent import CONFIG_LABEL, FAILED, PENDING, STATE_LABEL, SUCCESS, Agent, ApplyRunner, kube_api
from vgpukit.k8s.agent_host import AgentHost
from vgpukit.stopping import Stop

# `vgpukit apply` as the contract says (docs/fleet.md): busy, or refused for devices in use, until the
# test says the host is free (the file FREE); --dry-run answers as the real one would.
STAND_IN = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["APPLY_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
name = args[args.index("-c") + 1]
free = os.path.exists(os.environ["APPLY_LOG"] + ".FREE")
if name == "busy" and not free:
    print(json.dumps({{"error": "busy", "exit_code": 4, "message": "host locked"}}))
    sys.exit(4)
if name == "inuse" and not free:
    print(json.dumps({{"error": "in-use", "exit_code": 4, "message": "0000:05:00.2 is held open by pid 4242 (vm1)"}}))
    sys.exit(4)
print(json.dumps({{"config": name, "changed": "--dry-run" not in args, "plan": ["a"]}}))
"""


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ApiServer, Agent, Path, threading.Event]]:
    exe = tmp_path / "apply-stand-in"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("APPLY_LOG", str(tmp_path / "apply.log"))
    sim = make_sim(tmp_path / "h")
    api = ApiServer("node-1")
    app = app_of(sim)
    host = AgentHost(app.host, start_watch(app, {}, nvml=False))
    runner = ApplyRunner(str(exe), tmp_path / "fleet.yaml", sim_dir=sim)
    client = kube_api(str(api.kubeconfig(tmp_path / "kubeconfig")))
    agent = Agent(client, "node-1", runner, log=lambda _line: None, retry_s=3600, host=host, check=runner.check)
    agent.watch_timeout_s = 1  # the agent notices `stop` when a watch ends
    stop = Stop()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    assert api.wait(lambda: any(m == "GET" and p == "/api/v1/nodes" for m, p, _q, _c in api.requests))
    try:
        yield api, agent, sim, stop
    finally:
        stop.set()
        thread.join(10)
        host.close()
        app.close()
        api.close()


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apply.log"
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [c[c.index("-c") + 1] + (" --dry-run" if "--dry-run" in c else "") for c in lines]


def test_a_busy_host_is_tried_again_when_its_lock_is_let_go(
    setup: tuple[ApiServer, Agent, Path, threading.Event], tmp_path: Path
) -> None:
    api, _agent, sim, _stop = setup
    lock = sim / "run" / "vgpukit" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)  # another command holds the host lock
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        api.set_labels({CONFIG_LABEL: "busy"})
        assert api.wait(lambda: calls(tmp_path) == ["busy"] and api.labels().get(STATE_LABEL) == PENDING)
        (tmp_path / "apply.log.FREE").touch()
        assert invoke(sim, "sim", "fault", "aer", "0000:05:00.0", "fatal").exit_code == 0  # a change (uevents)
        time.sleep(0.5)  # ...heard while the lock is still held: not tried
        assert api.labels().get(STATE_LABEL) == PENDING and calls(tmp_path) == ["busy"]
    finally:
        os.close(fd)  # the holder exits: its close lets the lock go
    assert api.wait(lambda: api.labels().get(STATE_LABEL) == SUCCESS), calls(tmp_path)
    assert calls(tmp_path) == ["busy", "busy"]


def test_a_refused_config_is_tried_again_when_the_host_changes_and_a_dry_run_passes(
    setup: tuple[ApiServer, Agent, Path, threading.Event], tmp_path: Path
) -> None:
    api, _agent, sim, _stop = setup
    api.set_labels({CONFIG_LABEL: "inuse"})
    assert api.wait(lambda: api.labels().get(STATE_LABEL) == FAILED)
    patches = len(api.label_history)
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "2").exit_code == 0  # still in use: a dry run only
    assert api.wait(lambda: calls(tmp_path) == ["inuse", "inuse --dry-run"])
    assert api.labels().get(STATE_LABEL) == FAILED and len(api.label_history) == patches  # no label churn
    (tmp_path / "apply.log.FREE").touch()  # the VM let go of its device
    assert invoke(sim, "sriov", "disable", "nic0").exit_code == 0
    assert api.wait(lambda: api.labels().get(STATE_LABEL) == SUCCESS), calls(tmp_path)
    assert calls(tmp_path)[-2:] == ["inuse --dry-run", "inuse"]
