"""Sharing in the claim: opaque vgpukit.io/v1 parameters, parsed strictly and served through the kubelet peer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tests.conftest import make_sim
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_plugin import Node, _ok, api, claim, hgx  # noqa: F401 (fixtures)
from tests.qos.conftest import DaemonProc
from vgpukit.errors import InvalidInput
from vgpukit.k8s.dra import mps
from vgpukit.k8s.dra.capacity import qos_key
from vgpukit.k8s.dra.config import Mps, TimeSlice, configs, parameters
from vgpukit.k8s.dra.devices import DRIVER

SCHEMA = json.loads((Path(__file__).parents[2] / "vgpukit/data/schemas/dra/sharing-config.json").read_text())
V = "vgpukit.io/v1"
SECRET = "zz-not-to-be-quoted"  # a value a refusal must never repeat


def opaque(params: dict[str, Any], source: str = "FromClaim", requests: list[str] | None = None) -> dict[str, Any]:
    return {"source": source, "requests": requests or [], "opaque": {"driver": DRIVER, "parameters": params}}


values = st.one_of(
    st.integers(-5, 200), st.sampled_from(["4Gi", "512Mi", "1", "4G", SECRET, "", "online", "offline"]), st.none()
)
docs = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from([V, "v1", SECRET]),
        "kind": st.sampled_from(["TimeSliceConfig", "MemoryCapConfig", "MpsConfig", "QosClassConfig", "X"]),
    },
    optional={
        k: values
        for k in ("class", "share", "policy", "limit", "activeThreadPercentage", "pinnedDeviceMemoryLimit", "bogus")
    },
)


@given(docs)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_the_parser_accepts_exactly_what_the_schema_does_and_refuses_in_one_line(doc: dict[str, Any]) -> None:
    valid = Draft202012Validator(SCHEMA).is_valid(doc)
    try:
        parameters(doc, "config entry 1")
        ok = True
    except InvalidInput as err:
        ok = False
        text = str(err)
        assert "\n" not in text and text.startswith("config entry 1: ") and len(text) < 200
        assert SECRET not in text
    assert ok == valid, doc


@pytest.mark.parametrize("kind", ["TimeSliceConfig", "MemoryCapConfig", "MpsConfig", "QosClassConfig"])
def test_an_unknown_field_lists_every_allowed_field_kind_too(kind: str) -> None:
    """The list of allowed fields names the tag (``kind``) as well as the kind's own fields (it left it out)."""
    with pytest.raises(InvalidInput) as err:
        parameters({"apiVersion": V, "kind": kind, SECRET: 1}, "config entry 1")
    allowed = str(err.value).partition("(allowed: ")[2].rstrip(")").split(", ")
    assert str(err.value).startswith("config entry 1: $: unknown field (allowed: ") and SECRET not in str(err.value)
    assert "kind" in allowed and "apiVersion" in allowed, allowed


def test_precedence_class_first_then_claim_later_entries_win_requests_and_subrequests() -> None:
    entries = [
        opaque({"apiVersion": V, "kind": "TimeSliceConfig", "share": 30}),
        opaque({"apiVersion": V, "kind": "TimeSliceConfig", "share": 50, "class": "online"}, source="FromClass"),
        opaque({"apiVersion": V, "kind": "MpsConfig", "activeThreadPercentage": 20}, requests=["b"]),
        opaque({"apiVersion": V, "kind": "TimeSliceConfig", "share": 10}, requests=["a"]),
        {"opaque": {"driver": "other.example.com", "parameters": {"anything": 1}}},
    ]
    found = configs(entries, DRIVER)
    assert found.for_request("a").time_slice == TimeSlice("offline", 10)
    assert found.for_request("a/sub").time_slice == TimeSlice("offline", 10)
    assert found.for_request("b").time_slice == TimeSlice("offline", 30)
    assert found.for_request("b").mps == Mps(20, None)
    assert found.for_request("c").mps is None


def _spec(node: Node, uid: str) -> dict[str, Any]:
    return json.loads(node.host.dra_claim_cdi_spec(uid).read_text())


def _env(node: Node, uid: str) -> list[str]:
    return [e for d in _spec(node, uid)["devices"] for e in d["containerEdits"].get("env", [])]


