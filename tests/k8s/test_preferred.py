"""GetPreferredAllocation's choice on the hgx-a100 tree (pure: no gRPC)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import invoke, make_sim
from vgpukit.clikit.context import App
from vgpukit.k8s.preferred import Distances, preferred
from vgpukit.node.inventory import Options, collect
from vgpukit.wiring import Wiring


def test_closest_devices_first_and_must_include_kept(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    for nic in ("nic0", "nic1", "nic2"):  # nic0 + nic1 share a root complex (socket 0), nic2 on socket 1
        assert invoke(sim, "sriov", "enable", nic, "--vfs", "2", "--driver", "vfio-pci").exit_code == 0
    app = App(sim_dir=sim, wiring=Wiring())
    inv = collect(app.host, app.nvml, Options(replicas=1))
    vfs = inv.resources["vgpukit.io/vf-15b3-101b"]
    dist = Distances(vfs, inv.pci)
    ids = [d.id for d in vfs]
    assert dist("0000:05:00.2", "0000:05:00.3") == 0  # VFs of one PF
    assert dist("0000:05:00.2", "0000:25:00.2") < dist("0000:05:00.2", "0000:85:00.2")
    assert preferred(ids, [], 2, dist) == ["0000:05:00.2", "0000:05:00.3"]
    # must include a socket-1 VF: its sibling comes next, not a socket-0 one
    assert preferred(ids, ["0000:85:00.3"], 2, dist) == ["0000:85:00.3", "0000:85:00.2"]
    # three: the third joins from the nearest other PF (nic1, same socket), not nic2
    assert sorted(preferred(ids, ["0000:05:00.2"], 3, dist))[:2] == ["0000:05:00.2", "0000:05:00.3"]
    assert preferred(ids, ["0000:05:00.2"], 3, dist)[2].startswith("0000:25:")
    assert preferred(ids, [], 0, dist) == [] and len(preferred(ids, [], 99, dist)) == len(ids)
    gpus = inv.resources["vgpukit.io/gpu-share"]
    gdist = Distances(gpus, inv.pci)
    pair = preferred([d.id for d in gpus], [], 2, gdist)
    assert gdist(*pair) == min(gdist(a.id, b.id) for a in gpus for b in gpus if a.topo_bdf != b.topo_bdf)
