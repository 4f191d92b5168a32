"""One lost GPU never empties or thins the node's pool: every device the plugin can read stays published,
and the lost GPU's devices it knows -- those claims hold above all, from the claim and made records after a
restart -- are published with the taint, so ``--unhealthy-effect NoExecute`` has Kubernetes evict their pods."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_ondemand import OnDemandNode, gathered, publish
from tests.k8s.test_dra_plugin import NODE, Node, claim
from vgpukit.k8s.drahealth_v1 import api_pb2 as hl

TAINT = [{"key": "gpu.vgpukit.io/unhealthy", "value": "unusable", "effect": "NoExecute"}]


def _ok(sim: Path, *args: str) -> str:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def _effects(dev: dict[str, Any]) -> list[dict[str, str]]:
    return [{k: v for k, v in t.items() if k != "timeAdded"} for t in dev.get("taints") or []]


@pytest.fixture
def api() -> Any:
    server = ApiServer(NODE, "1.37")
    yield server
    server.close()


def _noexecute(node: Node) -> None:
    node.driver.taints_ok, node.driver.unhealthy_effect = True, "NoExecute"


def test_a_restarted_plugin_keeps_the_pool_and_taints_the_claimed_slice_of_a_lost_mig_gpu(
    short_tmp: Path,
    api: ApiServer,
) -> None:
    """hgx-a100, gpu1 in MIG mode with a 3g.20gb slice a claim holds, falls off the bus; the plugin restarts:
    the 7 other GPUs are published as before, the claim's slice with the taint (the placements gpu1 offered
    are not known after a restart: no claim holds them, nothing to evict); the same failure is logged once,
    not at every poll."""
    sim = make_sim(short_tmp / "h")
    _ok(sim, "partition", "gpu1", "--mig", "3g.20gb")
    node = OnDemandNode(sim, api)
    try:
        _noexecute(node)
        _sets, before = gathered(publish(node, api))
        (mig,) = [n for n in before if n.startswith("mig-")]
        ref = node.add(claim("u-m", "m", mig))
        assert node.kubelet.prepare(ref).claims["u-m"].error == ""
        _ok(sim, "sim", "fault", "xid", "gpu1", "79")
        node.restart()
        _noexecute(node)
        seen: list[logging.LogRecord] = []
        catch = logging.Handler(logging.INFO)
        catch.emit = seen.append  # type: ignore[method-assign]
        dra_log = logging.getLogger("vgpukit.k8s.dra")
        dra_log.addHandler(catch)  # the plugin's logger, whatever propagates where
        level, _ = dra_log.level, dra_log.setLevel(logging.INFO)
        try:
            for _ in range(3):
                _sets, devices = gathered(publish(node, api))
        finally:
            dra_log.removeHandler(catch)
            dra_log.setLevel(level)
        placements = {n for n in before if n.startswith("gpu-0000-04-00-0-mig-")}
        assert placements and set(devices) == set(before) - placements, set(before) ^ set(devices)
        assert _effects(devices[mig]) == TAINT
        assert not any(d.get("taints") for n, d in devices.items() if n != mig)
        lines = [r.getMessage() for r in seen if r.levelno >= logging.WARNING or "0000:04:00.0" in r.getMessage()]
        assert len(lines) == len(set(lines)), lines  # each note or failure of the lost GPU once, not at every poll
        (said,) = [line for line in lines if "0000:04:00.0" in line]  # what an operator reads of gpu1: lost
        assert "the GPU is lost" in said and "see: vgpukit health 0000:04:00.0" in said, said
        assert not any(r.levelno >= logging.WARNING for r in seen if "0000:04:00.0" in r.getMessage())  # a note
        view = invoke(sim, "k8s", "resources", "--kubernetes", "1.37", "--node", NODE, "--json")
        assert view.exit_code == 6, view.stderr  # everything else shown, the lost GPU named: not exit 1
        shown = {d["name"]: d for s in _json(view.stdout)["resourceSlices"] for d in s["spec"].get("devices") or []}
        assert _effects(shown[mig])[0]["key"] == TAINT[0]["key"] and set(shown) == set(devices)
        health = {name: status for name, status, _why in node.driver.health_report()}
        assert health[mig] == hl.UNHEALTHY  # the kubelet's health stream says it too
        assert node.kubelet.unprepare(ref).claims["u-m"].error == ""
    finally:
        node.close()


def test_a_running_plugin_keeps_a_lost_gpus_attributes_and_capacities(short_tmp: Path, api: ApiServer) -> None:
    """A GPU that falls off the bus while the plugin runs is published as it was, with the taint: NVML's facts
    of it (UUID, product, memory, SMs) are the last it gave, not dropped (a thinned device matches no
    selector on them)."""
    sim = make_sim(short_tmp / "h")
    node = Node(sim, api)
    lost = "gpu-0000-23-00-0"  # gpu2, MIG mode off
    try:
        _noexecute(node)
        before = {e["name"]: e for e in node.driver.publication()[0]}
        _ok(sim, "sim", "fault", "xid", "gpu2", "79")
        after = {e["name"]: e for e in node.driver.publication()[0]}
        assert set(after) == set(before)
        assert _effects(after[lost]) == TAINT
        assert {k: v for k, v in after[lost].items() if k != "taints"} == before[lost]
    finally:
        node.close()


def test_a_restarted_plugin_taints_a_lost_hopper_gpus_claimed_slice(short_tmp: Path, api: ApiServer) -> None:
    """hgx-h100: a 3g.40gb slice made on demand for a claim on gpu0 (MIG mode turned on for it); gpu0 falls
    off the bus and the plugin restarts: the claim's slice is published with the taint (from its made
    record), every other GPU whole and in slices as before."""
    sim = make_sim(short_tmp / "h", "hgx-h100")
    node = OnDemandNode(sim, api)
    gpu0 = "gpu-0000-03-00-0"
    try:
        _noexecute(node)
        ref = node.add(claim("u-a", "a", f"{gpu0}-mig-3g-40gb-0"))
        assert node.kubelet.prepare(ref).claims["u-a"].error == ""
        _sets, before = gathered(publish(node, api))
        _ok(sim, "sim", "fault", "xid", "gpu0", "79")
        node.restart()
        _noexecute(node)
        _sets, devices = gathered(publish(node, api))
        slice_ = devices[f"{gpu0}-mig-3g-40gb-0"]
        assert _effects(slice_) == TAINT and slice_["attributes"]["migProfile"] == {"string": "3g.40gb"}
        others = {n for n in before if not n.startswith(gpu0)}
        assert others <= set(devices) and not any(devices[n].get("taints") for n in others)
        assert node.kubelet.unprepare(ref).claims["u-a"].error == ""  # the GPU gone: so is its slice
    finally:
        node.close()


def _json(text: str) -> dict[str, Any]:
    import json

    doc: dict[str, Any] = json.loads(text)
    return doc


def test_resources_says_a_lost_mig_gpu_in_one_stderr_line_and_notes_why_it_offers_no_slices(tmp_path: Path) -> None:
    """hgx-a100, gpu1 in MIG mode, falls off the bus: `k8s resources --kubernetes` exits 6 with the one
    not-read line; why its slices are not offered is a note (as for a lost GPU out of MIG mode), not a second
    stderr line (`MIG slices not read: ... GPU_IS_LOST`)."""
    sim = make_sim(tmp_path / "h")
    _ok(sim, "partition", "gpu1", "--mig", "1g.5gb=2")
    _ok(sim, "sim", "fault", "lost", "gpu1")
    for json_out in ((), ("--json",)):  # the command itself: its log lines go where the installed one's go
        cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "resources", "--kubernetes", "1.36"]
        r = subprocess.run([*cmd, "--node", NODE, *json_out], capture_output=True, text=True, timeout=120)
        assert r.returncode == 6, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("vgpukit: error: not read: gpu1 "), r.stderr
    doc = _json(r.stdout)
    assert not doc["sliceWarnings"]
    assert "0000:04:00.0 (NVIDIA A100-SXM4-40GB): the GPU is lost (NVML cannot answer for it)" in "\n".join(
        doc["sliceNotes"]
    )