def sim_with_library(path: Path) -> Path:
    sim = make_sim(path)
    _ok(sim, "partition", "gpu0", "--mig", "3g.20gb,3g.20gb")
    lib = sim / "usr/lib/vgpukit/libvgpukit-cuda.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_text("simulated library\n")
    return sim


def _kinds(node: Node) -> dict[str, str]:
    return {d.kind: n for n, d in sorted(node.driver.devices().items(), reverse=True)}


@pytest.fixture
def node(short_tmp: Path, api: ApiServer):  # type: ignore[no-untyped-def]  # noqa: F811
    n = Node(sim_with_library(short_tmp / "h"), api)
    yield n
    n.close()
    base = n.host.state_dir("dra", "mps")
    for d in base.iterdir() if base.is_dir() else []:  # no daemon outlives a test
        p = mps.pid(n.host, d.name)
        if p:
            os.kill(p, signal.SIGKILL)


def test_memory_cap_preloads_the_cuda_library_with_the_cap(node: Node) -> None:
    gpu = _kinds(node)["gpu"]
    cfg = [opaque({"apiVersion": V, "kind": "MemoryCapConfig", "limit": "4Gi"})]
    ref = node.add(claim("m-1", "m1", gpu, config=cfg))
    out = node.kubelet.prepare(ref).claims["m-1"]
    assert out.error == ""
    env = _env(node, "m-1")
    assert "VGPUKIT_CUDA_MEMORY=4294967296" in env and "LD_PRELOAD=/usr/lib/vgpukit/libvgpukit-cuda.so" in env
    assert "VGPUKIT_CUDA_TENANT=dra-m-1" in env
    assert node.kubelet.unprepare(ref).claims["m-1"].error == ""


def test_mps_daemon_per_device_started_once_limits_set_stopped_with_the_last_claim(node: Node) -> None:
    kinds = _kinds(node)
    gpu = kinds["gpu"]
    uuid = qos_key(node.driver.devices()[gpu])
    first = [
        opaque({"apiVersion": V, "kind": "MpsConfig", "activeThreadPercentage": 40, "pinnedDeviceMemoryLimit": "2Gi"})
    ]
    r1 = node.add(claim("p-1", "p1", gpu, config=first))
    assert node.kubelet.prepare(r1).claims["p-1"].error == ""
    pid = mps.pid(node.host, uuid)
    assert pid is not None
    again = node.kubelet.prepare(r1).claims["p-1"]  # prepared already: the same answer, no second daemon
    assert again.error == "" and list(again.devices[0].cdi_device_ids) == [f"vgpukit.io/claim=p-1-{gpu}"]
    assert mps.pid(node.host, uuid) == pid
    log = (mps.directory(node.host, uuid) / "log" / "control.log").read_text()
    assert f"CUDA_VISIBLE_DEVICES={uuid}" in log and "set_default_active_thread_percentage 40" in log
    assert "set_default_device_pinned_mem_limit 0 2048M" in log
    env = _env(node, "p-1")
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40" in env and any(e.startswith("CUDA_MPS_PIPE_DIRECTORY=") for e in env)
    # a second claim: same daemon, tighter limits allowed, looser refused
    r2 = node.add(
        claim("p-2", "p2", gpu, config=[opaque({"apiVersion": V, "kind": "MpsConfig", "activeThreadPercentage": 20})])
    )
    assert node.kubelet.prepare(r2).claims["p-2"].error == ""
    assert mps.pid(node.host, uuid) == pid
    r3 = node.add(
        claim("p-3", "p3", gpu, config=[opaque({"apiVersion": V, "kind": "MpsConfig", "activeThreadPercentage": 90})])
    )
    bad = node.kubelet.prepare(r3).claims["p-3"]
    assert "at most 40%" in bad.error and not node.host.dra_claim_record("p-3").exists()
    # restart between prepare and unprepare: the record still knows the daemon
    node.restart()
    assert node.kubelet.unprepare(r1).claims["p-1"].error == ""
    assert mps.pid(node.host, uuid) == pid  # p-2 still uses it
    assert node.kubelet.unprepare(r2).claims["p-2"].error == ""
    assert mps.pid(node.host, uuid) is None
    assert node.kubelet.unprepare(r2).claims["p-2"].error == ""  # unknown now: a no-op


