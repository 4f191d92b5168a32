"""vGPU over legacy mdev (t4-mdev): types from the host, homogeneous GPUs, shared framebuffer."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Run, as_json, sim_host
from vgpukit.sim.holders import hold

GPU0, GPU1 = "0000:3b:00.0", "0000:d8:00.0"


def _types(run: Run, sim: Path, gpu: str = "gpu0") -> dict[str, dict]:  # type: ignore[type-arg]
    doc = as_json(run(sim, "vgpu", "types", gpu, "--json"))
    return {t["short"]: t for g in doc["gpus"] for t in g["types"]}


def test_types_read_from_host(t4_sim: Path, run_cli: Run) -> None:
    r = run_cli(t4_sim, "vgpu", "types", "--json")
    assert r.exit_code == 0, r.stderr
    doc = as_json(r)
    assert doc["schema"] == "vgpukit.vgpu-types/v1"
    assert [(g["gpu"], g["alias"], g["interface"]) for g in doc["gpus"]] == [
        (GPU0, "gpu0", "mdev"),
        (GPU1, "gpu1", "mdev"),
    ]
    t = {x["short"]: x for x in doc["gpus"][0]["types"]}
    assert len(t) == 10
    assert t["T4-4Q"] == {
        "gpu": GPU0,
        "interface": "mdev",
        "type_id": "nvidia-232",
        "name": "GRID T4-4Q",
        "short": "T4-4Q",
        "framebuffer_mb": 4096,
        "max_instances": 4,
        "available": 4,
        "creatable": True,
        "free_vfs": None,
        "parents": [GPU0],
    }
    assert t["T4-1B"]["available"] == 16 and t["T4-16C"]["available"] == 1


def test_types_follow_the_host_not_the_catalogue(t4_sim: Path, run_cli: Run) -> None:
    """A driver that reports other counts (or names) wins over the shipped catalogue."""
    tdir = t4_sim / "sys/bus/pci/devices" / GPU0 / "mdev_supported_types/nvidia-232"
    (tdir / "available_instances").chmod(0o644)
    (tdir / "available_instances").write_text("3\n")
    assert _types(run_cli, t4_sim)["T4-4Q"]["available"] == 3


def test_create_by_any_name_form_and_homogeneous(t4_sim: Path, run_cli: Run) -> None:
    for name in ("T4-4Q", "GRID T4-4Q", "grid t4-4q", "nvidia-232"):
        r = run_cli(t4_sim, "vgpu", "create", "gpu0", "--type", name, "--json")
        assert r.exit_code == 0, (name, r.stderr)
        (made,) = as_json(r)["vgpus"]
        assert made["parent"] == GPU0 and made["type"] == "GRID T4-4Q"
    t = _types(run_cli, t4_sim)
    assert t["T4-4Q"]["available"] == 0 and t["T4-1B"]["available"] == 0
    r = run_cli(t4_sim, "vgpu", "create", "gpu0", "--type", "T4-4Q")
    assert r.exit_code == 4 and "the host reports 0 available" in r.stderr
    # another type on the same physical GPU: refused by the host's report (homogeneous)
    r = run_cli(t4_sim, "vgpu", "create", "gpu0", "--type", "T4-1B")
    assert r.exit_code == 4
    # the other GPU is untouched
    assert _types(run_cli, t4_sim, "gpu1")["T4-1B"]["available"] == 16


def test_count_is_all_or_nothing(t4_sim: Path, run_cli: Run) -> None:
    r = run_cli(t4_sim, "vgpu", "create", "gpu1", "--type", "T4-8Q", "--count", "3")
    assert r.exit_code == 4 and "cannot take 3 x GRID T4-8Q: the host reports 2 available" in r.stderr
    assert as_json(run_cli(t4_sim, "vgpu", "list", "--json"))["vgpus"] == []
    r = run_cli(t4_sim, "vgpu", "create", "gpu1", "--type", "T4-8Q", "--count", "2", "--json")
    assert r.exit_code == 0 and len(as_json(r)["vgpus"]) == 2


def test_unknown_type_and_gpu(t4_sim: Path, run_cli: Run) -> None:
    r = run_cli(t4_sim, "vgpu", "create", "gpu0", "--type", "A100-4C")
    assert r.exit_code == 3 and "T4-4Q" in r.stderr  # hint lists what the host offers
    assert run_cli(t4_sim, "vgpu", "create", "gpu7", "--type", "T4-4Q").exit_code == 3
    assert run_cli(t4_sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "0").exit_code == 2


def test_list_remove_and_in_use(t4_sim: Path, run_cli: Run) -> None:
    r = run_cli(t4_sim, "vgpu", "create", "gpu0", "--type", "T4-8C", "--count", "2", "--json")
    ids = [v["id"] for v in as_json(r)["vgpus"]]
    lst = as_json(run_cli(t4_sim, "vgpu", "list", "--json"))
    assert lst["schema"] == "vgpukit.vgpu-list/v1"
    assert sorted(v["id"] for v in lst["vgpus"]) == sorted(ids)
    assert {v["interface"] for v in lst["vgpus"]} == {"mdev"} and lst["vgpus"][0]["name"] == "GRID T4-8C"
    group = (t4_sim / "sys/bus/mdev/devices" / ids[0] / "iommu_group").readlink().name
    hold(t4_sim, group, owner="guest=cad1")
    r = run_cli(t4_sim, "vgpu", "remove", ids[1], ids[0])
    assert r.exit_code == 4 and "cad1" in r.stderr
    assert run_cli(t4_sim, "vgpu", "remove", ids[1]).exit_code == 0
    assert [v["id"] for v in as_json(run_cli(t4_sim, "vgpu", "list", "--json"))["vgpus"]] == [ids[0]]
    assert run_cli(t4_sim, "vgpu", "remove", "not-a-uuid").exit_code == 2


def test_vgpu_params_attr_from_mdevctl_definition(t4_sim: Path, run_cli: Run) -> None:
    """An mdevctl definition with NVIDIA's vgpu_params attr starts and sets it."""
    u = "4b20d080-1b54-4048-85b3-a6a62d165c01"
    d = t4_sim / "etc/mdevctl.d" / GPU0
    d.mkdir(parents=True)
    (d / u).write_text(
        json.dumps(
            {"mdev_type": "nvidia-233", "start": "auto", "attrs": [{"nvidia/vgpu_params": "frame_rate_limiter=0"}]}
        )
    )
    r = run_cli(t4_sim, "mdev", "start", "--all", "--json")
    assert r.exit_code == 0, r.stdout
    h = sim_host(t4_sim)
    assert h.read(h.sys("bus", "mdev", "devices", u, "nvidia", "vgpu_params")) == "frame_rate_limiter=0"
    assert as_json(run_cli(t4_sim, "vgpu", "list", "--json"))["vgpus"][0]["id"] == u


def test_mdev_placement_over_both_t4s(t4_sim: Path, run_cli: Run) -> None:
    r = run_cli(t4_sim, "mdev", "create", "--type", "nvidia-232", "--count", "6", "--json")
    assert r.exit_code == 0
    parents = sorted(i["parent"] for i in as_json(r)["instances"])
    assert parents == [GPU0] * 4 + [GPU1] * 2
    r = run_cli(t4_sim, "mdev", "create", "--type", "nvidia-232", "--numa", "1", "--count", "2", "--json")
    assert r.exit_code == 0 and {i["parent"] for i in as_json(r)["instances"]} == {GPU1}


def test_short_names() -> None:
    from vgpukit.vgpu.catalog import catalog, framebuffer_mb, parse_description, short_name

    assert short_name("NVIDIA  H100-4C") == short_name("h100-4c") == short_name("GRID H100-4C") == "H100-4C"
    t4 = catalog("tesla-t4")
    spec = t4.by_name("grid t4-4q")
    assert spec is not None and spec.id == 232 and t4.full_name(spec) == "GRID T4-4Q"
    desc = parse_description(spec.description())
    assert desc["max_instance"] == "4" and framebuffer_mb(desc) == 4096
