"""The node agent against a local API-server stub, with ``vgpukit apply`` as a subprocess."""

from __future__ import annotations

import json
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from vgpukit.k8s.agent import (
    CONFIG_LABEL,
    FAILED,
    MESSAGE_ANNOTATION,
    PENDING,
    STATE_LABEL,
    SUCCESS,
    Agent,
    ApplyRunner,
    kube_api,
    outcome,
)
from vgpukit.stopping import Stop

# A stand-in for `vgpukit apply` following the contract (docs/fleet.md): records its argv, answers by config name.
STAND_IN = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["APPLY_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
name = args[args.index("-c") + 1]
if name == "inuse":
    print(json.dumps({{"schema": "vgpukit.error/v1", "error": "in-use", "exit_code": 4,
                      "message": "0000:05:00.2 is held open by pid 4242 (vm1)"}}))
    sys.exit(4)
if name == "busy" and not os.path.exists(os.environ["APPLY_LOG"] + ".busy"):
    open(os.environ["APPLY_LOG"] + ".busy", "w").close()
    print(json.dumps({{"schema": "vgpukit.error/v1", "error": "busy", "exit_code": 4, "message": "host locked"}}))
    sys.exit(4)
if name == "broken":
    print(json.dumps({{"schema": "vgpukit.error/v1", "error": "invalid-input", "exit_code": 2,
                      "message": "fleet.yaml:3:7: config a: $.configs.a: unknown field (allowed: sriov)"}}))
    sys.exit(2)
print(json.dumps({{"schema": "vgpukit.apply/v1", "config": name, "changed": True, "plan": ["a", "b"]}}))
"""


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer("node-1")
    yield server
    server.close()


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "vgpukit-apply-stand-in"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("APPLY_LOG", str(tmp_path / "apply.log"))
    return exe


def calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "apply.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def agent_for(api: ApiServer, tmp_path: Path, exe: Path, sim: Path | None = None) -> Agent:
    runner = ApplyRunner(str(exe), tmp_path / "fleet.yaml", sim_dir=sim)
    client = kube_api(str(api.kubeconfig(tmp_path / "kubeconfig")))
    return Agent(client, "node-1", runner, log=lambda _line: None, retry_s=0.1)


def test_applies_the_labelled_config_and_reports_pending_then_success(
    api: ApiServer, tmp_path: Path, stand_in: Path
) -> None:
    sim = tmp_path / "h"  # passed through to apply as --sim
    api.set_labels({CONFIG_LABEL: "a100-vms"})  # vgpukit.io/config
    agent = agent_for(api, tmp_path, stand_in, sim)
    assert agent.reconcile(agent.current_config()) is not None
    fleet = str(tmp_path / "fleet.yaml")
    assert calls(tmp_path) == [["--sim", str(sim), "apply", "-f", fleet, "-c", "a100-vms", "--json"]]
    states = [h.get(STATE_LABEL) for h in api.label_history]
    assert states[-2:] == [PENDING, SUCCESS]
    assert api.node["metadata"]["annotations"][MESSAGE_ANNOTATION] == "applied 2 steps"
    # the client's own REST calls: read the node, patch it (merge patch types only)
    assert ("GET", "/api/v1/nodes/node-1") in {(m, p) for m, p, _q, _c in api.requests}
    patches = [c for m, p, _q, c in api.requests if m == "PATCH" and p == "/api/v1/nodes/node-1"]
    assert len(patches) == 2
    assert agent.reconcile(agent.current_config()) is None  # applied: nothing to do
    assert len(calls(tmp_path)) == 1


def test_watches_the_label_and_refuses_changes_that_destroy_devices_in_use(
    api: ApiServer, tmp_path: Path, stand_in: Path
) -> None:
    agent = agent_for(api, tmp_path, stand_in)
    agent.watch_timeout_s = 1  # the agent notices `stop` when a watch ends (and watches again)
    stop = Stop()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert api.wait(lambda: any(m == "GET" and p == "/api/v1/nodes" for m, p, _q, _c in api.requests))
        api.set_labels({CONFIG_LABEL: "first"})
        assert api.wait(lambda: api.labels().get(STATE_LABEL) == SUCCESS)
        api.set_labels({CONFIG_LABEL: "inuse"})
        assert api.wait(lambda: api.labels().get(STATE_LABEL) == FAILED)
        message = api.node["metadata"]["annotations"][MESSAGE_ANNOTATION]
        assert message == "refused: 0000:05:00.2 is held open by pid 4242 (vm1)"
        api.set_labels({CONFIG_LABEL: "busy"})  # host locked: pending, retried, then success
        assert api.wait(lambda: api.labels().get(CONFIG_LABEL) == "busy" and api.labels().get(STATE_LABEL) == SUCCESS)
    finally:
        stop.set()
        thread.join(10)
    names = [c[c.index("-c") + 1] for c in calls(tmp_path)]
    assert names == ["first", "inuse", "busy", "busy"]  # a refused config is not retried on our own patches
    watches = [q for m, p, q, _c in api.requests if m == "GET" and p == "/api/v1/nodes"]
    assert watches and all(q["fieldSelector"] == ["metadata.name=node-1"] and q["watch"] for q in watches)
    assert verbs(api) <= allowed_verbs()  # deploy/kubernetes/rbac.yaml allows every call the client made


def verbs(api: ApiServer) -> set[str]:
    """The RBAC verb of each request the client sent (as the API server's authorizer names it)."""
    out = set()
    for method, path, query, _ctype in api.requests:
        if method == "PATCH":
            out.add("patch")
        elif path == "/api/v1/nodes":
            out.add("watch" if query.get("watch") else "list")
        else:
            out.add("get")
    return out


def allowed_verbs() -> set[str]:
    rbac = Path(__file__).resolve().parents[2] / "deploy/kubernetes/rbac.yaml"
    role = next(d for d in yaml.safe_load_all(rbac.read_text()) if d["kind"] == "ClusterRole")
    return {v for rule in role["rules"] if rule["resources"] == ["nodes"] for v in rule["verbs"]}


def test_outcome_follows_the_apply_contract() -> None:
    assert outcome(0, '{"changed": false, "plan": []}') == outcome(0, '{"changed": false}')
    assert outcome(0, '{"changed": false}').message == "nothing to change"
    assert outcome(0, '{"changed": true, "plan": ["one"]}').message == "applied 1 step"  # not "1 steps"
    assert outcome(0, '{"changed": true, "plan": ["one", "two"]}').message == "applied 2 steps"
    assert outcome(4, '{"error": "busy", "message": "m"}').state == PENDING
    assert outcome(4, '{"error": "in-use", "message": "m"}').message == "refused: m"
    assert outcome(4, '{"error": "no-capacity", "message": "m"}').state == FAILED
    assert outcome(2, "not json").message == "apply exited with 2"
    assert outcome(1, "[1]").state == FAILED


def test_cli_once_against_the_stub(
    api: ApiServer, tmp_path: Path, stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = make_sim(tmp_path / "h")
    api.set_labels({CONFIG_LABEL: "broken"})
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("NODE_NAME", "node-1")  # as the DaemonSet sets it (downward API)
    r = invoke(
        sim, "k8s", "node-agent", "--config-file", str(tmp_path / "fleet.yaml"),
        "--kubeconfig", str(kubeconfig), "--apply-command", str(stand_in), "--once",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert api.labels()[STATE_LABEL] == FAILED
    assert (
        api.node["metadata"]["annotations"][MESSAGE_ANNOTATION]
        == "fleet.yaml:3:7: config a: $.configs.a: unknown field (allowed: sriov)"
    )


def test_cli_errors_are_one_line(tmp_path: Path, stand_in: Path) -> None:
    base = ["k8s", "node-agent", "--node", "node-1", "--config-file", str(tmp_path / "fleet.yaml"), "--once"]
    r = invoke(None, *base, "--kubeconfig", str(tmp_path / "missing"))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("vgpukit: error: cannot load the Kubernetes client configuration: --kubeconfig ")
    gone = ApiServer("node-1")
    kubeconfig = gone.kubeconfig(tmp_path / "kubeconfig")
    gone.close()  # nothing listens there any more
    r = invoke(None, *base, "--kubeconfig", str(kubeconfig), "--apply-command", str(stand_in))
    assert r.exit_code == 1 and r.stderr == "vgpukit: error: Kubernetes API: MaxRetryError\n"
    assert not calls(tmp_path)


@pytest.mark.parametrize(
    "command",
    [("node-agent", "--config-file", "fleet.yaml", "--once"), ("dra-plugin",)],
    ids=["node-agent", "dra-plugin"],
)
def test_a_kubeconfig_that_is_a_directory_is_said_to_be_one(tmp_path: Path, command: tuple[str, ...]) -> None:
    """Every door that takes --kubeconfig: a directory is named as one (it was "not a kubeconfig file")."""
    sim = make_sim(tmp_path / "h")
    r = invoke(sim, "k8s", *command, "--node", "node-1", "--kubeconfig", str(tmp_path))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr == (
        f"vgpukit: error: cannot load the Kubernetes client configuration: --kubeconfig {tmp_path}: is a directory\n"
    )


REAL_FLEET = """\
version: vgpukit.host/v1
configs:
  four-vfs:
    sriov:
      - {device: nic0, vfs: 4, driver: vfio-pci}
  two-vfs:
    sriov:
      - {device: nic0, vfs: 2, driver: vfio-pci}
"""


def test_the_real_apply_on_a_simulated_node_success_then_refused_while_a_vm_holds_a_vf(
    api: ApiServer, tmp_path: Path
) -> None:
    """No stand-in: the agent runs the installed `vgpukit apply` against a simulated hgx-a100."""
    sim = make_sim(tmp_path / "h")
    (tmp_path / "fleet.yaml").write_text(REAL_FLEET)
    vgpukit = Path(sys.executable).with_name("vgpukit")
    agent = agent_for(api, tmp_path, vgpukit, sim)

    api.set_labels({CONFIG_LABEL: "four-vfs"})
    assert agent.reconcile(agent.current_config()) is not None
    assert api.labels()[STATE_LABEL] == SUCCESS, api.node["metadata"].get("annotations")
    listed = json.loads(invoke(sim, "--json", "sriov", "list").stdout)
    nic0 = json.dumps(listed)
    assert nic0.count('"vfio-pci"') >= 4
    assert invoke(sim, "assert", "-f", str(tmp_path / "fleet.yaml"), "-c", "four-vfs").exit_code == 0

    # a VM holds the last VF: going down to 2 VFs would destroy it -> refused, nothing changed
    held = invoke(sim, "sim", "hold", "0000:05:00.5", "--vm", "vm1")
    assert held.exit_code == 0, held.stderr
    api.set_labels({CONFIG_LABEL: "two-vfs"})
    assert agent.reconcile(agent.current_config()) is not None
    assert api.labels()[STATE_LABEL] == FAILED
    assert api.node["metadata"]["annotations"][MESSAGE_ANNOTATION].startswith("refused: ")
    assert invoke(sim, "assert", "-f", str(tmp_path / "fleet.yaml"), "-c", "four-vfs").exit_code == 0
