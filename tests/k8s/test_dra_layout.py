"""The ResourceSlice layout of each Kubernetes release, found out by asking the API server (version,
discovery, a dry run of the gate), against a stand-in that validates as that release does."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import SLICES, ApiServer
from tests.k8s.test_dra_plugin import NODE, opener, unusable
from vgpukit.errors import Unsupported
from vgpukit.k8s.dra import cluster, pool
from vgpukit.k8s.dra.api import ClaimReader, resource_api
from vgpukit.k8s.dra.server import Driver
from vgpukit.k8s.dra.slices import Publisher, slice_name

RELEASES = ("1.34", "1.35", "1.36", "1.37")
ROOT = str(Path(__file__).resolve().parents[2])


def _ok(sim: Path, *args: str) -> str:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def h100_host(path: Path) -> Path:
    """hgx-h100: gpu1 in MIG mode with an operator's 3g.40gb, the others MIG off (toggled at a slice)."""
    sim = make_sim(path, "hgx-h100")
    _ok(sim, "partition", "gpu1", "--mig", "3g.40gb")
    return sim


def stored_ok(api: ApiServer) -> None:
    """Every stored slice valid for the release (its strict schema), no write refused, every pool whole."""
    assert api.refused == [], api.refused
    assert api.pool_problems() == []
    for doc in api.slices.values():
        clean = {**doc, "metadata": {"name": doc["metadata"]["name"]}}
        kubernetes_validate.validate(clean, api.release, strict=True)
        assert doc["spec"]["nodeName"] == NODE and doc["spec"]["pool"]["resourceSliceCount"] == len(api.slices)


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_gets_its_layout_and_no_write_is_refused(release: str, short_tmp: Path) -> None:
    api = ApiServer(NODE, release)
    api.partitionable = True  # the gate turned on where it is off by default
    try:
        sim = h100_host(short_tmp / "h")
        client = resource_api(str(api.kubeconfig(short_tmp / "kubeconfig")))
        driver = Driver(NODE, opener(sim), ClaimReader(client), unusable(sim), "on")
        pub = Publisher(client, NODE, "auto")
        assert pub.publish(*driver.publication()) is not None
        stored_ok(api)
        specs = {n: d["spec"] for n, d in api.slices.items()}
        gpu0 = specs[slice_name(NODE, part="gpu-0000-03-00-0")]
        names = [d["name"] for d in gpu0["devices"]]
        assert names[0] == "gpu-0000-03-00-0" and len(names) == 26  # the whole GPU, then every placement
        if release == "1.34":  # counter sets beside their devices, one slice per GPU
            assert all(bool(s.get("sharedCounters")) == ("-gpu-" in n) for n, s in specs.items())
        else:  # counter-only slices of at most 8 sets; no slice holds both
            (counters,) = [s for s in specs.values() if s.get("sharedCounters")]
            assert len(counters["sharedCounters"]) == 8 and not counters.get("devices")
            assert not any(s.get("devices") and s.get("sharedCounters") for s in specs.values())
        methods = [(m, p, q.get("dryRun")) for m, p, q, _ in api.requests]
        first_write = next(i for i, (m, _p, dry) in enumerate(methods) if m in ("POST", "PUT") and not dry)
        asked = [p.rstrip("/") for _m, p, _d in methods[:first_write]]
        assert "/version" in asked and "/apis" in asked and (("POST", SLICES, ["All"]) in methods[:first_write])
    finally:
        api.close()


