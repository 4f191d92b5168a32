"""The DRA plugin's records on a full, over-quota, read-only or failing file system (docs/engine.md,
"Storage faults"): the kubelet's prepare gets one line naming the file and what to free or fix, the
host is left as before (the VF back on its driver, no spec, no record, no journal), and the kubelet's
retry succeeds once the fault is gone. The simulated host's own storage faults (vgpukit.sim.storage)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_sim
from tests.engine.storage_matrix import state
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_plugin import Node, _ok, api, claim  # noqa: F401 (fixtures)
from vgpukit.sim import storage
from vgpukit.sriov.binding import current_driver

PATHS = ("/run/vgpukit/dra/claims", "/run/cdi", "/run/vgpukit/journal")


@pytest.mark.parametrize("path", PATHS)
def test_a_prepare_on_a_faulty_file_system(path: str, short_tmp: Path, api: ApiServer) -> None:  # noqa: F811
    sim = make_sim(short_tmp / "h")
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "2")  # VFs on mlx5_core: a prepare binds one to vfio-pci
    node = Node(sim, api)
    try:
        name, dev = sorted((n, d) for n, d in node.driver.devices().items() if d.kind == "vf")[0]
        for n, error in enumerate(storage.ERRORS):
            uid = f"u-{n}"
            ref = node.add(claim(uid, f"c{n}", name))
            before = state(sim)
            storage.set_fault(sim, path, error)
            try:
                out = node.kubelet.prepare(ref).claims[uid]
            finally:
                storage.set_fault(sim, path, None)
            assert out.error.count("\n") == 0 and f"({error})" in out.error and "then run" in out.error, out.error
            assert path.rsplit("/", 1)[0] in out.error, out.error
            assert current_driver(node.host, dev.device.id) == "mlx5_core"
            assert not any(p.exists() for p in node.files(uid))
            assert state(sim) == before, error
            again = node.kubelet.prepare(ref).claims[uid]  # the kubelet retries
            assert again.error == "", again.error
            assert node.kubelet.unprepare(ref).claims[uid].error == ""
    finally:
        node.close()
