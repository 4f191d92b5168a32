"""Topology: relationships, NUMA affinity and IOMMU groups, on the hgx-a100 profile and a crafted tree."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import make_sim, sim_host
from vgpukit import iommu, pci, topology
from vgpukit.naming import aliases


def test_hgx_matrix(sim_dir: Path) -> None:
    scan = pci.Scan(sim_host(sim_dir))
    devs = scan.devices()
    names = {v: k for k, v in aliases(scan).items()}
    by = {a: next(d for d in devs if d.bdf == names[a]) for a in names}
    roles = topology.port_roles(devs)
    rel = lambda a, b: topology.relation(by[a], by[b], roles)  # noqa: E731
    assert rel("gpu0", "gpu0") == "X"
    assert rel("gpu0", "gpu1") == "PIX"  # same switch
    assert rel("gpu0", "nic0") == "PIX"
    assert rel("gpu0", "gpu2") == "NODE"  # other root complex, same socket
    assert rel("gpu0", "gpu4") == "SYS"  # other socket
    assert rel("gpu6", "nic3") == "PIX" and rel("gpu6", "nic2") == "NODE"
    # symmetric
    for a in names:
        for b in names:
            assert rel(a, b) == rel(b, a)


def test_hgx_affinity_and_groups(sim_dir: Path) -> None:
    devs = pci.Scan(sim_host(sim_dir)).devices()
    gpus = [d for d in devs if d.kind == "gpu"]
    assert [d.bdf for d in gpus] == [
        "0000:03:00.0",
        "0000:04:00.0",
        "0000:23:00.0",
        "0000:24:00.0",
        "0000:83:00.0",
        "0000:84:00.0",
        "0000:a3:00.0",
        "0000:a4:00.0",
    ]
    assert [d.numa_node for d in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {d.local_cpulist for d in gpus[:4]} == {"0-31,64-95"}
    assert {d.local_cpulist for d in gpus[4:]} == {"32-63,96-127"}
    groups = [d.iommu_group for d in devs]
    assert None not in groups and len(set(groups)) == len(devs)  # ACS everywhere: one device per group
    h = sim_host(sim_dir)
    assert iommu.members(h, gpus[0].iommu_group) == [gpus[0].bdf]  # type: ignore[arg-type]
    assert all(d.link.speed == "16.0 GT/s PCIe" for d in gpus)


def test_roles(sim_dir: Path) -> None:
    devs = pci.Scan(sim_host(sim_dir)).devices()
    roles = topology.port_roles(devs)
    assert roles["0000:00:01.0"] == "root-port"
    assert roles["0000:01:00.0"] == "switch-upstream"
    assert roles["0000:02:00.0"] == "switch-downstream"


def _crafted(tmp_path: Path) -> Path:
    """Nested switches (PXB), two root ports on one host bridge (PHB), one NUMA node."""
    ep = {"ids": "10de:20b0", "class": "0x030200", "link": ["16.0 GT/s PCIe", 16]}
    br = {"ids": "181e:9781", "class": "0x060400", "driver": "pcieport"}
    prof = {
        "version": 1,
        "name": "crafted",
        "numa_nodes": {0: "0-3"},
        "drivers": {"pcieport": ["class:0604"]},
        "models": {"gpu": ep, "br": br},
        "host_bridges": [
            {
                "name": "pci0000:00",
                "numa": 0,
                "devices": [
                    {
                        "bdf": "0000:00:01.0",
                        "model": "br",
                        "children": [
                            {
                                "bdf": "0000:01:00.0",
                                "model": "br",
                                "children": [
                                    {
                                        "bdf": "0000:02:00.0",
                                        "model": "br",
                                        "children": [{"bdf": "0000:03:00.0", "model": "gpu"}],
                                    },
                                    {
                                        "bdf": "0000:02:01.0",
                                        "model": "br",
                                        "children": [
                                            {
                                                "bdf": "0000:04:00.0",
                                                "model": "br",
                                                "children": [
                                                    {
                                                        "bdf": "0000:05:00.0",
                                                        "model": "br",
                                                        "children": [{"bdf": "0000:06:00.0", "model": "gpu"}],
                                                    }
                                                ],
                                            }
                                        ],
                                    },
                                ],
                            }
                        ],
                    },
                    {"bdf": "0000:00:02.0", "model": "br", "children": [{"bdf": "0000:07:00.0", "model": "gpu"}]},
                ],
            }
        ],
    }
    p = tmp_path / "crafted.yaml"
    p.write_text(yaml.safe_dump(prof))
    return make_sim(tmp_path / "crafted", str(p))


def test_pxb_and_phb(tmp_path: Path) -> None:
    devs = pci.Scan(sim_host(_crafted(tmp_path))).devices()
    roles = topology.port_roles(devs)
    by = {d.bdf: d for d in devs}
    assert roles["0000:04:00.0"] == "switch-upstream" and roles["0000:05:00.0"] == "switch-downstream"
    assert topology.relation(by["0000:03:00.0"], by["0000:06:00.0"], roles) == "PXB"
    assert topology.relation(by["0000:03:00.0"], by["0000:07:00.0"], roles) == "PHB"
    tree = topology.build_tree(devs)
    assert [r.label for r in tree] == ["pci0000:00"]
    assert [c.device.bdf for c in tree[0].children if c.device] == ["0000:00:01.0", "0000:00:02.0"]


def test_vfs_nest_under_pf(sim_dir: Path) -> None:
    h = sim_host(sim_dir)
    h.write(h.pci_device("0000:05:00.0", "sriov_numvfs"), "2")
    tree = topology.build_tree(pci.Scan(h).devices())

    def find(nodes: list[topology.Node], bdf: str) -> topology.Node | None:
        for n in nodes:
            if n.device and n.device.bdf == bdf:
                return n
            hit = find(n.children, bdf)
            if hit:
                return hit
        return None

    pf = find(tree, "0000:05:00.0")
    assert pf is not None and [c.device.bdf for c in pf.children if c.device] == ["0000:05:00.2", "0000:05:00.3"]