def _plugin(sim: Path, kubeconfig: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "dra-plugin", "--node", NODE]
    cmd += ["--kubeconfig", str(kubeconfig), "--interval", "0.2", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _out, err = proc.communicate(timeout=30)
    return err


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("gate", ["default", "on"])
def test_the_plugin_process_publishes_what_each_release_serves(release: str, gate: str, short_tmp: Path) -> None:
    """``vgpukit k8s dra-plugin`` (``--partitionable auto``) against each release as installed (the gate as
    the release has it: off in 1.34 and 1.35) and with the gate on: partitionable devices where the gate
    is on, the static view elsewhere; not one write refused."""
    api = ApiServer(NODE, release)
    if gate == "on":
        api.partitionable = True
    proc = None
    try:
        sim = h100_host(short_tmp / "h")
        proc = _plugin(sim, api.kubeconfig(short_tmp / "kubeconfig"))
        part = slice_name(NODE, part="gpu-0000-03-00-0")
        want = api.partitionable
        whole = lambda: slice_name(NODE) in api.slices and not api.pool_problems()  # noqa: E731 (every slice written)
        assert api.wait(lambda: whole() and (part in api.slices) == want, timeout=60)
        api.wait(lambda: False, timeout=1.0)  # a few more polls: nothing changes, nothing is refused
        stored_ok(api)
        static = [d["name"] for d in api.slices[slice_name(NODE)]["spec"].get("devices") or []]
        assert ("gpu-0000-03-00-0" in static) == (not want)  # the whole GPU: static, or with its slices
        writes = [(m, q.get("dryRun")) for m, p, q, _ in api.requests if p.startswith(SLICES) and m != "GET"]
        assert (
            writes.count(("POST", ["All"])) == 2 and len(writes) == len(api.slices) + 2
        )  # two dry runs (counters; taints and consumable capacity), one write each
    finally:
        err = _stop(proc) if proc is not None else ""
        api.close()
    assert "refused" not in err and f"Kubernetes v{release}.0" in err, err


def test_a_provider_version_and_a_later_release_follow_the_known_rules() -> None:
    assert cluster.release("v1.35.3-eks-4a1b2c") == "1.35" and cluster.release("1.36+") == "1.36"
    assert cluster.release("1.41") == "1.37"  # newer than the newest known: its rules
    with pytest.raises(Unsupported, match=r"DRA needs 1\.34 or later"):
        cluster.release("v1.33.9")
    assert cluster.for_version("1.34").layout == "combined" and cluster.for_version("1.35").layout == "split"
    assert [cluster.for_version(v).partitionable for v in RELEASES] == [False, False, True, True]


def test_a_provider_api_server_is_read_by_its_minor(short_tmp: Path) -> None:
    api = ApiServer(NODE, "1.36", git_version="v1.36.4-gke.1200")
    try:
        client = resource_api(str(api.kubeconfig(short_tmp / "kubeconfig")))
        found = cluster.detect(client, NODE)
        assert (found.version, found.layout, found.partitionable) == ("1.36", "split", True)
        assert found.git_version == "v1.36.4-gke.1200" and "v1.36.4-gke.1200" in found.describe()
        assert api.version_doc()["minor"] == "36+"
    finally:
        api.close()


def _part(name: str, devices: int = 3) -> dict[str, Any]:
    """A counter set of 2 counters and ``devices`` devices consuming it."""
    counters = {"a": {"value": "4"}, "b": {"value": "4"}}
    use = [{"counterSet": name, "counters": {"a": {"value": "1"}}}]
    devs = [{"name": f"{name}-d{k}", "consumesCounters": use} for k in range(devices)]
    return {"sharedCounters": [{"name": name, "counters": counters}], "devices": devs}


def _parts(n: int) -> dict[str, dict[str, Any]]:
    return {f"gpu-{i:04d}": _part(f"gpu-{i:04d}") for i in range(n)}


@pytest.mark.parametrize("release", ["1.34", "1.37"])
def test_limits_split_slices_stably_and_every_change_moves_the_whole_pool(release: str, short_tmp: Path) -> None:
    """20 counter sets: counter slices of 8, 8 and 4 (1.35+); a part of 150 devices: 64, 64 and 22 (1.35+;
    1.34 keeps what one slice holds, 128); every slice, counter-only ones included, at the pool's generation
    and in its count; the same devices again change nothing; one GPU fewer: every slice rewritten."""
    api = ApiServer(NODE, release)
    api.partitionable = True
    try:
        pub = Publisher(resource_api(str(api.kubeconfig(short_tmp / "kubeconfig"))), NODE)
        parts = {**_parts(19), "gpu-big": _part("gpu-big", 150)}
        static = [{"name": f"vf-{i}", "attributes": {"kind": {"string": "vf"}}} for i in range(3)]
        assert pub.publish(static, parts) is not None
        stored_ok(api)
        specs = {n: d["spec"] for n, d in api.slices.items()}
        big = [n for n in specs if n.startswith(slice_name(NODE, part="gpu-big"))]
        if release == "1.34":
            assert [len(specs[n]["devices"]) for n in big] == [128] and len(specs) == 21
        else:
            sets = [slice_name(NODE, i, "counters") for i in range(3)]
            assert [len(specs[n]["sharedCounters"]) for n in sets] == [8, 8, 4]
            assert [len(specs[n]["devices"]) for n in sorted(big)] == [64, 64, 22] and len(specs) == 1 + 3 + 19 + 3
        pub.published = None  # a restarted plugin: the same slices, nothing written
        before = len(api.requests)
        assert pub.publish(static, parts) is None
        assert all(m == "GET" for m, *_ in api.requests[before:])
        del parts["gpu-0003"]
        assert pub.publish(static, parts) is not None
        stored_ok(api)
        assert {d["spec"]["pool"]["generation"] for d in api.slices.values()} == {2}
    finally:
        api.close()


def test_a_device_over_a_limit_is_left_out_with_a_warning(short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    api = ApiServer(NODE, "1.37")
    try:
        pub = Publisher(resource_api(str(api.kubeconfig(short_tmp / "kubeconfig"))), NODE)
        fat = {"name": "vf-fat", "attributes": {f"a{i}": {"int": i} for i in range(33)}}
        tainted = {"name": "vf-t", "taints": [{"key": f"k{i}", "effect": "NoSchedule"} for i in range(17)]}
        two = [{"counterSet": s, "counters": {"a": {"value": "1"}}} for s in ("x", "y", "z")]
        with caplog.at_level(logging.WARNING, "vgpukit.k8s.dra"):
            pub.publish([fat, tainted, {"name": "vf-ok"}, {"name": "vf-3", "consumesCounters": two}])
        stored_ok(api)
        assert [d["name"] for d in api.slices[slice_name(NODE)]["spec"]["devices"]] == ["vf-ok"]
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "vf-fat not published: more than 32 attributes" in said and "vf-t not published: more than 16" in said
        assert "vf-3 not published: more than 2 counter consumptions" in said
    finally:
        api.close()


def test_a_refused_write_is_logged_as_a_bug_and_the_next_poll_reads_the_server_again(
    short_tmp: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The API server upgraded from 1.34 to 1.35 under a running plugin: the combined slices it knew are
    refused once (logged as an error, with the server's reason), the next poll reads the release again
    and publishes the 1.35 layout, nothing else refused."""
    api = ApiServer(NODE, "1.34")
    api.partitionable = True
    try:
        sim = h100_host(short_tmp / "h")
        client = resource_api(str(api.kubeconfig(short_tmp / "kubeconfig")))
        driver = Driver(NODE, opener(sim), ClaimReader(client), unusable(sim), "on")
        pub = Publisher(client, NODE)
        pub.publish(*driver.publication())
        api.release, api.git_version = "1.35", "v1.35.0"
        _ok(sim, "partition", "gpu2", "--mig", "1g.10gb")  # a change: a new generation to write
        with caplog.at_level(logging.INFO, "vgpukit.k8s.dra"), pytest.raises(Exception, match="422"):
            pub.publish(*driver.publication())
        assert pub.server is None and len(api.refused) == 1
        assert "only one of `sharedCounters` or `devices` is allowed" in api.refused[0][2]
        said = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(said) == 1 and "refused a ResourceSlice (422)" in said[0].getMessage()
        assert "only one of" in said[0].getMessage()
        api.refused.clear()
        assert pub.publish(*driver.publication()) is not None  # the 1.35 layout
        stored_ok(api)
        assert slice_name(NODE, part="counters") in api.slices
    finally:
        api.close()


@pytest.mark.parametrize("release", RELEASES)
def test_k8s_resources_shows_exactly_what_the_plugin_publishes(release: str, short_tmp: Path) -> None:
    api = ApiServer(NODE, release)
    try:
        sim = h100_host(short_tmp / "h")
        view = json.loads(_ok(sim, "--json", "k8s", "resources", "--kubernetes", release, "--node", NODE))
        assert view["kubernetes"]["layout"] == ("combined" if release == "1.34" else "split")
        client = resource_api(str(api.kubeconfig(short_tmp / "kubeconfig")))
        on = cluster.for_version(release).partitionable
        driver = Driver(NODE, opener(sim), ClaimReader(client), unusable(sim), "on" if on else "off")
        Publisher(client, NODE, "auto").publish(*driver.publication())
        stored_ok(api)
        shown = {d["metadata"]["name"]: d["spec"] for d in view["resourceSlices"]}
        assert shown == {n: d["spec"] for n, d in api.slices.items()}
        assert (len(shown) > 1) == on
    finally:
        api.close()


def test_the_pool_layout_names_slices_by_their_part(short_tmp: Path) -> None:
    server = cluster.for_version("1.37", True)
    out, warnings = pool.layout(NODE, [], _parts(2), server)
    assert list(out) == [
        slice_name(NODE),
        slice_name(NODE, 0, "counters"),
        slice_name(NODE, part="gpu-0000"),
        slice_name(NODE, part="gpu-0001"),
    ]
    assert warnings == []
    again, _ = pool.layout(NODE, [], dict(reversed(list(_parts(2).items()))), server)
    assert again == out  # the order the parts come in does not matter
