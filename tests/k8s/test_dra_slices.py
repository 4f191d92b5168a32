"""The DRA plugin's ResourceSlice through the official client against the API-server stub."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke, make_sim, short_dir
from tests.k8s.apiserver import SLICES, ApiServer
from tests.k8s.test_dra_plugin import NODE, opener, unusable
from vgpukit.errors import VgpukitError
from vgpukit.k8s.dra.api import ClaimReader, resource_api
from vgpukit.k8s.dra.devices import DRIVER
from vgpukit.k8s.dra.server import Driver
from vgpukit.k8s.dra.slices import Publisher, slice_name


def _ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


def setup(tmp_path: Path, api: ApiServer) -> tuple[Path, Driver, Publisher]:
    sim = make_sim(tmp_path / "h")
    _ok(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci")
    _ok(sim, "partition", "gpu0", "--mig", "3g.20gb,3g.20gb")
    client = resource_api(str(api.kubeconfig(tmp_path / "kubeconfig")))
    driver = Driver(NODE, opener(sim), ClaimReader(client), unusable(sim))
    return sim, driver, Publisher(client, NODE)


def _slice(api: ApiServer) -> dict[str, Any]:
    return api.slices[slice_name(NODE)]


def by_kind(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [d for d in doc["spec"]["devices"] if d["attributes"]["kind"]["string"] == kind]


def test_the_slice_has_one_pool_per_node_and_device_attributes(tmp_path: Path, api: ApiServer) -> None:
    _sim, driver, pub = setup(tmp_path, api)
    assert pub.publish(driver.slice_entries()) is not None
    doc = _slice(api)
    assert doc["spec"]["driver"] == DRIVER and doc["spec"]["nodeName"] == NODE
    assert doc["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    gpu = by_kind(doc, "gpu")[0]["attributes"]
    assert gpu["productName"]["string"].startswith("NVIDIA A100")
    assert gpu["uuid"]["string"].startswith("GPU-") and gpu["pcieRoot"]["string"].startswith("pci")
    assert "memory" in by_kind(doc, "gpu")[0]["capacity"]
    mig = by_kind(doc, "mig")
    assert len(mig) == 2 and mig[0]["attributes"]["migProfile"]["string"] == "3g.20gb"
    assert mig[0]["attributes"]["parentUUID"]["string"].startswith("GPU-")
    assert int(mig[0]["capacity"]["multiprocessors"]["value"]) > 0
    vf = by_kind(doc, "vf")
    assert len(vf) == 2 and vf[0]["attributes"]["driver"]["string"] == "vfio-pci" and "pf" in vf[0]["attributes"]
    assert pub.publish(driver.slice_entries()) is None  # nothing changed: no call
    assert _slice(api)["spec"]["pool"]["generation"] == 1


def test_a_change_bumps_the_generation_and_an_unusable_gpu_leaves(tmp_path: Path, api: ApiServer) -> None:
    sim, driver, pub = setup(tmp_path, api)
    pub.publish(driver.slice_entries())
    _ok(sim, "sim", "fault", "xid", "gpu0", "79")  # gpu0 lost: its slices leave the slice
    assert pub.publish(driver.slice_entries()) is not None
    assert _slice(api)["spec"]["pool"]["generation"] == 2
    assert by_kind(_slice(api), "mig") == []


def test_a_stale_resource_version_conflicts_and_the_next_poll_succeeds(tmp_path: Path, api: ApiServer) -> None:
    _sim, driver, pub = setup(tmp_path, api)
    pub.publish(driver.slice_entries())
    entries = driver.slice_entries()[1:]
    real = pub._write

    def racing(body: dict[str, Any], name: str | None = None) -> Any:  # someone else writes first
        assert name is not None
        with api.changed:
            api.version += 1
            api.slices[name]["metadata"]["resourceVersion"] = str(api.version)
        return real(body, name)

    pub._write = racing  # type: ignore[method-assign]
    with pytest.raises(VgpukitError, match="409"):
        pub.publish(entries)
    pub._write = real  # type: ignore[method-assign]
    assert pub.publish(entries) is not None  # tried again: re-read, replaced
    assert _slice(api)["spec"]["devices"] == entries and _slice(api)["spec"]["pool"]["generation"] == 2


def test_a_stale_slice_of_this_driver_and_node_is_deleted(tmp_path: Path, api: ApiServer) -> None:
    _sim, driver, pub = setup(tmp_path, api)
    pub.publish(driver.slice_entries())
    old = copy.deepcopy(_slice(api))
    old["metadata"]["name"] = "old-name"
    other = copy.deepcopy(old)
    other["metadata"]["name"], other["spec"]["nodeName"] = "other-node-slice", "node-2"
    api.slices.update({"old-name": old, "other-node-slice": other})
    pub.published = None
    pub.publish(driver.slice_entries())
    assert sorted(api.slices) == sorted([slice_name(NODE), "other-node-slice"])
    assert ("DELETE", f"{SLICES}/old-name") in [(m, p) for m, p, _q, _c in api.requests]


def test_the_running_plugin_publishes_its_slice(tmp_path: Path, api: ApiServer) -> None:

    from tests.conftest import sim_host
    from vgpukit.k8s.dra.server import Plugin

    with short_dir("dra") as d:
        _sim, driver, pub = setup(Path(d), api)
        plugin = Plugin(sim_host(_sim), driver, interval=0.1, publisher=pub).start()
        try:
            assert api.wait(lambda: slice_name(NODE) in api.slices)
        finally:
            plugin.close()


def test_a_pool_of_more_than_128_devices_is_published_in_several_slices(tmp_path: Path, api: ApiServer) -> None:
    """The API refuses a slice of more than 128 devices (the stub too, 422): 300 VFs are three slices
    of one pool, each at the pool's generation; fewer devices later, the slices not needed go."""
    client = resource_api(str(api.kubeconfig(tmp_path / "kubeconfig")))
    pub = Publisher(client, NODE)
    entries = [{"name": f"vf-{i:04d}", "attributes": {"kind": {"string": "vf"}}} for i in range(300)]
    assert pub.publish(entries) == "published 300 devices in 3 slices (generation 1)"
    names = [slice_name(NODE), slice_name(NODE, 1), slice_name(NODE, 2)]
    assert sorted(api.slices) == sorted(names)
    assert [len(api.slices[n]["spec"]["devices"]) for n in names] == [128, 128, 44]
    assert [d for n in names for d in api.slices[n]["spec"]["devices"]] == entries
    assert {(api.slices[n]["spec"]["pool"]["generation"], api.slices[n]["spec"]["pool"]["resourceSliceCount"])
            for n in names} == {(1, 3)}  # fmt: skip
    pub.published = None  # a restarted plugin: the same devices change nothing
    assert pub.publish(entries) is None
    assert pub.publish(entries[:100]) == "published 100 devices (generation 2)"
    assert list(api.slices) == [slice_name(NODE)]
    assert api.slices[slice_name(NODE)]["spec"]["pool"] == {"name": NODE, "generation": 2, "resourceSliceCount": 1}


