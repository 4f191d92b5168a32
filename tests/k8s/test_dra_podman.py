"""DRA end to end with a real container engine: a claim prepared through the kubelet peer, podman resolving it.

For each kind of device the driver offers, one row of ``ROWS``: a simulated host (``--char-devices``:
its nodes are real character devices), the commands that make the device (``vgpukit partition``,
``sriov``, ``mdev``, ``vgpu``), which published device to allocate (the slice attributes a DeviceClass
and a claim's selectors would match), and the container paths its CDI device must bring. The test
publishes the slice, allocates the first matching device in a ResourceClaim on the API-server stub,
prepares the claim through the kubelet-side peer (``NodePrepareResources`` over gRPC, the plugin's
real services), finds the CDI name it answers in the claim's spec, and starts a podman container
with ``--device <that name>``: podman itself resolves the name, and the container lists the nodes.
Unprepared, the spec is gone and podman refuses the name.

A device made on demand (a MIG slice at the placement the scheduler chose, a legacy vGPU) is a row with
``partitionable``: the plugin runs with ``--partitionable on`` and the device is picked among the slice
parts it publishes for the GPUs; its ``made`` listing (a ``vgpukit --json`` command and the key naming
its entries) must gain exactly one entry at prepare and lose it at unprepare. A shared GPU is a row with
the sharing configuration in the claim. A new kind is one more row.
Needs root, podman, runc and busybox (tests/containers.py); in CI a missing tool fails the test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import containers
from tests.conftest import invoke, short_dir
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_ondemand import OnDemandNode
from tests.k8s.test_dra_plugin import NODE, Node, claim
from vgpukit.k8s.dra.api import resource_api
from vgpukit.k8s.dra.devices import DRIVER
from vgpukit.k8s.dra.slices import Publisher, slice_name

VFIO = (r"/dev/vfio/vfio", r"/dev/vfio/\d+")  # the VFIO container node and the device's group node
NVIDIA = (r"/dev/nvidiactl", r"/dev/nvidia-uvm")


@dataclass(frozen=True)
class Row:
    name: str
    profile: str
    setup: tuple[tuple[str, ...], ...]  # vgpukit commands ("{sim}": the simulated host's directory)
    select: dict[str, str | bool]  # published attribute -> value ("*": present) of the device to allocate
    nodes: tuple[str, ...]  # container paths (regular expressions) the device's CDI entry must have
    host_driver: str | None = None  # the VF's driver before prepare and after unprepare (None: not a VF on one)
    gap: str = ""  # why the product cannot pass this row yet (an expected failure that must not pass)
    config: dict[str, Any] | None = None  # the driver's opaque parameters in the claim (a sharing configuration)
    env: tuple[str, ...] = ()  # what the container's environment must have (regular expressions, one per line)
    files: tuple[tuple[str, str], ...] = ()  # (path in the host, content) put there after `sim init`
    partitionable: bool = False  # the plugin publishes devices made on demand (--partitionable on)
    made: tuple[tuple[str, ...], str] | None = None  # a --json listing and its entries' key: +1 at prepare, -1 after


HOOK = ("cdi", "enable", "--dir", "/var/run/cdi", "--hook", "{sim}/usr/bin/nvidia-cdi-hook")
ROWS = [
    Row("gpu", "hgx-a100", (HOOK,), {"kind": "gpu"}, (r"/dev/nvidia\d+", *NVIDIA), env=(r"NVIDIA_VISIBLE_DEVICES=.*",)),
    Row(
        "mig-3g.20gb",
        "hgx-a100",
        (HOOK, ("partition", "gpu1", "--mig", "3g.20gb")),
        {"kind": "mig", "migProfile": "3g.20gb"},
        (r"/dev/nvidia1", r"/dev/nvidia-caps/nvidia-cap\d+", r"/dev/nvidia-caps/nvidia-cap\d+", *NVIDIA),
    ),
    # made on demand: gpu1 in MIG mode with nothing on it (a 1g.5gb made and destroyed), the scheduler's pick a
    # 3g.20gb placement; prepare creates the GPU instance and its compute instance, unprepare destroys them
    Row(
        "mig-3g.20gb-on-demand",
        "hgx-a100",
        (HOOK, ("partition", "gpu1", "--mig", "1g.5gb"), ("mig", "destroy", "gpu1", "--all")),
        {"onDemand": True, "migProfile": "3g.20gb"},
        (r"/dev/nvidia1", r"/dev/nvidia-caps/nvidia-cap\d+", r"/dev/nvidia-caps/nvidia-cap\d+", *NVIDIA),
        partitionable=True,
        made=(("mig", "status", "gpu1", "--json"), "uuid"),
    ),
    Row(
        "vf-vfio",
        "hgx-a100",
        (("sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci"),),
        {"kind": "vf", "driver": "vfio-pci"},
        VFIO,
    ),
    Row(
        "vf-bound-at-prepare",
        "hgx-a100",
        (("sriov", "enable", "nic1", "--vfs", "1"),),
        {"kind": "vf", "driver": "mlx5_core"},
        VFIO,
        host_driver="mlx5_core",
    ),
    Row("mdev", "qemu-guest", (("mdev", "create", "mtty", "--type", "mtty-2"),), {"kind": "mdev"}, VFIO),
    Row(
        "vgpu-mdev",
        "t4-mdev",
        (("vgpu", "create", "gpu0", "--type", "GRID T4-4Q"),),
        {"kind": "mdev", "vgpuType": "*"},
        VFIO,
    ),
    Row(
        "vgpu-mdev-on-demand",
        "t4-mdev",
        (),
        {"onDemand": True, "kind": "mdev", "vgpuType": "t4-4q"},
        VFIO,
        partitionable=True,
        made=(("vgpu", "list", "--json"), "id"),
    ),
    Row(
        "vgpu-vf",
        "h100-vgpu",
        (("vgpu", "create", "gpu0", "--type", "H100-20C"),),
        {"kind": "vf", "vgpuType": "*"},
        VFIO,
    ),
    # a sharing configuration (here a memory cap: the CUDA library in the container) is a whole GPU with the
    # driver's parameters in the claim (the class gpu-share.gpu.vgpukit.io puts a time-slice's there).
    Row(
        "gpu-memory-cap",
        "hgx-a100",
        (HOOK,),
        {"kind": "gpu"},
        (r"/dev/nvidia\d+", *NVIDIA),
        config={"apiVersion": "vgpukit.io/v1", "kind": "MemoryCapConfig", "limit": "4Gi"},
        env=(r"LD_PRELOAD=.*libvgpukit-cuda\.so", r"VGPUKIT_CUDA_MEMORY=\d+"),
        files=(("usr/lib/vgpukit/libvgpukit-cuda.so", "a stand-in: the container's static busybox loads none\n"),),
    ),
]


@pytest.fixture(scope="module")
def rootfs() -> Iterator[tuple[Path, Path]]:
    containers.need_tools()
    with short_dir("drap") as d:
        base = Path(d)
        yield base, containers.busybox_rootfs(base)


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


def _matches(attrs: dict[str, Any], select: dict[str, str | bool]) -> bool:
    """An attribute's value is its one typed field ({"string": ...}, {"bool": ...}, {"int": ...})."""
    return all(k in attrs and (v == "*" or [v] == list(attrs[k].values())) for k, v in select.items())


