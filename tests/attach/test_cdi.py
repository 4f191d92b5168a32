"""CDI specs: content, the CNCF JSON schema, atomic idempotent writes, stale-file cleanup, MIG."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Run
from vgpukit.cdi import spec as cdi
from vgpukit.cdi.mig import mig_slices
from vgpukit.host import Host
from vgpukit.nvml import NvmlGpu

from ..conftest import as_json
from .fakehost import FakeHost
from .test_cli import MTTY_UUID, NIC_VF, NIC_VF2, make_mdev, make_vfs

SCHEMA_DIR = Path(__file__).parent / "cdi-schema"


def validate_cdi(doc: dict[str, Any]) -> None:
    import jsonschema
    from referencing import Registry, Resource

    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    from referencing.jsonschema import DRAFT7

    registry = Registry().with_resource("defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
    jsonschema.Draft7Validator(schema, registry=registry).validate(doc)


def test_schema_check_can_fail() -> None:
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        validate_cdi({"cdiVersion": "0.6.0", "kind": "vgpukit.io/vf", "devices": [{"name": "x"}]})
    with pytest.raises(jsonschema.ValidationError):
        validate_cdi({"cdiVersion": "0.6.0", "kind": "vgpukit.io/vf", "devices": [{"name": "x", "containerEdits":
                     {"deviceNodes": [{"path": "/dev/x", "major": "ten"}]}}]})  # fmt: skip


def test_generate_vfs_on_sim(sim_dir: Path, run_cli: Run) -> None:
    make_vfs(sim_dir)
    res = run_cli(sim_dir, "cdi", "generate", "--class", "vf", "--json")
    assert res.exit_code == 0, res.stderr
    doc = as_json(res)
    assert doc["schema"] == "vgpukit.cdi/v1" and doc["changed"] is True
    assert doc["plan"] == ["write /etc/cdi/vgpukit-vf.yaml (vgpukit.io/vf, 2 devices)"]
    spec = yaml.safe_load((sim_dir / "etc/cdi/vgpukit-vf.yaml").read_text())
    validate_cdi(spec)
    assert spec["kind"] == "vgpukit.io/vf"
    assert [d["name"] for d in spec["devices"]] == [NIC_VF, NIC_VF2, "all"]
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    all_nodes = spec["devices"][2]["containerEdits"]["deviceNodes"]
    assert len(all_nodes) == 3 and all_nodes[0] == nodes[0]  # /dev/vfio/vfio once, then both groups
    group = (sim_dir / "sys/bus/pci/devices" / NIC_VF / "iommu_group").readlink().name
    assert [n["path"] for n in nodes] == ["/dev/vfio/vfio", f"/dev/vfio/{group}"]
    # simulated nodes are plain files, so no major/minor (the runtime stats the node itself)
    assert all("major" not in n and "minor" not in n for n in nodes)
    again = as_json(run_cli(sim_dir, "cdi", "generate", "--class", "vf", "--json"))
    assert again["changed"] is False and again["plan"] == []


def test_stale_spec_removed_but_foreign_file_kept(sim_dir: Path, run_cli: Run) -> None:
    make_vfs(sim_dir)
    assert run_cli(sim_dir, "cdi", "generate").exit_code == 0
    foreign = sim_dir / "etc/cdi/vgpukit-mdev.yaml"
    foreign.write_text("cdiVersion: 0.6.0\nkind: someone.else/mdev\ndevices: []\n")
    from vgpukit.host import Host
    from vgpukit.sim.kernel import SimKernel

    h = Host(sim_dir, kernel=SimKernel(sim_dir))
    h.write(h.pci_device("0000:05:00.0", "sriov_numvfs"), "0")
    doc = as_json(run_cli(sim_dir, "cdi", "generate", "--json"))
    assert doc["plan"] == ["remove /etc/cdi/vgpukit-vf.yaml (no vgpukit.io/vf devices left)"]
    assert not (sim_dir / "etc/cdi/vgpukit-vf.yaml").exists() and foreign.exists()


def test_mdev_json_output_and_dry_run(qemu_sim: Path, run_cli: Run) -> None:
    make_mdev(qemu_sim)
    res = run_cli(qemu_sim, "--dry-run", "cdi", "generate", "--output", "/etc/cdi/vk.json")
    assert res.exit_code == 0 and "dry run" in res.stdout
    assert not (qemu_sim / "etc/cdi/vk-mdev.json").exists()
    res = run_cli(qemu_sim, "cdi", "generate", "--output", "/etc/cdi/vk.json", "--class", "mdev")
    assert res.exit_code == 0, res.stderr
    spec = json.loads((qemu_sim / "etc/cdi/vk-mdev.json").read_text())
    validate_cdi(spec)
    assert spec["kind"] == "vgpukit.io/mdev" and spec["devices"][0]["name"] == MTTY_UUID


def test_print_to_stdout(qemu_sim: Path, run_cli: Run) -> None:
    make_mdev(qemu_sim)
    res = run_cli(qemu_sim, "cdi", "generate", "--output", "-")
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert [d["kind"] for d in docs] == ["vgpukit.io/mdev"]
    for d in docs:
        validate_cdi(d)
    assert not (qemu_sim / "etc/cdi").exists() or not any((qemu_sim / "etc/cdi").iterdir())


@pytest.mark.parametrize(("output", "code"), [("cdi.yaml", 2), ("/etc/cdi/vgpukit.txt", 2), ("/../x.yaml", 2)])
def test_bad_output(qemu_sim: Path, run_cli: Run, output: str, code: int) -> None:
    res = run_cli(qemu_sim, "cdi", "generate", "--output", output)
    assert res.exit_code == code, res.stderr


def test_vfio_device_without_group_node_is_skipped(fake: FakeHost) -> None:
    fake.pci("0000:3b:00.4", driver="vfio-pci", group=7, physfn="0000:3b:00.0")
    fake.pci("0000:3b:00.0", driver="nvidia", group=6)
    specs, warnings = cdi.collect(Host(fake.root), None, ("vf", "pci"))
    assert all(not s.devices for s in specs)
    assert any("/dev/vfio/7 is missing" in w for w in warnings)
    fake.file("dev/vfio/7", "")
    specs, _ = cdi.collect(Host(fake.root), None, ("vf", "pci"))
    assert [d.name for d in specs[0].devices] == ["0000:3b:00.4", "all"] and specs[1].devices == []


# ----------------------------------------------------------------------------- MIG
@dataclass(frozen=True)
class Ci:
    id: int
    uuid: str


@dataclass(frozen=True)
class Gi:
    id: int
    compute_instances: tuple[Ci, ...] = field(default_factory=tuple)


class TwoGpuNvml:
    """A facade stand-in with the MIG calls the mig branch adds (gpus + gpu_instances)."""

    def gpus(self) -> list[NvmlGpu]:
        return [
            NvmlGpu(0, "0000:03:00.0", "GPU-aaaa", "A100", True, False, False),
            NvmlGpu(1, "0000:04:00.0", "GPU-bbbb", "A100", True, True, True),
        ]

    def gpu_instances(self, gpu: int) -> list[Gi]:
        assert gpu == 1
        return [
            Gi(1, (Ci(0, "MIG-11111111-1111-1111-1111-111111111111"),)),
            Gi(2, (Ci(0, "MIG-2222"), Ci(1, "MIG-3333"))),
        ]


def mig_minors(n_gpus: int) -> str:
    lines = ["config 1", "monitor 2"]
    for g in range(n_gpus):
        for gi in range(15):
            lines.append(f"gpu{g}/gi{gi}/access {3 + 135 * g + 9 * gi}")
            lines += [f"gpu{g}/gi{gi}/ci{ci}/access {3 + 135 * g + 9 * gi + 1 + ci}" for ci in range(8)]
    return "\n".join(lines) + "\n"


def test_mig_specs(fake: FakeHost) -> None:
    fake.file("proc/driver/nvidia-caps/mig-minors", mig_minors(2))
    fake.file(
        "proc/devices", "Character devices:\n  1 mem\n195 nvidia-frontend\n237 nvidia-caps\n\nBlock devices:\n  8 sd\n"
    )
    fake.file("proc/driver/nvidia/gpus/0000:04:00.0/information", "Model: A100\nDevice Minor: \t 1\n")
    host, nvml = Host(fake.root), TwoGpuNvml()
    warnings: list[str] = []
    slices = mig_slices(host, nvml, warnings)
    assert warnings == []
    assert [(s.uuid, s.minor, s.gi_cap_minor, s.ci_cap_minor) for s in slices] == [
        ("MIG-11111111-1111-1111-1111-111111111111", 1, 147, 148),
        ("MIG-2222", 1, 156, 157),
        ("MIG-3333", 1, 156, 158),
    ]
    specs, _ = cdi.collect(host, nvml, ("mig",))
    doc = specs[0].to_dict()
    validate_cdi(doc)
    # nvidia-ctk's names: <gpu index>:<MIG index> and the UUID, then all
    assert [d["name"] for d in doc["devices"]] == ["1:0", "MIG-11111111-1111-1111-1111-111111111111", "1:1",
                                                   "MIG-2222", "1:2", "MIG-3333", "all"]  # fmt: skip
    dev = doc["devices"][5]
    assert dev["name"] == "MIG-3333" and "env" not in dev["containerEdits"]  # NVIDIA_VISIBLE_DEVICES=void spec-wide
    nodes = dev["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in nodes] == [
        "/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap156", "/dev/nvidia-caps/nvidia-cap158",
    ]  # fmt: skip
    assert (nodes[1]["major"], nodes[1]["minor"]) == (237, 156)  # missing node: numbers from /proc/devices
    assert "major" not in nodes[0]  # no node, no /proc/devices entry: the runtime reads it from the host


def test_mig_without_minors_file_warns(fake: FakeHost) -> None:
    host, nvml = Host(fake.root), TwoGpuNvml()
    warnings: list[str] = []
    assert mig_slices(host, nvml, warnings) == []
    assert len(warnings) == 3 and "mig-minors" in warnings[0]


def test_mig_on_simulator(sim_dir: Path, run_cli: Run) -> None:
    """End to end through the simulated NVML driver (needs the facade's MIG calls from the mig work)."""
    from vgpukit.sim.nvml import SimNvml

    nvml: Any = SimNvml(sim_dir)
    if not hasattr(nvml, "create_gpu_instance"):
        pytest.skip("the NVML facade on this branch has no MIG calls yet (gpu_instances, create_gpu_instance)")
    if not nvml.set_mig_mode(1, True):
        nvml.reset_gpu(1)
    profile = next(p for p in nvml.gi_profiles(1) if p.name == "3g.20gb")
    gi = nvml.create_gpu_instance(1, profile.id)
    full = next(c for c in nvml.ci_profiles(1, gi.id) if c.full)
    ci = nvml.create_compute_instance(1, gi.id, full.enum)
    res = run_cli(sim_dir, "cdi", "generate", "--class", "mig", "--json")
    assert res.exit_code == 0, res.stderr
    spec = yaml.safe_load((sim_dir / "etc/cdi/vgpukit-mig.yaml").read_text())
    validate_cdi(spec)
    (index, dev, _all) = spec["devices"]
    assert dev["name"] == ci.uuid and index["name"] == "1:0" and _all["name"] == "all"
    paths = [n["path"] for n in dev["containerEdits"]["deviceNodes"]]
    paths += [n["path"] for n in spec["containerEdits"]["deviceNodes"]]
    gi_minor = 3 + 135 * 1 + 9 * gi.id  # the driver's formula (docs/mig.md), read here from mig-minors
    assert paths[:3] == [
        "/dev/nvidia1",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor}",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor + 1}",
    ]
    for p in paths:
        assert (sim_dir / p.lstrip("/")).exists(), p  # every node the spec names exists on the host


