"""Memory QoS: the policy's rules, every door that sets it, the datagrams, status and metrics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import invoke
from vgpukit.errors import InvalidInput
from vgpukit.host import Host
from vgpukit.qos import demand, planner
from vgpukit.qos.backends import PidBackend
from vgpukit.qos.memory import Holder, quiet, relieve
from vgpukit.qos.mempolicy import MemoryPolicy
from vgpukit.qos.metrics import Metrics
from vgpukit.qos.model import Gpu, QosConfig, Tenant
from vgpukit.qos.runtime import GpuRuntime

MIB = 1 << 20


def holder(name: str, cls: str = "offline", cap: int = 64, used: int = 192, um: int = 192, ev: int = 0) -> Holder:
    return Holder(name, cls, cap * MIB, used * MIB, um * MIB, ev * MIB)


def test_largest_lender_first_and_only_what_is_missing() -> None:
    hs = [holder("a", used=128, um=128), holder("b", used=256, um=256), holder("web", "online", 0, 512, 0)]
    r = relieve(MemoryPolicy(), hs, 100 * MIB)
    assert r.evict == {"b": 100 * MIB} and r.suspend == () and r.freed == 100 * MIB  # b lends 192, a 64
    r = relieve(MemoryPolicy(), hs, 230 * MIB)
    assert r.evict == {"b": 192 * MIB, "a": 38 * MIB} and r.freed == 230 * MIB


def test_the_guarantee_and_plain_memory_are_not_lent() -> None:
    h = holder("a", cap=160, used=192, um=100)  # 92 plain + 100 unified; resident 192, guarantee 160
    assert h.lendable == 32 * MIB
    assert holder("a", cap=64, used=192, um=20).lendable == 20 * MIB  # only unified memory moves
    assert holder("x", "online").lendable == 0


def test_suspension_is_the_last_resort_as_the_policy_says() -> None:
    hs = [holder("a", cap=192), holder("b", cap=64, used=96, um=0)]  # nothing lendable
    assert relieve(MemoryPolicy(), hs, 64 * MIB).suspend == ()
    r = relieve(MemoryPolicy(suspend="checkpoint"), hs, 64 * MIB)
    assert r.suspend == ("a",) and r.freed == 64 * MIB  # the largest holder is enough
    assert relieve(MemoryPolicy(suspend="checkpoint"), hs, 250 * MIB).suspend == ("a", "b")
    assert relieve(MemoryPolicy(suspend="freeze"), hs, 64 * MIB).suspend == ("a", "b")  # frees nothing: all


@given(
    st.lists(st.tuples(st.integers(0, 512), st.integers(0, 512), st.integers(0, 512)), max_size=6),
    st.integers(0, 4096),
)
def test_relief_never_asks_more_than_lendable(tenants: list[tuple[int, int, int]], short: int) -> None:
    hs = [holder(f"t{i}", cap=c, used=u + m, um=m) for i, (c, u, m) in enumerate(tenants)]
    r = relieve(MemoryPolicy(), hs, short * MIB)
    lend = {h.name: h.lendable for h in hs}
    assert all(0 < keep <= lend[n] for n, keep in r.evict.items())
    assert r.freed == min(short * MIB, sum(lend.values()))


def test_memory_comes_back_only_when_quiet() -> None:
    p = MemoryPolicy(restore_ms=300)
    assert not quiet(p, None, False, 10**9)
    assert not quiet(p, 0, False, 299_000_000) and quiet(p, 0, False, 300_000_000)
    assert not quiet(p, 0, True, 10**12)  # an online tenant still busy


def test_burst_is_for_offline_tenants_with_a_cap() -> None:
    doc = {"class": "offline", "share": 10, "pids": [4242], "memory": "1GiB", "memory_burst": "8GiB"}
    t = Tenant.from_dict("b", doc)
    assert t.memory_burst == 8 << 30 and Tenant.from_dict("b", t.to_dict()) == t
    for bad in ({"class": "online"}, {"memory": None}, {"memory_burst": 0}, {"memory_burst": "x"}):
        with pytest.raises(InvalidInput):
            Tenant.from_dict("b", {**doc, **bad})


def test_gpu_memory_policy_round_trip_and_library_config() -> None:
    doc = {
        "memory": {"watermark": "512MiB", "suspend": "checkpoint", "restore_ms": 500},
        "tenants": {
            "b": {"class": "offline", "share": 10, "pids": [4242], "memory": 1 << 30, "memory_burst": 1 << 33},
            "w": {"class": "online", "share": 90, "pids": [4243], "memory": 1 << 30},
        },
    }
    g = Gpu.from_dict("gpu0", doc)
    assert g.memory == MemoryPolicy(512 * MIB, "checkpoint", 500, 10000) and g.memory_qos
    assert Gpu.from_dict("gpu0", g.to_dict()) == g
    assert g.library_config(g.tenant("b")) == {"memory": 1 << 30, "memory_burst": 1 << 33, "class": "offline"}
    assert g.library_config(g.tenant("w"))["watermark"] == 512 * MIB
    assert "memory" not in Gpu("gpu1").to_dict()  # the default policy is not written
    for bad in ({"suspend": "hibernate"}, {"watermark": -1}, {"restore_ms": "1s"}, {"colour": 1}, "on"):
        with pytest.raises(InvalidInput):
            Gpu.from_dict("gpu0", {"memory": bad})


def test_set_through_the_planner_keeps_what_is_not_given() -> None:
    cfg = QosConfig(gpus={"gpu0": Gpu("gpu0", memory=MemoryPolicy(watermark=1))})
    done = planner.change(cfg, planner.SetPolicy("gpu0", None, None, {"suspend": "freeze"}))
    assert done.gpu is not None and done.gpu.memory == MemoryPolicy(watermark=1, suspend="freeze")
    assert any("suspend freeze" in line for line in done.plan)
    assert planner.change(done.config, planner.SetPolicy("gpu0", None, None, {"suspend": "freeze"})).plan == []


def test_memory_datagrams() -> None:
    m = demand.decode(b"1 gpu0 web need 33554432 123\n", 7, 0)
    assert (m.verb, m.value, m.sent_ns, m.busy) == ("need", 32 * MIB, 123, False)
    assert demand.decode(b"1 gpu0 batch moved 4 5\n").verb == "moved"
    assert demand.decode(b"1 gpu0 web busy 5\n").verb == "busy"
    for bad in (b"1 gpu0 web need -1 5", b"1 gpu0 web need 1", b"1 gpu0 web grab 1 5", b"1 gpu0 web need x 5"):
        with pytest.raises(ValueError):
            demand.decode(bad)


def test_qos_commands_refuse_bad_memory_settings(tmp_path: Path) -> None:
    r = invoke(tmp_path, "qos", "set", "gpu0")
    assert r.exit_code == 2 and "--memory-" in r.stderr
    r = invoke(tmp_path, "qos", "set", "gpu0", "--memory-suspend", "hibernate")
    assert r.exit_code == 2
    args = ["qos", "tenant", "add", "gpu0", "w", "--class", "online", "--share", "5", "--pid", "4242"]
    r = invoke(tmp_path, *args, "--memory", "1GiB", "--memory-burst", "4GiB")
    assert r.exit_code == 2 and "offline" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_host_config_qos_section_carries_the_memory_policy(tmp_path: Path) -> None:
    from vgpukit.qos.config import default_config_path

    host = Host(tmp_path)
    want = QosConfig.from_dict({"gpus": {"gpu0": {"memory": {"watermark": "1GiB", "suspend": "checkpoint"}}}})
    plan = planner.plan_config(host, want)
    assert len(plan.steps) == 1
    path = default_config_path(host)
    host.write_file(path, plan.steps[0].text)  # type: ignore[attr-defined]  # what the engine would write
    assert planner.load(host, path).gpus["gpu0"].memory.suspend == "checkpoint"
    assert planner.plan_config(host, want).steps == []  # twice changes nothing


def test_status_and_metrics_show_where_memory_is() -> None:
    clock = iter(range(0, 10**12, 1000)).__next__
    t = Tenant("b", "offline", 40, "pids", pids=(os.getpid(),), memory=64 * MIB, memory_burst=MIB)
    rt = GpuRuntime(Gpu("gpu0", tenants=(t,)), {"b": PidBackend(Host(Path("/")), (os.getpid(),))}, clock)
    snap = rt.status(clock())
    assert snap["memory"]["suspend"] == "off" and snap["tenants"][0]["memory_burst"] == MIB
    snap["memory"].update(rounds=3, suspensions=1, eviction={"count": 3, "p50_ms": 4.0, "p99_ms": 9.0})
    snap["tenants"][0].update(memory_resident=5, memory_evicted=7, memory_suspended=0, memory_state="evicted")
    m = Metrics()
    m.update([snap])
    text = m.text()
    assert 'vgpukit_qos_memory_bytes{class="offline",gpu="gpu0",place="host",tenant="b"} 7.0' in text
    assert 'vgpukit_qos_memory_eviction_rounds_total{gpu="gpu0"} 3.0' in text
    assert 'vgpukit_qos_memory_eviction_p99_seconds{gpu="gpu0"} 0.009' in text
    assert json.dumps(snap)  # the status document stays JSON
