"""Issue 15's end-to-end example on two simulated nodes: one fleet file, the real ansible-playbook
applies it to both, the device plugin on each node registers with a kubelet peer and advertises
what the apply created, and Allocate answers CDI names that the node's specs (kept current by the
engine, exactly what `vgpukit cdi generate` writes) resolve."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import invoke, make_sim, short_dir, sim_host
from tests.fleet.test_ansible import play, site
from tests.k8s.kubelet import Kubelet
from tests.k8s.test_device_plugin import poller
from vgpukit.k8s.plugin import Manager, plugin_dir
from vgpukit.stopping import Stop

FLEET = """\
version: vgpukit.host/v1
configs:
  vm-and-mig:                 # node1: VFs of nic0 for VMs, gpu0/gpu1 split in two 3g.20gb
    sriov:
      - device: nic0
        vfs: 4
        driver: vfio-pci
    mig: two-halves
  all-mig:                    # node2: every A100 in 7 x 1g.5gb
    mig: sevenths
mig-configs:
  two-halves:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
  sevenths:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
"""
NODES = {"node1": "vm-and-mig", "node2": "all-mig"}
WANT = {
    "node1": {"vgpukit.io/vf-15b3-101b": 4, "vgpukit.io/mig-3g.20gb": 4},
    "node2": {"vgpukit.io/mig-1g.5gb": 8 * 7},
}


@pytest.fixture
def fleet() -> Iterator[tuple[Path, dict[str, Path]]]:
    """Two hgx-a100 nodes with CDI enabled (Unix socket paths need a short directory)."""
    with short_dir("fl") as d:
        where = Path(d)
        sims = {name: make_sim(where / name, "hgx-a100") for name in NODES}
        for sim in sims.values():
            r = invoke(sim, "cdi", "enable", "--hook", "/usr/bin/nvidia-cdi-hook")
            assert r.exit_code == 0, r.stderr
        site(where, FLEET, {name: (sims[name], config) for name, config in NODES.items()})
        yield where, sims


def spec_names(sim: Path) -> set[str]:
    names = set()
    for path in (sim / "etc" / "cdi").glob("vgpukit-*.yaml"):
        spec = yaml.safe_load(path.read_text())
        names |= {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    return names


def test_one_fleet_file_ansible_then_device_plugins_advertise_and_allocate_cdi_names(
    fleet: tuple[Path, dict[str, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    where, sims = fleet
    assert play(where, hosts=2)[0] == {"node1": (1, 0), "node2": (1, 0)}
    assert play(where, hosts=2)[0] == {"node1": (0, 0), "node2": (0, 0)}  # the second run changes nothing

    report = []
    for name, sim in sims.items():
        written = spec_names(sim)
        specs = {p.name: p.read_bytes() for p in (sim / "etc" / "cdi").glob("vgpukit-*.yaml")}
        assert invoke(sim, "cdi", "generate").exit_code == 0  # the engine's refresh was already exact
        assert {p.name: p.read_bytes() for p in (sim / "etc" / "cdi").glob("vgpukit-*.yaml")} == specs

        host = sim_host(sim)
        kubelet = Kubelet(plugin_dir(host)).start()
        manager = Manager(host, poller(sim))
        stop = Stop()
        thread = threading.Thread(target=manager.run, args=(stop, 0.05), daemon=True)
        thread.start()
        try:
            want = WANT[name]
            assert kubelet.wait(
                lambda want=want, k=kubelet: all(
                    r in k.endpoints and len(k.endpoints[r].devices) == n for r, n in want.items()
                ),
                timeout=60,
            ), {r: len(ep.devices) for r, ep in kubelet.endpoints.items()}
            for resource in want:
                chosen, resp = kubelet.allocate(resource, 2)
                names = [c.name for c in resp.cdi_devices]
                assert len(chosen) == 2 and names and set(names) <= written, (resource, names)
                report.append(
                    f"{name}  {resource:28} {len(kubelet.endpoints[resource].devices):3} devices  "
                    f"Allocate(2) -> {', '.join(names)}"
                )
        finally:
            stop.set()
            thread.join(10)
            kubelet.stop()
    with capsys.disabled():
        print("\ntwo-node fleet: ansible applied, device plugins advertise, Allocate names resolve in the specs")
        print("\n".join(report))