def test_edits_of_reads_only_the_named_devices(fake: FakeHost) -> None:
    """A scoped collection (a DRA claim's prepare) looks at the named functions only: a broken
    function not asked for is not read (no warning), and the answer is the full collection's."""
    fake.pci("0000:3b:00.4", driver="vfio-pci", group=7, physfn="0000:3b:00.0")
    fake.pci("0000:3b:00.5", driver="vfio-pci", group=8, physfn="0000:3b:00.0")  # no /dev/vfio/8
    fake.pci("0000:3b:00.0", driver="nvidia", group=6)
    fake.file("dev/vfio/7", "")
    host = Host(fake.root)
    full, warnings = cdi.collect(host, None, ("vf", "pci"))
    assert any("/dev/vfio/8 is missing" in w for w in warnings)
    name = "vgpukit.io/vf=0000:3b:00.4"
    got = cdi.edits_of(host, None, {name, "vgpukit.io/vf=0000:3b:00.6", "other.io/vf=0000:3b:00.4"})
    assert got == {name: full[0].devices[0].edits}
    specs, warnings = cdi.collect(host, None, ("vf",), only={"vf": {"0000:3b:00.4"}})
    assert [d.name for d in specs[0].devices] == ["0000:3b:00.4"] and warnings == []  # no `all`, no .5
    assert cdi.edits_of(host, None, {"vgpukit.io/vf=0000:3b:00.5", "vgpukit.io/vf=all"}) == {}


