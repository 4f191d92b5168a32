"""``topo --matrix`` as ``nvidia-smi topo -m``: goldens per profile and from a published HGX A100
output, NVLink from NVML's link state (simulated driver and the pynvml backend over it), the NIC
legend from RDMA devices, and GPUDirect RDMA hints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Run, as_json, make_sim
from tests.mig.sim_pynvml import Shim
from vgpukit import topology
from vgpukit.nvml import NvLink
from vgpukit.nvml.real import RealNvml
from vgpukit.sim.build import builtin_profiles, load_profile
from vgpukit.sim.nvml import SimNvml

DATA = Path(__file__).resolve().parents[1] / "data" / "topo"
PUBLISHED = DATA / "hgx-a100-published.yaml"


@pytest.mark.parametrize("profile", [*sorted(builtin_profiles()), "hgx-a100-published"])
def test_matrix_golden(profile: str, tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "h", str(PUBLISHED) if profile == "hgx-a100-published" else profile)
    r = run_cli(sim, "topo", "--matrix")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == (DATA / f"{profile}.txt").read_text()


def test_every_builtin_profile_has_a_golden() -> None:
    assert {p.name[:-4] for p in DATA.glob("*.txt")} == {*builtin_profiles(), "hgx-a100-published"}


def test_published_json_facts(tmp_path: Path, run_cli: Run) -> None:
    doc = as_json(run_cli(make_sim(tmp_path / "h", str(PUBLISHED)), "--json", "topo", "--matrix"))
    assert doc["matrix"]["GPU0"]["GPU7"] == "NV12" and doc["pcie"]["GPU0"]["GPU7"] == "SYS"
    assert doc["pcie"]["GPU0"]["GPU1"] == "PXB"
    assert doc["nics"]["NIC2"] == {"bdf": "0000:29:00.0", "alias": "nic2", "rdma": "mlx5_2"}
    g0 = doc["gpus"]["GPU0"]
    assert g0["gpudirect_nics"] == [{"nic": "NIC0", "relation": "PXB"}, {"nic": "NIC1", "relation": "PXB"}]
    assert doc["gpus"]["GPU4"]["gpudirect_nics"] == [] and g0["gpu_numa_id"] is None
    assert len(g0["nvlinks"]) == 12 and {k["remote_type"] for k in g0["nvlinks"]} == {"switch"}
    assert g0["nvlinks"][0] == {"link": 0, "remote_bdf": "0000:c4:00.0", "remote_type": "switch"}


def test_rdma_hints_human(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "topo", "--rdma")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["GPU0", "0000:03:00.0", "NIC0", "(mlx5_0,", "PIX)"]
    assert lines[8].split()[:3] == ["GPU7", "0000:a4:00.0", "NIC3"]


def _profile(tmp_path: Path, name: str, nvlink: dict[str, Any], gpu_numa: int | None = None) -> str:
    prof = load_profile(name)
    prof["nvlink"] = nvlink
    if gpu_numa is not None:  # a coherent-memory GPU's own NUMA node (nvmlDeviceGetNumaNodeId)
        prof["models"]["a100"]["gpu"]["numa_id"] = gpu_numa
    path = tmp_path / f"{name}-nvlink.yaml"
    path.write_text(yaml.safe_dump(prof))
    return str(path)


def test_a_link_down_and_bridged_pairs(tmp_path: Path, run_cli: Run) -> None:
    hgx = load_profile("hgx-a100")["nvlink"]
    down = _profile(tmp_path, "hgx-a100", {**hgx, "down": [{"gpu": "0000:03:00.0", "link": 1}]}, gpu_numa=2)
    sim = make_sim(tmp_path / "down", down)
    doc = as_json(run_cli(sim, "--json", "topo", "--matrix"))
    assert doc["gpus"]["GPU3"]["gpu_numa_id"] == 2
    assert run_cli(sim, "topo", "--matrix").stdout.splitlines()[1].endswith("\t0-31,64-95\t0\t\t2")
    assert doc["matrix"]["GPU0"]["GPU1"] == "NV11" and doc["matrix"]["GPU1"]["GPU0"] == "NV11"
    assert doc["matrix"]["GPU1"]["GPU2"] == "NV12" and len(doc["gpus"]["GPU0"]["nvlinks"]) == 11
    bridged = _profile(tmp_path, "t4-mdev", {"bridges": [{"gpus": ["0000:3b:00.0", "0000:d8:00.0"], "links": 4}]})
    doc = as_json(run_cli(make_sim(tmp_path / "br", bridged), "--json", "topo", "--matrix"))
    assert doc["matrix"]["GPU0"]["GPU1"] == "NV4" and doc["pcie"]["GPU0"]["GPU1"] == "SYS"
    assert doc["gpus"]["GPU1"]["nvlinks"][3] == {"link": 3, "remote_bdf": "0000:3b:00.0", "remote_type": "gpu"}


def test_nics_follow_their_rdma_device_numbers() -> None:
    from vgpukit.cli.cmd_topo_matrix import _natural

    assert sorted(["mlx5_10", "mlx5_9", "mlx5_0", "mlx5_bond_0"], key=_natural) == [
        "mlx5_0",
        "mlx5_9",
        "mlx5_10",
        "mlx5_bond_0",
    ]


def test_a_corrupt_link_table_is_one_clear_error(sim_dir: Path, run_cli: Run) -> None:
    import json

    state = sim_dir / ".vgpukit-sim" / "nvml.json"
    doc = json.loads(state.read_text())
    doc["gpus"][0]["nvlinks"] = [{"link": "zero"}]
    state.write_text(json.dumps(doc))
    r = run_cli(sim_dir, "topo", "--matrix")
    assert r.exit_code == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_gpus_without_an_nvidia_driver_come_from_pci(tmp_path: Path, run_cli: Run) -> None:
    from .test_topology import _crafted  # three display controllers the simulated NVML does not know

    r = run_cli(_crafted(tmp_path), "topo", "--matrix")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[1:4] == [
        "GPU0\t X \tPXB\tPHB\t0-3\t0\t\tN/A",
        "GPU1\tPXB\t X \tPHB\t0-3\t0\t\tN/A",
        "GPU2\tPHB\tPHB\t X \t0-3\t0\t\tN/A",
    ]


def test_nvlink_counts() -> None:
    sw = [NvLink(i, f"0000:c{4 + i // 2}:00.0", "switch") for i in range(12)]
    links = {"a": sw, "b": sw[:10], "c": [NvLink(0, "a", "gpu"), NvLink(1, "a", "gpu")], "d": []}
    counts = topology.nvlink_counts(links)
    assert counts[("a", "b")] == counts[("b", "a")] == 10  # b has no links to the sixth switch
    assert counts[("c", "a")] == 2 and ("a", "c") not in counts  # a's own links do not lead to c
    assert not any("d" in pair for pair in counts)


@pytest.mark.parametrize("profile", ["hgx-a100", "t4-mdev"])
def test_pynvml_backend_reads_the_same_links(profile: str, tmp_path: Path) -> None:
    """The real backend's NVLink code (state, remote PCI info, remote type) over the simulated driver."""
    nvlink = {**(load_profile("hgx-a100")["nvlink"]), "down": [{"gpu": "0000:04:00.0", "link": 5}]}
    sim = make_sim(tmp_path / "h", _profile(tmp_path, "hgx-a100", nvlink) if profile == "hgx-a100" else profile)
    real, simulated = RealNvml(Shim(sim)).gpu_links(), SimNvml(sim).gpu_links()
    assert real == simulated and len(real) == len(SimNvml(sim).gpus())
    assert all(g.numa_id is None for g in real.values())
    if profile == "hgx-a100":
        assert [k.link for k in real[1].nvlinks] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    else:
        assert real[0].nvlinks == ()