def _listed(sim: Path, listing: tuple[tuple[str, ...], str]) -> set[str]:
    """The values of the key anywhere in the JSON document a ``vgpukit --json`` listing prints."""
    cmd, key = listing
    r = invoke(sim, *cmd)
    assert r.exit_code == 0, (cmd, r.stderr)

    def walk(doc: Any) -> Iterator[str]:
        if isinstance(doc, dict):
            for k, v in doc.items():
                yield from [str(v)] if k == key and not isinstance(v, dict | list) else walk(v)
        elif isinstance(doc, list):
            for v in doc:
                yield from walk(v)

    return set(walk(json.loads(r.stdout)))


def _spec_device(spec: dict[str, Any], cdi_id: str) -> dict[str, Any]:
    """The device a CDI name (``vendor/class=name``) names in a spec, as a CDI consumer resolves it."""
    kind, _, name = cdi_id.partition("=")
    assert spec["kind"] == kind
    (dev,) = [d for d in spec["devices"] if d["name"] == name]
    assert isinstance(dev, dict)
    return dev


def _published(node: Node, api: ApiServer, kubeconfig: Path) -> list[dict[str, Any]]:
    """Every device of the node's pool as the API server stores it after a publish (1.37: counter sets in
    slices of their own), none of the writes refused and the pool whole."""
    client = resource_api(str(api.kubeconfig(kubeconfig)))
    Publisher(client, NODE, "auto").publish(*node.driver.publication())
    assert api.refused == [] and api.pool_problems() == [] and slice_name(NODE, part="counters") in api.slices
    return [d for s in api.slices.values() for d in s["spec"].get("devices") or []]