# ----------------------------------------------------------------------------- vGPU on a VF
def test_a_vgpu_vf_gets_its_vfio_group_and_loses_it_with_its_type(tmp_path: Path, run_cli: Run) -> None:
    """NVIDIA's vendor VFIO (vGPU 17+): a VF with a vGPU type stays on ``nvidia``, which registers it
    with VFIO; its CDI entry is the group node a VMM opens. A VF of no vGPU has none."""
    from tests.conftest import make_sim

    sim = make_sim(tmp_path / "h100", "h100-vgpu")
    vf = "0000:41:00.4"
    assert run_cli(sim, "vgpu", "create", "gpu0", "--type", "H100-20C").exit_code == 0
    group = (sim / "sys/bus/pci/devices" / vf / "iommu_group").readlink().name
    assert (sim / "sys/bus/pci/devices" / vf / "driver").readlink().name == "nvidia"
    (spec,), warnings = cdi.collect(Host(sim), None, ("vf",))
    assert [d.name for d in spec.devices] == [vf, "all"] and warnings == []
    assert [n["path"] for n in spec.devices[0].edits.nodes] == ["/dev/vfio/vfio", f"/dev/vfio/{group}"]
    assert list(cdi.edits_of(Host(sim), None, {f"vgpukit.io/vf={vf}", "vgpukit.io/vf=0000:41:00.5"})) == [
        f"vgpukit.io/vf={vf}"
    ]
    assert run_cli(sim, "vgpu", "remove", vf).exit_code == 0
    assert not (sim / "dev/vfio" / group).exists()
    (spec,), _ = cdi.collect(Host(sim), None, ("vf",))
    assert spec.devices == []


def test_a_vgpu_vf_without_its_group_node_is_skipped_with_a_warning(fake: FakeHost) -> None:
    fake.pci("0000:41:00.0", driver="nvidia", group=4)
    fake.pci("0000:41:00.4", driver="nvidia", group=5, physfn="0000:41:00.0")
    fake.file("sys/bus/pci/devices/0000:41:00.4/nvidia/current_vgpu_type", "1055\n")
    fake.pci("0000:41:00.5", driver="nvidia", group=6, physfn="0000:41:00.0")
    fake.file("sys/bus/pci/devices/0000:41:00.5/nvidia/current_vgpu_type", "0\n")
    fake.file("dev/vfio/6", "")
    specs, warnings = cdi.collect(Host(fake.root), None, ("vf", "pci"))
    assert all(not s.devices for s in specs)  # .4: no node; .5: no vGPU; the PF: not a VF
    assert warnings == ["0000:41:00.4 has a vGPU type but /dev/vfio/5 is missing; skipped"]