def test_mps_on_a_mig_slice(node: Node) -> None:
    mig = _kinds(node)["mig"]
    uuid = qos_key(node.driver.devices()[mig])
    ref = node.add(claim("g-1", "g1", mig, config=[opaque({"apiVersion": V, "kind": "MpsConfig"})]))
    assert node.kubelet.prepare(ref).claims["g-1"].error == ""
    assert mps.pid(node.host, uuid) is not None
    assert f"CUDA_VISIBLE_DEVICES={uuid}" in (mps.directory(node.host, uuid) / "log" / "control.log").read_text()
    assert node.kubelet.unprepare(ref).claims["g-1"].error == ""
    assert mps.pid(node.host, uuid) is None


def test_conflicting_sharing_is_refused_with_nothing_done(node: Node) -> None:
    gpu = _kinds(node)["gpu"]
    cfg = [
        opaque({"apiVersion": V, "kind": "MpsConfig"}),
        opaque({"apiVersion": V, "kind": "TimeSliceConfig", "share": 10}),
    ]
    out = node.kubelet.prepare(node.add(claim("c-1", "c1", gpu, config=cfg))).claims["c-1"]
    assert "MPS and time-slicing" in out.error and not out.devices
    assert not node.host.dra_claim_record("c-1").exists()
    assert mps.pid(node.host, qos_key(node.driver.devices()[gpu])) is None
    bad = [opaque({"apiVersion": V, "kind": "MemoryCapConfig", "limit": "lots"})]
    out = node.kubelet.prepare(node.add(claim("c-2", "c2", gpu, config=bad))).claims["c-2"]
    assert out.error.startswith("config entry 1: $.limit: expected") and "lots" not in out.error


