"""What the cluster keeps is found out before the first write, for every feature the plugin publishes:
partitionable devices (``--partitionable auto`` and ``on``), device taints and consumable capacity (a
second dry run), so the first generation is already what the API server keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.k8s.apiserver import SLICES, ApiServer
from tests.k8s.test_dra_capacity import shared_host
from tests.k8s.test_dra_layout import _ok, _plugin, _stop, h100_host, stored_ok
from tests.k8s.test_dra_plugin import NODE
from vgpukit.k8s.dra.slices import slice_name


def _devices(api: ApiServer) -> dict[str, dict[str, object]]:
    return {d["name"]: d for s in list(api.slices.values()) for d in s["spec"].get("devices") or []}


@pytest.mark.parametrize("release", ["1.34", "1.37"])
def test_taints_and_consumable_capacity_are_read_before_the_first_write(release: str, short_tmp: Path) -> None:
    """1.34 (both gates off): the first generation already leaves the lost GPU out and publishes the GPUs
    exclusively; 1.37 (on): shared and tainted from the first generation. One generation either way."""
    api = ApiServer(NODE, release)
    proc = None
    try:
        sim = shared_host(short_tmp / "h")
        _ok(sim, "sim", "fault", "xid", "gpu2", "79")  # lost before the plugin starts
        proc = _plugin(
            sim,
            api.kubeconfig(short_tmp / "kubeconfig"),
            "--share-by-capacity",
            "gpu-0000-03-00-0",
            "--unhealthy-effect",
            "NoExecute",
            "--partitionable",
            "off",
        )
        assert api.wait(lambda: slice_name(NODE) in api.slices and not api.pool_problems(), timeout=60)
        api.wait(lambda: False, timeout=1.5)  # a few more polls: nothing to correct
        stored_ok(api)
        assert {int(s["spec"]["pool"]["generation"]) for s in api.slices.values()} == {1}
        devices = _devices(api)
        lost = "gpu-0000-23-00-0"  # gpu2
        if release == "1.34":
            assert not any(n.startswith("shared-") for n in devices) and "gpu-0000-03-00-0" in devices
            assert lost not in devices and not any(d.get("taints") for d in devices.values())
        else:
            assert "shared-gpu-0000-03-00-0" in devices and "gpu-0000-03-00-0" not in devices
            assert [t["effect"] for t in devices[lost]["taints"]] == ["NoExecute"]  # type: ignore[attr-defined]
        writes = [(m, q.get("dryRun")) for m, p, q, _ in api.requests if p.startswith(SLICES) and m != "GET"]
        first = next(i for i, w in enumerate(writes) if w[1] is None)
        assert writes[:first] == [("POST", ["All"])]  # --partitionable off: the features' dry run only
    finally:
        err = _stop(proc) if proc is not None else ""
        api.close()
    if release == "1.34":
        assert "device taints off (feature gate DRADeviceTaints)" in err, err
        assert "consumable capacity off (feature gate DRAConsumableCapacity)" in err, err
        assert "dropped" not in err, err  # found out before writing, not by reading back
    else:
        assert "device taints on" in err and "consumable capacity on" in err, err


def test_partitionable_on_where_the_server_drops_counters_is_an_error_and_the_static_view(short_tmp: Path) -> None:
    """``--partitionable on`` against 1.35 with its gate off (the default): the dry run shows the counters
    dropped; the plugin says so as an error and publishes the static view rather than slices whose counters
    the scheduler would not see (two claims could get the whole GPU and a slice of it)."""
    api = ApiServer(NODE, "1.35")
    proc = None
    try:
        proc = _plugin(h100_host(short_tmp / "h"), api.kubeconfig(short_tmp / "kubeconfig"), "--partitionable", "on")
        assert api.wait(lambda: slice_name(NODE) in api.slices and not api.pool_problems(), timeout=60)
        api.wait(lambda: False, timeout=1.0)
        stored_ok(api)
        assert list(api.slices) == [slice_name(NODE)]  # the static view: no parts
        assert "gpu-0000-03-00-0" in _devices(api)  # the whole GPU, static
        assert not any("-mig-" in n for n in _devices(api))
    finally:
        err = _stop(proc) if proc is not None else ""
        api.close()
    assert "--partitionable on, but the API server drops shared counters" in err, err
    assert "partitionable devices on" not in err, err
