"""GPUs shared by capacity end to end with a real container engine: several claims from different namespaces
on one GPU, each allocated by the scheduler's math (tests/k8s/allocator.py) against the slice the plugin
publishes, prepared through the kubelet peer, and run by podman with the CDI device the plugin answered.
Each container gets its share (the QoS tenant the daemon of the simulated host runs for its pod) and its cap
(the CUDA library preloaded with the share's memory in its environment); the next claim beyond the GPU's
capacity is one the allocation math refuses; unprepared, the tenants are gone and podman refuses the names.
Needs root, podman, runc and busybox (tests/containers.py); in CI a missing tool fails the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import containers
from tests.conftest import invoke, short_dir
from tests.k8s.allocator import Allocator, Unallocatable
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_capacity import LIBRARY, SharedNode, classes, pod_cgroup, shared_claim, tenants
from tests.k8s.test_dra_plugin import NODE
from tests.qos.conftest import DaemonProc
from vgpukit.k8s.dra import capacity

HOOK = ("cdi", "enable", "--dir", "/var/run/cdi", "--hook", "{sim}/usr/bin/nvidia-cdi-hook")
GIB = 1 << 30


@pytest.fixture(scope="module")
def rootfs() -> Iterator[tuple[Path, Path]]:
    containers.need_tools()
    with short_dir("drac") as d:
        base = Path(d)
        yield base, containers.busybox_rootfs(base)


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


def test_claims_of_three_namespaces_run_on_one_gpu_each_with_its_share_and_cap(
    rootfs: tuple[Path, Path], api: ApiServer
) -> None:
    base, fs = rootfs
    sim = base / "shared"
    assert invoke(None, "sim", "init", str(sim), "--profile", "hgx-a100", "--char-devices").exit_code == 0
    (sim / LIBRARY).parent.mkdir(parents=True, exist_ok=True)
    (sim / LIBRARY).write_text("a stand-in: the container's static busybox loads none\n")
    assert invoke(sim, *(a.format(sim=sim) for a in HOOK)).exit_code == 0
    node = SharedNode(sim, api)
    node.share = "gpu"
    node.restart()
    qos = DaemonProc(sim, sim=True).start()
    try:
        docs = node.slices()
        first = min(d["name"] for d in docs[0]["spec"]["devices"] if d["name"].startswith("shared-gpu-"))
        docs[0]["spec"]["devices"] = [d for d in docs[0]["spec"]["devices"] if d["name"] == first]
        alloc = Allocator(docs, classes())  # one GPU's shares: 40 GiB, 100%
        key = capacity.qos_key(capacity.with_shared(node.driver.devices(), [first])[first])
        asks = {"team-a": ("16Gi", "40"), "team-b": ("12Gi", "30"), "team-c": (None, None)}  # c: the defaults
        want = {"team-a": (16 * GIB, 40), "team-b": (12 * GIB, 30), "team-c": (10 * GIB, 25)}
        refs = {}
        for ns, (memory, share) in asks.items():
            pod_cgroup(sim, f"pod-{ns}")
            refs[ns] = node.add(alloc.allocate(shared_claim("job", ns, memory, share), pod_uid=f"pod-{ns}"))
        with pytest.raises(Unallocatable):  # 16 + 12 + 10 + 3 = 41 GiB of 40: the scheduler refuses it
            alloc.allocate(shared_claim("job", "team-d", "3Gi", "5"))
        ids = []
        for ns, ref in refs.items():
            out = node.kubelet.prepare(ref).claims[ref[2]]
            assert out.error == "", out.error
            (dev,) = out.devices
            tenant = f"dra-{dev.share_id}"
            assert dev.device_name == first and tenant in tenants(qos, key)
            got = tenants(qos, key)[tenant]
            assert (got["memory"], got["share"], got["class"]) == (*want[ns], "offline")
            spec_file = node.host.dra_claim_cdi_spec(ref[2])
            (cdi_id,) = dev.cdi_device_ids
            res = containers.run(base, fs, [spec_file], [cdi_id], "env")
            assert res.returncode == 0, res.stderr
            env = set(res.stdout.splitlines())
            assert {f"VGPUKIT_QOS_TENANT={tenant}", f"VGPUKIT_QOS_GPU={key}", f"VGPUKIT_CUDA_TENANT={tenant}"} <= env
            assert {f"VGPUKIT_CUDA_MEMORY={want[ns][0]}", f"LD_PRELOAD=/{LIBRARY}"} <= env, env
            ids.append((ref, cdi_id, spec_file))
        assert len(tenants(qos, key)) == 3  # three tenants, one GPU: 40 + 30 + 25 of its time
        for ref, cdi_id, spec_file in ids:
            assert node.kubelet.unprepare(ref).claims[ref[2]].error == ""
            assert not spec_file.exists() and not node.host.dra_claim_record(ref[2]).exists()
            res = containers.run(base, fs, [], [cdi_id], "true")
            assert res.returncode != 0 and "unresolvable CDI devices" in res.stderr
        assert tenants(qos, key) == {}
        node.driver.publication()
        assert first in node.driver.capacity.published  # offered for new shares all along
    finally:
        qos.stop()
        node.close()
