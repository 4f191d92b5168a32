"""Messages a new user meets in the first hour, each said once, plainly and in good English."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Run, as_json, make_sim
from vgpukit.words import article, plural, slots, span


def test_words() -> None:
    assert [plural(1, "NIC"), plural(4, "NIC"), plural(0, "device")] == ["1 NIC", "4 NICs", "0 devices"]
    assert plural(2, "NVMe controller") == "2 NVMe controllers"
    assert [article("integer"), article("list"), article("object")] == ["an integer", "a list", "an object"]
    assert [span("nic", 0, 0), span("nic", 0, 3)] == ["nic0", "nic0..nic3"]
    assert [slots(2, 1), slots(4, 4)] == ["slot 2", "slots 4-7"]


def test_the_console_address_is_said_once(sim_dir: Path, run_cli: Run) -> None:
    for given in ("0000:11:00.0", "11:00.0"):
        r = run_cli(sim_dir, "bind", given, "--driver", "vfio-pci")
        assert r.exit_code == 4
        assert r.stderr.startswith("vgpukit: error: cannot move 0000:11:00.0: it is the console display"), r.stderr


def test_unbind_names_the_driver_once(sim_dir: Path, run_cli: Run) -> None:
    plan = as_json(run_cli(sim_dir, "--dry-run", "unbind", "nic0", "--json"))["plan"]
    assert plan == ["unbind 0000:05:00.0 from mlx5_core"]


def test_a_name_of_the_wrong_kind_says_what_it_is(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "bind", "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001", "--driver", "vfio-pci")
    assert r.exit_code == 2 and "(an mdev UUID, which this command does not take)" in r.stderr
    r = run_cli(sim_dir, "bind", "foo", "--driver", "vfio-pci")
    assert r.exit_code == 2 and r.stderr.startswith("vgpukit: error: cannot name a device by 'foo': use gpuN")
    assert "fit here" not in r.stderr


def test_vfs_bound_is_the_same_for_0_and_minus_1(sim_dir: Path, run_cli: Run) -> None:
    texts = []
    for n in ("0", "-1"):
        r = run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", n)
        assert r.exit_code == 2
        texts.append(r.stderr.replace(f"not {n}", "not N"))
    assert texts[0] == texts[1] and "must be at least 1" in texts[0]


@pytest.mark.parametrize("memory", ["8G", "8GiB", "8192M", "8192"])
def test_render_domain_memory_takes_units(sim_dir: Path, run_cli: Run, memory: str) -> None:
    r = run_cli(sim_dir, "render", "domain", "--name", "vm1", "--vcpus", "2", "--memory", memory)
    assert r.exit_code == 0, r.stderr
    assert "<memory unit='MiB'>8192</memory>" in r.stdout


def test_render_domain_memory_refuses_part_of_a_mib(sim_dir: Path, run_cli: Run) -> None:
    r = run_cli(sim_dir, "render", "domain", "--name", "vm1", "--vcpus", "2", "--memory", "1000K")
    assert r.exit_code == 2 and "whole number of MiB" in r.stderr and r.stderr.count("\n") == 1


def test_top_level_typo_suggests_the_command(run_cli: Run) -> None:
    r = run_cli(None, "topp")
    assert r.exit_code == 2 and "No such command 'topp'. Did you mean 'topo'?" in r.stderr
    r = run_cli(None, "xyzzy")
    assert r.exit_code == 2 and "Did you mean" not in r.stderr


def test_counts_take_the_right_number(tmp_path: Path, sim_dir: Path, run_cli: Run) -> None:
    guest = make_sim(tmp_path / "guest", "qemu-guest")
    r = run_cli(guest, "bind", "nvme3", "--driver", "vfio-pci")
    assert r.exit_code == 3 and "it has 1 NVMe controller (nvme0)" in r.stderr
    h100 = tmp_path / "h100"
    r = run_cli(None, "sim", "init", str(h100), "--profile", "h100-vgpu")
    assert r.exit_code == 0 and ", 1 GPU." in r.stdout
    plan = as_json(run_cli(sim_dir, "--dry-run", "partition", "gpu0", "--mig", "1g.5gb", "--json"))["plan"]
    assert any(p.endswith("create GPU instance 1g.5gb at slot 6") for p in plan), plan


def test_cdi_plan_counts_one_device(sim_dir: Path, run_cli: Run) -> None:
    assert run_cli(sim_dir, "sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci").exit_code == 0
    plan = as_json(run_cli(sim_dir, "--dry-run", "cdi", "generate", "--class", "vf", "--json"))["plan"]
    assert plan == ["write /etc/cdi/vgpukit-vf.yaml (vgpukit.io/vf, 1 device)"]