def _pod_cgroup(sim: Path, pod: str) -> Path:
    cg = (
        sim
        / "sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice"
        / f"kubepods-besteffort-pod{pod.replace('-', '_')}.slice"
    )
    cg.mkdir(parents=True)
    (cg / "cgroup.freeze").write_text("0")
    (cg / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    (cg / "cgroup.procs").write_text("")
    return cg


def _reserved(pod: str) -> list[dict[str, str]]:
    return [{"resource": "pods", "name": pod, "uid": pod}]


@pytest.fixture
def qos(node: Node):  # type: ignore[no-untyped-def]
    d = DaemonProc(node.sim, sim=True).start()
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.stop()


def _tenants(d: DaemonProc, key: str) -> dict[str, Any]:
    gpus = d.req(op="status")["gpus"]
    return {t["name"]: t for g in gpus if g["gpu"] == key for t in g["tenants"]}


def test_time_slice_is_a_qos_tenant_of_the_pods_cgroup_refused_over_100_percent(node: Node, qos: DaemonProc) -> None:
    gpu = _kinds(node)["gpu"]
    key = qos_key(node.driver.devices()[gpu])
    _pod_cgroup(node.sim, "pod-a")
    _pod_cgroup(node.sim, "pod-b")
    ts = [
        opaque({"apiVersion": V, "kind": "TimeSliceConfig", "class": "online", "share": 60, "policy": "fixed-share"}),
        opaque({"apiVersion": V, "kind": "MemoryCapConfig", "limit": "1Gi"}),
    ]
    a = claim("t-1", "t1", gpu, config=ts)
    a["status"]["reservedFor"] = _reserved("pod-a")
    ra = node.add(a)
    assert node.kubelet.prepare(ra).claims["t-1"].error == ""
    tenant = _tenants(qos, key)["dra-t-1"]
    assert (tenant["class"], tenant["share"], tenant["memory"]) == ("online", 60, 1 << 30)
    env = _env(node, "t-1")
    assert {"VGPUKIT_QOS_TENANT=dra-t-1", f"VGPUKIT_QOS_GPU={key}", "VGPUKIT_CUDA_MEMORY=1073741824"} <= set(env)
    # 60% + 50% online on one GPU: the QoS planner's refusal, nothing done
    b = claim(
        "t-2", "t2", gpu, config=[opaque({"apiVersion": V, "kind": "TimeSliceConfig", "class": "online", "share": 50})]
    )
    b["status"]["reservedFor"] = _reserved("pod-b")
    out = node.kubelet.prepare(node.add(b)).claims["t-2"]
    assert "online shares add up to 110%" in out.error and "dra-t-2" not in _tenants(qos, key)
    (status,) = [g for g in qos.req(op="status")["gpus"] if g["gpu"] == key]
    assert status["policy"] == "fixed-share"  # the first time-sliced claim of a GPU without tenants sets it
    burst = {"apiVersion": V, "kind": "TimeSliceConfig", "share": 10, "policy": "burst-share"}
    c = claim("t-4", "t4", gpu, config=[opaque(burst)])
    c["status"]["reservedFor"] = _reserved("pod-b")
    out = node.kubelet.prepare(node.add(c)).claims["t-4"]
    assert "QoS tenants run under fixed-share, the claim asks burst-share" in out.error
    # MPS on a time-sliced device: refused
    m = node.add(claim("t-3", "t3", gpu, config=[opaque({"apiVersion": V, "kind": "MpsConfig"})]))
    assert "time-slices it" in node.kubelet.prepare(m).claims["t-3"].error
    assert mps.pid(node.host, key) is None
    node.restart()
    assert node.kubelet.unprepare(ra).claims["t-1"].error == ""
    assert "dra-t-1" not in _tenants(qos, key)
    # with the QoS daemon stopped, unprepare takes the tenant out of its run-time record
    assert node.kubelet.prepare(ra).claims["t-1"].error == ""
    qos.stop()
    runtime = node.sim / "run/vgpukit/qos/runtime.json"
    assert "dra-t-1" in json.loads(runtime.read_text())["tenants"][key]
    assert node.kubelet.unprepare(ra).claims["t-1"].error == ""
    assert "dra-t-1" not in json.loads(runtime.read_text())["tenants"][key]


CRASH = """
import os, signal, sys
from pathlib import Path
from vgpukit.clikit.context import App
from vgpukit.k8s.dra import claims, mps, sharing
from vgpukit.k8s.dra.devices import dra_devices
from vgpukit.node.inventory import Options, collect
from vgpukit.wiring import Wiring
import json

sim, kind, doc = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
cls = {"mps": mps.MpsDaemon, "qos": sharing.QosTenant, "policy": sharing.QosPolicy}[kind]
done = cls.apply

def apply(self, env):
    done(self, env)
    os.kill(os.getpid(), signal.SIGKILL)  # kill -9 right after the step changed the host

cls.apply = apply
app = App(sim_dir=sim, command="vgpukit k8s dra-plugin", wiring=Wiring())
offered = dra_devices(collect(app.host, app.nvml, Options(replicas=1)))
if sys.argv[4:] == ["unprepare"]:
    claims.unprepare(app.env, doc["metadata"]["uid"])
results = claims.results_of(doc, "node-1")
claims.prepare(app.env, doc["metadata"]["uid"], {"namespace": "default", "name": "x"}, results, offered)
"""


def _not_prepared(node: Node, uid: str) -> bool:
    """No record, or the intent a prepare writes before its host changes (state ``preparing``): the
    next prepare finishes it, an unprepare undoes it."""
    path = node.host.dra_claim_record(uid)
    return not path.exists() or json.loads(path.read_text())["state"] == "preparing"


def _crash(sim: Path, kind: str, doc: dict[str, Any], *more: str) -> int:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    argv = [sys.executable, "-c", CRASH, str(sim), kind, json.dumps(doc), *more]
    return subprocess.run(argv, env=env, check=False).returncode


def test_kill_9_after_the_mps_daemon_started_is_repaired_by_the_next_command(node: Node) -> None:
    gpu = _kinds(node)["gpu"]
    key = qos_key(node.driver.devices()[gpu])
    doc = claim("k-1", "k1", gpu, config=[opaque({"apiVersion": V, "kind": "MpsConfig", "activeThreadPercentage": 50})])
    assert _crash(node.sim, "mps", doc) == -signal.SIGKILL
    assert mps.pid(node.host, key) is not None and _not_prepared(node, "k-1")
    _ok(node.sim, "recover")
    assert mps.pid(node.host, key) is None
    # the plugin serves the claim afterwards as if nothing happened
    ref = node.add(doc)
    assert node.kubelet.prepare(ref).claims["k-1"].error == "" and mps.pid(node.host, key) is not None
    assert node.kubelet.unprepare(ref).claims["k-1"].error == "" and mps.pid(node.host, key) is None


def test_memory_burst_makes_an_offline_tenant_lend_its_memory(node: Node, qos: DaemonProc) -> None:
    """Memory QoS through DRA: MemoryCapConfig's burst is the offline QoS tenant's burst (the daemon writes
    it to the library's config, the claim's environment carries it); on an online tenant it is refused."""
    gpu = _kinds(node)["gpu"]
    key = qos_key(node.driver.devices()[gpu])
    _pod_cgroup(node.sim, "pod-a")
    cfg = [
        opaque({"apiVersion": V, "kind": "TimeSliceConfig", "class": "offline", "share": 30}),
        opaque({"apiVersion": V, "kind": "MemoryCapConfig", "limit": "1Gi", "burst": "8Gi"}),
    ]
    a = claim("b-1", "b1", gpu, config=cfg)
    a["status"]["reservedFor"] = _reserved("pod-a")
    assert node.kubelet.prepare(node.add(a)).claims["b-1"].error == ""
    tenant = _tenants(qos, key)["dra-b-1"]
    assert (tenant["class"], tenant["memory"], tenant["memory_burst"]) == ("offline", 1 << 30, 8 << 30)
    assert {"VGPUKIT_CUDA_MEMORY_BURST=8589934592", "VGPUKIT_CUDA_CLASS=offline"} <= set(_env(node, "b-1"))
    config = (node.sim / "run/vgpukit/cuda/dra-b-1/config").read_text()
    assert "memory_burst=8589934592\nclass=offline\n" in config
    online = [
        opaque({"apiVersion": V, "kind": "TimeSliceConfig", "class": "online", "share": 30}),
        opaque({"apiVersion": V, "kind": "MemoryCapConfig", "limit": "1Gi", "burst": "8Gi"}),
    ]
    b = claim("b-2", "b2", gpu, config=online)
    b["status"]["reservedFor"] = _reserved("pod-a")
    out = node.kubelet.prepare(node.add(b)).claims["b-2"]
    assert "a memory burst is for offline tenants" in out.error and "dra-b-2" not in _tenants(qos, key)


def test_kill_9_after_the_qos_tenant_was_added_is_repaired_by_the_next_command(node: Node, qos: DaemonProc) -> None:
    gpu = _kinds(node)["gpu"]
    key = qos_key(node.driver.devices()[gpu])
    _pod_cgroup(node.sim, "pod-k")
    doc = claim("k-2", "k2", gpu, config=[opaque({"apiVersion": V, "kind": "TimeSliceConfig", "share": 30})])
    doc["status"]["reservedFor"] = _reserved("pod-k")
    assert _crash(node.sim, "qos", doc) == -signal.SIGKILL
    assert "dra-k-2" in _tenants(qos, key) and _not_prepared(node, "k-2")
    _ok(node.sim, "recover")
    assert "dra-k-2" not in _tenants(qos, key)
    assert _crash(node.sim, "qos", doc) == -signal.SIGKILL
    ref = node.add(doc)  # the plugin's next prepare repairs first (the engine's session), then prepares again
    assert node.kubelet.prepare(ref).claims["k-2"].error == ""
    assert node.kubelet.unprepare(ref).claims["k-2"].error == ""
    assert "dra-k-2" not in _tenants(qos, key)


def test_kill_9_after_the_mps_daemon_stopped_in_unprepare_leaves_the_claim_prepared_then_unprepares(node: Node) -> None:
    gpu = _kinds(node)["gpu"]
    key = qos_key(node.driver.devices()[gpu])
    doc = claim("k-3", "k3", gpu, config=[opaque({"apiVersion": V, "kind": "MpsConfig", "activeThreadPercentage": 50})])
    ref = node.add(doc)
    assert node.kubelet.prepare(ref).claims["k-3"].error == ""
    assert _crash(node.sim, "mps", doc, "unprepare") == -signal.SIGKILL  # killed once the daemon stopped
    assert mps.pid(node.host, key) is None and node.host.dra_claim_record("k-3").exists()
    _ok(node.sim, "recover")  # the unprepare is undone as a whole: the claim is prepared, its daemon runs
    assert mps.pid(node.host, key) is not None
    assert (
        "set_default_active_thread_percentage 50" in (mps.directory(node.host, key) / "log" / "control.log").read_text()
    )
    assert node.kubelet.unprepare(ref).claims["k-3"].error == ""
    assert mps.pid(node.host, key) is None and _not_prepared(node, "k-3")


kinds_params = st.sampled_from(
    [
        ("TimeSliceConfig", {"share": 10}),
        ("TimeSliceConfig", {"share": 20, "class": "online"}),
        ("MemoryCapConfig", {"limit": "1Gi"}),
        ("MemoryCapConfig", {"limit": 4096}),
        ("MpsConfig", {"activeThreadPercentage": 30}),
        ("MpsConfig", {}),
    ]
)
entry_lists = st.lists(
    st.tuples(
        kinds_params, st.sampled_from(["FromClass", "FromClaim"]), st.sampled_from([[], ["a"], ["b"], ["a", "b"]])
    ),
    max_size=8,
)


@given(entry_lists, st.sampled_from(["a", "b", "a/x", "c"]))
def test_for_each_kind_the_last_applicable_entry_wins_class_entries_before_the_claims(
    entries: list[Any], request: str
) -> None:
    docs = [opaque({"apiVersion": V, "kind": k, **p}, src, reqs) for (k, p), src, reqs in entries]
    got = configs(docs, DRIVER).for_request(request)
    ordered = [e for e in entries if e[1] == "FromClass"] + [e for e in entries if e[1] == "FromClaim"]
    applies = [(k, p) for (k, p), _src, reqs in ordered if not reqs or request.partition("/")[0] in reqs]
    last = {k: p for k, p in applies}
    assert (got.time_slice is None) == ("TimeSliceConfig" not in last)
    assert got.time_slice is None or got.time_slice.share == last["TimeSliceConfig"]["share"]
    assert (got.memory is None) == ("MemoryCapConfig" not in last)
    assert got.memory is None or got.memory in ({"1Gi": 1 << 30}.get(str(last["MemoryCapConfig"]["limit"]), 4096),)
    assert (got.mps is None) == ("MpsConfig" not in last)
    assert got.mps is None or got.mps.thread_percentage == last["MpsConfig"].get("activeThreadPercentage")


def test_kill_9_after_the_qos_policy_was_set_puts_the_policy_back(node: Node, qos: DaemonProc) -> None:
    gpu = _kinds(node)["gpu"]
    key = qos_key(node.driver.devices()[gpu])
    _pod_cgroup(node.sim, "pod-p")
    ts = {"apiVersion": V, "kind": "TimeSliceConfig", "share": 30, "policy": "burst-share"}
    doc = claim("k-4", "k4", gpu, config=[opaque(ts)])
    doc["status"]["reservedFor"] = _reserved("pod-p")
    policy = lambda: {g["gpu"]: g["policy"] for g in qos.req(op="status")["gpus"]}.get(key)  # noqa: E731
    before = policy()
    assert _crash(node.sim, "policy", doc) == -signal.SIGKILL
    assert policy() == "burst-share" and "dra-k-4" not in _tenants(qos, key)
    _ok(node.sim, "recover")
    assert policy() == (before or "best-effort") and _not_prepared(node, "k-4")


def test_sharing_a_vf_is_refused(short_tmp: Path, api: ApiServer) -> None:  # noqa: F811
    node = Node(hgx(short_tmp / "h"), api)
    try:
        vf = _kinds(node)["vf"]
        cfg = [opaque({"apiVersion": V, "kind": "MpsConfig"})]
        out = node.kubelet.prepare(node.add(claim("v-1", "v1", vf, config=cfg))).claims["v-1"]
        assert out.error == f"device {vf}: sharing applies to whole GPUs and MIG devices, not a vf"
        assert not node.host.dra_claim_record("v-1").exists()
    finally:
        node.close()