def _params() -> list[Any]:
    gap = pytest.mark.xfail
    return [pytest.param(r, id=r.name, marks=[gap(strict=True, reason=r.gap)] if r.gap else []) for r in ROWS]


@pytest.mark.parametrize("row", _params())
def test_a_prepared_claim_runs_in_podman(row: Row, rootfs: tuple[Path, Path], api: ApiServer) -> None:
    from vgpukit.sriov.binding import current_driver

    base, fs = rootfs
    sim = base / row.name
    assert invoke(None, "sim", "init", str(sim), "--profile", row.profile, "--char-devices").exit_code == 0
    for path, content in row.files:
        (sim / path).parent.mkdir(parents=True, exist_ok=True)
        (sim / path).write_text(content)
    for cmd in row.setup:
        r = invoke(sim, *(a.format(sim=sim) for a in cmd))
        assert r.exit_code == 0, (cmd, r.stderr)
    node = OnDemandNode(sim, api) if row.partitionable else Node(sim, api)
    try:
        if row.partitionable:  # picked among what the API server stores: the layout of 1.35 and later
            entries = _published(node, api, base / f"{row.name}.kubeconfig")
        else:
            entries = node.driver.publication()[0]
        name = next(e["name"] for e in entries if _matches(e["attributes"], row.select))
        if row.host_driver:
            bdf = node.driver.devices()[name].device.id
            assert current_driver(node.host, bdf) == row.host_driver
        before = _listed(sim, row.made) if row.made else set()
        extra: dict[str, Any] = (
            {"config": [{"opaque": {"driver": DRIVER, "parameters": row.config}}]} if row.config else {}
        )
        ref = node.add(claim(f"u-{row.name}", row.name, name, **extra))
        out = node.kubelet.prepare(ref).claims[ref[2]]
        assert out.error == "" and [d.device_name for d in out.devices] == [name]
        if row.made:
            assert len(_listed(sim, row.made) - before) == 1 and before <= _listed(sim, row.made)  # made, one
        (cdi_id,) = out.devices[0].cdi_device_ids
        spec_file = node.host.dra_claim_cdi_spec(ref[2])
        dev = _spec_device(json.loads(spec_file.read_text()), cdi_id)
        paths = [n["path"] for n in dev["containerEdits"]["deviceNodes"]]
        for pattern in set(row.nodes):
            found = [p for p in paths if re.fullmatch(pattern, p)]
            assert len(found) >= row.nodes.count(pattern), (pattern, paths)
        script = " && ".join(f"test -c {p}" for p in paths) + " && ls -l " + " ".join(paths) + " && echo && env"
        res = containers.run(base, fs, [spec_file], [cdi_id], script)
        assert res.returncode == 0, res.stderr
        listing, _, env = res.stdout.partition("\n\n")
        assert listing.count("crw") == len(paths) and all(p in listing for p in paths)
        for pattern in row.env:
            assert any(re.fullmatch(pattern, line) for line in env.splitlines()), (pattern, env)
        assert node.kubelet.unprepare(ref).claims[ref[2]].error == ""
        assert not spec_file.exists() and not node.host.dra_claim_record(ref[2]).exists()
        if row.made:
            assert _listed(sim, row.made) == before and not node.host.dra_made_record(ref[2]).exists()  # gone
        if row.host_driver:
            assert current_driver(node.host, bdf) == row.host_driver
        res = containers.run(base, fs, [], [cdi_id], "true")
        assert res.returncode != 0 and "unresolvable CDI devices" in res.stderr
    finally:
        node.close()