def test_an_unusable_device_is_published_with_a_taint_and_loses_it_when_it_recovers(
    tmp_path: Path, api: ApiServer
) -> None:
    """With device taints (gate DRADeviceTaints on), an unusable GPU stays in the slice, tainted NoSchedule,
    its MIG slices too; the API server's ``timeAdded`` stamp is not a change (no republish every poll)."""
    sim, driver, pub = setup(tmp_path, api)
    driver.taints_ok = True
    pub.publish(*driver.publication())
    _ok(sim, "sim", "fault", "xid", "gpu0", "79")
    assert pub.publish(*driver.publication()) is not None
    tainted = {d["name"] for d in _slice(api)["spec"]["devices"] if d.get("taints")}
    assert tainted and {n.split("-")[0] for n in tainted} == {"mig"}  # gpu0 is in MIG mode: its slices
    assert len(by_kind(_slice(api), "mig")) == 2  # still there, tainted
    (t,) = next(d for d in _slice(api)["spec"]["devices"] if d.get("taints"))["taints"]
    assert (t["key"], t["effect"], "timeAdded" in t) == ("gpu.vgpukit.io/unhealthy", "NoSchedule", True)
    assert not pub.taints_dropped
    pub.published = None  # a restarted plugin: the stamped taints are the same devices
    assert pub.publish(*driver.publication()) is None
    _ok(sim, "sim", "fault", "recover", "gpu0")  # reset: the health layer clears its events
    assert pub.publish(*driver.publication()) is not None
    assert not any(d.get("taints") for d in _slice(api)["spec"]["devices"])


def test_a_cluster_without_device_taints_gets_unusable_devices_left_out(tmp_path: Path, api: ApiServer) -> None:
    """The gate off: the API server drops the taints, so a tainted device would look usable; the running
    plugin (auto) finds that out by its dry run before the first write and leaves unusable devices out
    instead (no tainted device is ever written)."""

    from tests.conftest import sim_host
    from vgpukit.k8s.dra.server import Plugin

    api.device_taints = False
    with short_dir("dra") as d:
        sim, driver, pub = setup(Path(d), api)
        driver.taints, driver.taints_ok = "auto", True
        plugin = Plugin(sim_host(sim), driver, interval=0.1, publisher=pub).start()
        try:
            assert api.wait(lambda: slice_name(NODE) in api.slices and by_kind(_slice(api), "mig"), timeout=30)
            _ok(sim, "sim", "fault", "xid", "gpu0", "79")
            assert api.wait(lambda: not by_kind(_slice(api), "mig"), timeout=30)
        finally:
            plugin.close()
    assert not pub.taints_dropped and driver.taints_ok is False  # found before writing, not read back
    assert not any(d.get("taints") for d in _slice(api)["spec"]["devices"])


def test_an_unexpected_error_does_not_end_publishing(tmp_path: Path, api: ApiServer) -> None:
    """The publisher thread logs any failure and tries again at the next poll (it caught vgpukit's
    errors only: anything else ended it silently and the slice went stale)."""

    from tests.conftest import sim_host
    from vgpukit.k8s.dra.server import Plugin

    with short_dir("dra") as d:
        sim, driver, pub = setup(Path(d), api)
        real, calls = driver.publication, []

        def once_broken() -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("a bug")
            return real()

        driver.publication = once_broken  # type: ignore[method-assign]
        plugin = Plugin(sim_host(sim), driver, interval=0.1, publisher=pub).start()
        try:
            assert api.wait(lambda: slice_name(NODE) in api.slices, timeout=30)
        finally:
            plugin.close()
    assert len(calls) >= 2
