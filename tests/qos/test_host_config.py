"""QoS through a host config (docs/qos.md, "Through a host config"):

* ``apply`` of a ``qos:`` section writes the config file *and* tells the running daemon (its reload
  path); ``assert`` compares against what the daemon runs (an edit by hand is picked up by the daemon,
  which listens to its file; a file changed behind the back of a daemon that does not listen, not yet
  loaded, is a difference that ``apply`` repairs with a reload);
* tenants the daemon dropped (their cgroup gone) are shown by ``qos status`` with why, are not offered
  by ``k8s resources``, are a warning of ``apply``, and are picked up by the next ``apply`` once their
  cgroup is there;
* a tenant on a GPU the host does not have, on a GPU in MIG mode, or a process in tenants of several
  GPUs are refused by the QoS planner in one line, through ``apply`` and ``qos tenant add`` alike;
* ``export`` writes no process ids: such tenants are left out, with a warning and a comment.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import as_json, invoke, make_sim
from tests.doors import harness
from tests.qos.conftest import DaemonProc, wait_for


@pytest.fixture
def sleepers() -> Iterator[list[int]]:
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(3)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def cgroup(sim: Path, name: str) -> str:
    """A freezable cgroup v2 directory on the simulated host; its name as a tenant gives it."""
    d = sim / "sys/fs/cgroup" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup.freeze").write_text("0\n")
    (d / "cgroup.procs").write_text("")
    return f"/sys/fs/cgroup/{name}"


def host_file(tmp_path: Path, qos: dict[str, object]) -> Path:
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump({"version": "vgpukit.host/v1", "configs": {"c": {"qos": qos}}}, sort_keys=False))
    return path


def tenants(qos: dict[str, object]) -> dict[str, object]:
    return {"gpus": {"gpu0": {"policy": "fixed-share", "tenants": qos}}}


def running(d: DaemonProc) -> set[str]:
    return {t["name"] for g in d.req(op="status")["gpus"] for t in g["tenants"]}


def test_apply_tells_the_daemon_and_assert_compares_what_it_runs(tmp_path: Path, sleepers: list[int]) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    a, b = ({"class": "online", "share": 40, "pids": [p]} for p in sleepers[:2])
    (sim / "etc/vgpukit").mkdir(parents=True, exist_ok=True)
    (sim / "etc/vgpukit/qos.yaml").write_text(yaml.safe_dump(tenants({"a": a})))
    d = DaemonProc(sim, sim=True).start()
    try:
        assert running(d) == {"a"}
        f = host_file(tmp_path, tenants({"a": a, "b": b}))
        r = invoke(sim, "apply", "-f", str(f), "--json")
        assert r.exit_code == 0, r.stderr
        assert as_json(r)["plan"] == ["write the QoS config /etc/vgpukit/qos.yaml; reload the QoS daemon"]
        assert running(d) == {"a", "b"}  # the daemon was told
        assert invoke(sim, "assert", "-f", str(f)).exit_code == 0
        assert as_json(invoke(sim, "apply", "-f", str(f), "--json"))["plan"] == []
        # an edit by hand: the daemon listens to its file and runs it by itself; assert agrees
        (sim / "etc/vgpukit/qos.yaml").write_text(yaml.safe_dump(tenants({"a": a})))
        f2 = host_file(tmp_path, tenants({"a": a}))
        assert wait_for(lambda: running(d) == {"a"}, timeout=10)  # the daemon runs the edited file
        assert invoke(sim, "assert", "-f", str(f2)).exit_code == 0
        assert as_json(invoke(sim, "apply", "-f", str(f2), "--json"))["plan"] == []
    finally:
        d.stop()


def test_a_daemon_behind_its_file_is_a_difference_that_apply_repairs_with_a_reload(
    tmp_path: Path, sleepers: list[int]
) -> None:
    """A daemon that does not listen to its file (its directory was not there when it started: reloaded
    on SIGHUP only) runs an older config than the file: assert says so, apply's plan is the reload."""
    sim = make_sim(tmp_path / "host", "hgx-a100")
    a = {"class": "online", "share": 40, "pids": [sleepers[0]]}
    (sim / "etc/vgpukit").rmdir()
    d = DaemonProc(sim, sim=True).start()
    try:
        assert running(d) == set()
        (sim / "etc/vgpukit").mkdir()
        (sim / "etc/vgpukit/qos.yaml").write_text(yaml.safe_dump(tenants({"a": a})))  # behind the daemon's back
        f = host_file(tmp_path, tenants({"a": a}))
        r = invoke(sim, "assert", "-f", str(f), "--json")
        assert r.exit_code == 1 and "reload the QoS daemon's configuration" in as_json(r)["differences"][0]
        assert running(d) == set()
        assert invoke(sim, "apply", "-f", str(f)).exit_code == 0
        assert running(d) == {"a"} and invoke(sim, "assert", "-f", str(f)).exit_code == 0
    finally:
        d.stop()