def _run(node: Node, base: Path, fs: Path, uid: str, device: str, nodes: tuple[str, ...]) -> str:
    """Prepare a claim of ``device``, run a container with its CDI device (every node in ``nodes``, regular
    expressions, there as a character device); the CDI name."""
    ref = node.add(claim(uid, uid, device))
    out = node.kubelet.prepare(ref).claims[uid]
    assert out.error == "" and [d.device_name for d in out.devices] == [device], out.error
    (cdi_id,) = out.devices[0].cdi_device_ids
    spec_file = node.host.dra_claim_cdi_spec(uid)
    paths = [
        n["path"] for n in _spec_device(json.loads(spec_file.read_text()), cdi_id)["containerEdits"]["deviceNodes"]
    ]
    assert all(any(re.fullmatch(p, x) for x in paths) for p in nodes), (nodes, paths)
    res = containers.run(base, fs, [spec_file], [cdi_id], " && ".join(f"test -c {p}" for p in paths) + " && ls -l /dev")
    assert res.returncode == 0, res.stderr
    return cdi_id


def test_a_hopper_gpu_runs_a_pod_whole_then_pods_of_its_slices(rootfs: tuple[Path, Path], api: ApiServer) -> None:
    """hgx-h100 (MIG mode changes without a reset), published under the 1.35+ layout as the whole GPU and its
    MIG placements from one counter set: a pod gets the whole GPU (MIG mode off); then two pods get a
    3g.40gb each, the first one's prepare turning MIG mode on; the first unprepare leaves it on (the other
    slice is there), the last turns it off. Each runs in podman with the device nodes of what it got."""
    from tests.k8s.test_dra_wholegpu import mode

    base, fs = rootfs
    sim = base / "hopper"
    assert invoke(None, "sim", "init", str(sim), "--profile", "hgx-h100", "--char-devices").exit_code == 0
    assert invoke(sim, *(a.format(sim=sim) for a in HOOK)).exit_code == 0
    node = OnDemandNode(sim, api)
    gpu = "gpu-0000-03-00-0"
    caps = r"/dev/nvidia-caps/nvidia-cap\d+"
    try:
        names = {e["name"] for e in _published(node, api, base / "hopper.kubeconfig")}
        assert {gpu, f"{gpu}-mig-3g-40gb-0", f"{gpu}-mig-3g-40gb-4"} <= names
        whole = _run(node, base, fs, "u-whole", gpu, (r"/dev/nvidia0", *NVIDIA))
        assert mode(sim) == (False, False)
        assert node.kubelet.unprepare(("default", "u-whole", "u-whole")).claims["u-whole"].error == ""
        _run(node, base, fs, "u-a", f"{gpu}-mig-3g-40gb-0", (r"/dev/nvidia0", caps, *NVIDIA))
        assert mode(sim) == (True, True)
        _run(node, base, fs, "u-b", f"{gpu}-mig-3g-40gb-4", (r"/dev/nvidia0", caps, *NVIDIA))
        assert node.kubelet.unprepare(("default", "u-a", "u-a")).claims["u-a"].error == ""
        assert mode(sim) == (True, True)  # the other slice is still there
        assert node.kubelet.unprepare(("default", "u-b", "u-b")).claims["u-b"].error == ""
        assert mode(sim) == (False, False) and not node.host.dra_mig_mode_record("0000:03:00.0").exists()
        res = containers.run(base, fs, [], [whole], "true")
        assert res.returncode != 0 and "unresolvable CDI devices" in res.stderr
    finally:
        node.close()
