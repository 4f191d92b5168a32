"""A GPU and its MIG slices from one pool: a Hopper GPU (MIG mode changes without a reset) is published as
the whole GPU and every MIG placement from one counter set; the first slice's prepare turns MIG mode on,
the last slice's unprepare turns it off. An Ampere GPU offers what its current mode allows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_ondemand import OnDemandNode, gathered, layout, publish
from tests.k8s.test_dra_plugin import NODE, claim
from vgpukit.k8s.dra.slices import slice_name
from vgpukit.sim.nvml import SimNvml

GPU0 = "gpu-0000-03-00-0"


def _ok(sim: Path, *args: str) -> str:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def mode(sim: Path, gpu: int = 0) -> tuple[bool, bool]:
    n = SimNvml(sim)
    try:
        return n.mig_mode(gpu)
    finally:
        n.close()


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE, "1.37")
    yield server
    server.close()


@pytest.fixture
def node(short_tmp: Path, api: ApiServer) -> Iterator[OnDemandNode]:
    n = OnDemandNode(make_sim(short_tmp / "h", "hgx-h100"), api)
    yield n
    n.close()


def marker(node: OnDemandNode, bdf: str = "0000:03:00.0") -> bool:
    return node.host.dra_mig_mode_record(bdf).exists()


def test_a_hopper_gpu_is_the_whole_gpu_and_every_slice_from_one_counter_set(node: OnDemandNode, api: ApiServer) -> None:
    slices = publish(node, api)
    sets, devices = gathered(slices)
    whole = devices[GPU0]
    assert whole["attributes"]["kind"] == {"string": "gpu"} and whole["attributes"]["uuid"]["string"].startswith("GPU-")
    (use,) = whole["consumesCounters"]
    assert use == {"counterSet": GPU0, "counters": sets[GPU0]["counters"]}  # every counter, all of it
    part = slices[slice_name(NODE, part=GPU0)]["spec"]["devices"]
    assert part[0]["name"] == GPU0 and len(part) == 1 + 7 + 7 + 4 + 3 + 2 + 1 + 1  # whole + 25
    assert all(d["consumesCounters"][0]["counterSet"] == GPU0 for d in part)
    assert GPU0 not in {d["name"] for d in slices[slice_name(NODE)]["spec"].get("devices") or []}  # not static too
    assert mode(node.sim) == (False, False)  # publishing changes nothing


def test_the_first_slice_turns_mig_mode_on_and_the_last_one_off(node: OnDemandNode, api: ApiServer) -> None:
    a = node.add(claim("u-a", "a", f"{GPU0}-mig-3g-40gb-0"))
    b = node.add(claim("u-b", "b", f"{GPU0}-mig-2g-20gb-4"))
    assert node.kubelet.prepare(a).claims["u-a"].error == ""
    assert mode(node.sim) == (True, True) and marker(node) and layout(node.sim) == [(9, 0, 1)]
    _sets, devices = gathered(publish(node, api))
    assert GPU0 in devices  # still offered: it consumes every counter, so it waits for the slices to go
    assert f"{GPU0}-mig-3g-40gb-0" in devices and f"{GPU0}-mig-2g-20gb-4" in devices
    assert node.kubelet.prepare(b).claims["u-b"].error == ""
    assert node.kubelet.unprepare(a).claims["u-a"].error == ""
    assert mode(node.sim) == (True, True) and marker(node) and layout(node.sim) == [(14, 4, 1)]  # b's still there
    assert node.kubelet.unprepare(b).claims["u-b"].error == ""
    assert mode(node.sim) == (False, False) and not marker(node)  # as before the first claim
    whole = node.add(claim("u-w", "w", GPU0))
    assert node.kubelet.prepare(whole).claims["u-w"].error == ""  # the whole GPU again, MIG mode off
    assert node.kubelet.unprepare(whole).claims["u-w"].error == ""


def test_the_node_makes_no_slice_on_a_gpu_a_claim_holds_whole(node: OnDemandNode, api: ApiServer) -> None:
    """Whatever the scheduler did (a cluster that dropped the counters), a MIG slice is not made on a GPU a
    claim holds whole -- MIG mode stays off under that pod -- as the whole GPU is refused while slices exist."""
    whole = node.add(claim("u-w", "w", GPU0))
    assert node.kubelet.prepare(whole).claims["u-w"].error == ""
    sliced = node.add(claim("u-s", "s", f"{GPU0}-mig-1g-10gb-0"))
    refused = node.kubelet.prepare(sliced).claims["u-s"].error
    assert f"the whole GPU {GPU0} is prepared for a claim" in refused, refused
    assert mode(node.sim) == (False, False) and not marker(node)
    assert not node.host.dra_made_record("u-s").exists() and not node.host.dra_claim_record("u-s").exists()
    both = node.add(claim("u-b", "b", GPU0, f"{GPU0}-mig-1g-10gb-0"))  # one claim, both: refused too
    assert node.kubelet.unprepare(whole).claims["u-w"].error == ""
    assert "the whole GPU" in node.kubelet.prepare(both).claims["u-b"].error
    assert mode(node.sim) == (False, False)
    assert node.kubelet.prepare(sliced).claims["u-s"].error == ""  # the GPU free: the slice is made
    assert mode(node.sim) == (True, True)


def test_a_lost_gpus_claimed_slice_stays_published_tainted(node: OnDemandNode, api: ApiServer) -> None:
    """A Hopper GPU with a slice made for a claim falls off the bus: every device of its part (the whole GPU,
    the claim's slice, the placements) stays published with the taint, so NoExecute evicts the pod; the
    other GPUs are untouched; the GPU back, the taints go."""
    node.driver.taints_ok, node.driver.unhealthy_effect = True, "NoExecute"
    ref = node.add(claim("u-a", "a", f"{GPU0}-mig-3g-40gb-0"))
    assert node.kubelet.prepare(ref).claims["u-a"].error == ""
    _sets, before = gathered(publish(node, api))
    _ok(node.sim, "sim", "fault", "xid", "gpu0", "79")
    _sets, devices = gathered(publish(node, api))
    mine = {n for n in before if n.startswith(GPU0)}
    assert {n for n in devices if n.startswith(GPU0)} == mine and f"{GPU0}-mig-3g-40gb-0" in mine
    assert all([t["effect"] for t in devices[n]["taints"]] == ["NoExecute"] for n in mine)
    others = {n for n in before if not n.startswith(GPU0)}
    assert others <= set(devices) and not any(devices[n].get("taints") for n in others)
    _ok(node.sim, "sim", "fault", "recover", "gpu0")
    _sets, devices = gathered(publish(node, api))
    assert set(devices) == set(before) and not any(d.get("taints") for d in devices.values())
    assert node.kubelet.unprepare(ref).claims["u-a"].error == ""


def test_an_operators_mig_mode_is_kept(node: OnDemandNode, api: ApiServer) -> None:
    """MIG mode an operator turned on (``vgpukit partition``) stays on after the claims' slices go, and the
    whole GPU is not offered while it is on."""
    _ok(node.sim, "partition", "gpu0", "--mig", "1g.10gb")
    _sets, devices = gathered(publish(node, api))
    assert GPU0 not in devices and f"{GPU0}-mig-3g-40gb-0" in devices
    ref = node.add(claim("u-o", "o", f"{GPU0}-mig-3g-40gb-0"))
    assert node.kubelet.prepare(ref).claims["u-o"].error == "" and not marker(node)
    assert node.kubelet.unprepare(ref).claims["u-o"].error == ""
    assert mode(node.sim) == (True, True) and layout(node.sim) == [(19, 6, 1)]


def test_a_held_gpu_keeps_mig_mode_until_the_whole_gpu_is_claimed(
    node: OnDemandNode, api: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Something outside the pod holds the GPU when its last slice goes: MIG mode is not turned off under
    it (logged), the record stays, and the whole GPU is still offered; its prepare turns MIG mode off once
    nothing holds the GPU (refused, changing nothing, while something does)."""
    ref = node.add(claim("u-h", "h", f"{GPU0}-mig-1g-10gb-0"))
    assert node.kubelet.prepare(ref).claims["u-h"].error == ""
    pid = _ok(node.sim, "sim", "client", "add", "0", "dcgm").strip()
    with caplog.at_level(logging.WARNING, "vgpukit.k8s.dra"):
        assert node.kubelet.unprepare(ref).claims["u-h"].error == ""
    assert layout(node.sim) == [] and mode(node.sim) == (True, True) and marker(node)
    assert any("MIG mode left on, the GPU is held by dcgm" in r.getMessage() for r in caplog.records)
    _sets, devices = gathered(publish(node, api))
    assert GPU0 in devices
    whole = node.add(claim("u-w", "w", GPU0))
    out = node.kubelet.prepare(whole).claims["u-w"]
    assert "held by dcgm" in out.error and mode(node.sim) == (True, True)
    _ok(node.sim, "sim", "client", "remove", pid)
    assert node.kubelet.prepare(whole).claims["u-w"].error == ""
    assert mode(node.sim) == (False, False) and not marker(node)
    assert node.kubelet.unprepare(whole).claims["u-w"].error == ""


def test_an_ampere_gpu_offers_what_its_mode_allows_and_says_why_once(
    short_tmp: Path,
    api: ApiServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = OnDemandNode(make_sim(short_tmp / "a", "hgx-a100"), api)
    try:
        with caplog.at_level(logging.INFO, "vgpukit.k8s.dra"):
            slices = publish(node, api)
            publish(node, api)
        static = {d["name"] for d in slices[slice_name(NODE)]["spec"]["devices"]}
        assert GPU0 in static and slice_name(NODE, part=GPU0) not in slices  # whole, static; no slices
        why = [r.getMessage() for r in caplog.records if "0000:03:00.0" in r.getMessage()]
        assert len(why) == 1 and "changing it needs a GPU reset, never done under a pod" in why[0]
        ref = node.add(claim("u-x", "x", f"{GPU0}-mig-3g-20gb-0"))  # as if allocated: refused, nothing changed
        out = node.kubelet.prepare(ref).claims["u-x"]
        assert "no device" in out.error and mode(node.sim) == (False, False)
    finally:
        node.close()


def test_the_mig_planner_refuses_to_turn_mig_on_where_it_needs_a_reset(short_tmp: Path) -> None:
    from vgpukit.errors import Conflict
    from vgpukit.mig import layout as mig_layout

    sim = make_sim(short_tmp / "a", "hgx-a100")
    n = SimNvml(sim)
    try:
        gpu = n.gpus()[0]
        with pytest.raises(mig_layout.ResetRequired, match="needs a GPU reset"):
            mig_layout.plan_gi_at(n, mig_layout.GiAtRequest(gpu, 9, 0, turn_on=True))
        with pytest.raises(Conflict, match="MIG mode is off"):
            mig_layout.plan_gi_at(n, mig_layout.GiAtRequest(gpu, 9, 0))
    finally:
        n.close()


@pytest.mark.parametrize(("profile", "immediate"), [("hgx-h100", True), ("h100-vgpu", True), ("hgx-a100", False)])
def test_the_simulated_driver_changes_mig_mode_as_its_model_does(
    short_tmp: Path,
    profile: str,
    immediate: bool,
) -> None:
    """The simulator's own fact (its profile's ``mig_mode_without_reset``): Hopper applies a mode change at
    once, Ampere keeps it pending until a reset; the toolkit's table says the same per model."""
    from vgpukit.mig.layout import needs_reset

    sim = make_sim(short_tmp / "s", profile)
    n = SimNvml(sim)
    try:
        assert n.set_mig_mode(0, True) is immediate
        assert n.mig_mode(0) == (immediate, True)
        assert needs_reset(n.gpus()[0]) is not immediate
        if not immediate:
            n.reset_gpu(0)
            assert n.mig_mode(0) == (True, True)
    finally:
        n.close()