def test_nic_leaves_the_legend_with_its_rdma_driver(sim_dir: Path, run_cli: Run) -> None:
    """The NIC column is the RDMA device: gone while vfio-pci holds the function, back after."""
    assert run_cli(sim_dir, "bind", "nic1", "--driver", "vfio-pci").exit_code == 0
    doc = as_json(run_cli(sim_dir, "--json", "topo", "--matrix"))
    assert [n["rdma"] for n in doc["nics"].values()] == ["mlx5_0", "mlx5_2", "mlx5_3"]
    assert run_cli(sim_dir, "bind", "nic1", "--restore").exit_code == 0
    doc = as_json(run_cli(sim_dir, "--json", "topo", "--matrix"))
    assert doc["nics"]["NIC1"]["rdma"] == "mlx5_1"


def test_matrix_and_rdma_together_print_both(sim_dir: Path, run_cli: Run) -> None:
    """--matrix --rdma honours both: the matrix, a blank line, then the RDMA table (was: --matrix ignored)."""
    matrix = run_cli(sim_dir, "topo", "--matrix").stdout
    rdma = run_cli(sim_dir, "topo", "--rdma").stdout
    both = run_cli(sim_dir, "topo", "--matrix", "--rdma")
    assert both.exit_code == 0 and both.stdout == matrix + "\n" + rdma