def test_a_dropped_tenant_is_shown_not_offered_and_picked_up_when_it_can_run(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    web = {"class": "online", "share": 40, "cgroup": "/sys/fs/cgroup/web.slice"}
    db = {"class": "offline", "share": 30, "cgroup": cgroup(sim, "db.slice")}
    (sim / "etc/vgpukit").mkdir(parents=True, exist_ok=True)
    (sim / "etc/vgpukit/qos.yaml").write_text(yaml.safe_dump(tenants({"web": web, "db": db})))
    d = DaemonProc(sim, sim=True).start()  # web.slice does not exist: the daemon drops web
    try:
        assert running(d) == {"db"}
        st = as_json(invoke(sim, "qos", "status", "--json"))
        (dropped,) = st["config"]["dropped"]
        assert (dropped["gpu"], dropped["tenant"]) == ("gpu0", "web") and "web.slice" in dropped["reason"]
        human = invoke(sim, "qos", "status").stdout
        assert "not running: gpu0: tenant web (dropped: " in human
        offered = as_json(invoke(sim, "k8s", "resources", "--json"))["resources"]["vgpukit.io/gpu-share"]
        assert any(x["id"].endswith("-db") for x in offered) and not any(x["id"].endswith("-web") for x in offered)
        f = host_file(tmp_path, tenants({"web": web, "db": db}))
        r = invoke(sim, "apply", "-f", str(f), "--json")  # the file is right; web cannot run: a warning
        assert r.exit_code == 0 and as_json(r)["plan"] == []
        assert "qos: gpu0: tenant web is not running (" in r.stderr and "apply cannot start it" in r.stderr
        cgroup(sim, "web.slice")  # the cgroup is there now: apply has the daemon take web again
        r = invoke(sim, "apply", "-f", str(f), "--json")
        assert r.exit_code == 0 and as_json(r)["plan"] == [
            "reload the QoS daemon's configuration /etc/vgpukit/qos.yaml (gpu0: tenant web can run now)"
        ]
        assert running(d) == {"web", "db"} and d.req(op="status")["config"]["dropped"] == []
        assert as_json(invoke(sim, "apply", "-f", str(f), "--json"))["plan"] == []
    finally:
        d.stop()


RULES = [
    ("a GPU the host does not have", "gpu99", None, 3, "not-found", "GPU key gpu99: no gpu99 on this host"),
    ("a GPU in MIG mode", "gpu1", ["partition", "gpu1", "--mig", "3g.20gb"], 4, "conflict",
     "GPU key gpu1: 0000:04:00.0 is in MIG mode"),
    ("a NIC", "nic0", None, 3, "not-found", "GPU key nic0: 0000:05:00.0 is not a GPU"),
]  # fmt: skip


@pytest.mark.parametrize(("rule", "key", "setup", "code", "kind", "says"), RULES, ids=[r[0] for r in RULES])
def test_host_rules_through_every_door(
    tmp_path: Path, sleepers: list[int], rule: str, key: str, setup: list[str] | None, code: int, kind: str, says: str
) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    if setup:
        assert invoke(sim, *setup).exit_code == 0
    body = {"qos": {"gpus": {key: {"tenants": {"t": {"class": "online", "share": 10, "pids": [sleepers[0]]}}}}}}
    area = ["qos", "tenant", "add", key, "t", "--class", "online", "--share", "10", "--pid", str(sleepers[0])]
    d = DaemonProc(sim, sim=True).start()
    try:
        answers = harness.every_door(sim, tmp_path, yaml.safe_dump(body, default_flow_style=True), area)
    finally:
        d.stop()
    for answer in answers:
        assert (answer.code, answer.kind) == (code, kind) and answer.message.startswith(says), answer


def test_a_process_in_tenants_of_three_gpus_is_refused(tmp_path: Path, sleepers: list[int]) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    pid = sleepers[0]
    t = {"class": "online", "share": 10, "pids": [pid]}
    f = host_file(tmp_path, {"gpus": {g: {"tenants": {"t": t}} for g in ("gpu0", "gpu2", "gpu3")}})
    r = invoke(sim, "apply", "-f", str(f))
    assert r.exit_code == 4 and r.stderr.count("\n") == 1, r.stderr
    assert f"process {pid} is in 3 tenants (gpu0/t, gpu2/t, gpu3/t): a process can be in one tenant only" in r.stderr
    d = DaemonProc(sim, sim=True).start()
    try:
        add = ["t", "--class", "online", "--share", "10", "--pid", str(pid)]
        assert invoke(sim, "qos", "tenant", "add", "gpu0", *add).exit_code == 0
        r = invoke(sim, "qos", "tenant", "add", "gpu2", *add)
        assert r.exit_code == 4 and f"process {pid} is in 2 tenants (gpu0/t, gpu2/t)" in r.stderr
    finally:
        d.stop()


def test_export_writes_no_process_ids(tmp_path: Path, sleepers: list[int]) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    qos = tenants({"a": {"class": "online", "share": 40, "pids": [sleepers[0]]}, "b": {"share": 20, "cgroup": "b"}})
    (sim / "etc/vgpukit").mkdir(parents=True, exist_ok=True)
    (sim / "etc/vgpukit/qos.yaml").write_text(yaml.safe_dump(qos))
    r = invoke(sim, "export")
    assert r.exit_code == 0
    doc = yaml.safe_load(r.stdout)
    assert set(doc["configs"]["current"]["qos"]["gpus"]["gpu0"]["tenants"]) == {"b"}
    assert "pids" not in r.stdout and str(sleepers[0]) not in r.stdout
    line = "qos: gpu0: tenant a left out: it names process ids, which mean nothing on another host or after a restart"
    assert r.stdout.startswith(f"# {line}") and f"vgpukit: warning: {line}" in r.stderr
    assert json.loads(invoke(sim, "export", "--json").stdout)["warnings"][0].startswith(line)
