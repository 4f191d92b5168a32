"""``vgpukit sim init``: build a simulated host from a profile (a YAML data file)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import Conflict, InvalidInput, NotFound, Unsupported, VgpukitError, from_oserror
from ..inputs import check_component, load_yaml
from .driver_files import write_driver_files
from .reactions_reset import add_files as add_reset_files
from .reactions_reset import default_methods
from .state import KernelState, sim_meta_dir
from .tree import CHAR_DEVICES_MARK, RW, SimTree

MAX_PROFILE_BYTES = 1024 * 1024
PROFILE_KEYS = {
    "version",
    "name",
    "description",
    "numa_nodes",
    "drivers",
    "vf_models",
    "models",
    "host_bridges",
    "virtual_mdev_parents",
    "boot",
    "nvlink",
}
NODE_KEYS = {"bdf", "model", "children", "group", "driver", "numa"}


def builtin_profiles() -> dict[str, Path]:
    base = resources.files(__package__).joinpath("profiles")
    return {p.name.removesuffix(".yaml"): Path(str(p)) for p in base.iterdir() if p.name.endswith(".yaml")}


def load_profile(name_or_path: str) -> dict[str, Any]:
    profiles = builtin_profiles()
    path = profiles.get(name_or_path) or Path(name_or_path)
    if not path.is_file():
        raise NotFound(
            f"unknown simulator profile {name_or_path!r}",
            value=name_or_path,
            hint="available: " + ", ".join(sorted(profiles)) + " (or a path to a profile YAML)",
        )
    from ..host import Host  # the user's own file: regular, size-capped, read where it is

    text = Host().read_doc(path, "simulator profile", MAX_PROFILE_BYTES, user_file=True)
    data = load_yaml(text or "", str(path))
    if not isinstance(data, dict) or data.get("version") != 1:
        raise InvalidInput(f"{path}: a profile needs 'version: 1'", path=str(path))
    if set(data) - PROFILE_KEYS:
        raise InvalidInput(f"{path}: unknown profile key (allowed: {', '.join(sorted(PROFILE_KEYS))})", path=str(path))
    if not isinstance(data.get("name"), str):
        raise InvalidInput(f"{path}: a profile needs a 'name'", path=str(path))
    check_component(data["name"], f"{path}: the profile name")
    return data


class Builder:
    def __init__(self, root: Path, profile: dict[str, Any]) -> None:
        self.root = root
        self.profile = profile
        self.tree = SimTree(root)
        self.models: dict[str, dict[str, Any]] = profile.get("models", {})
        self.state = KernelState(profile=profile["name"])
        self.gpus: list[dict[str, Any]] = []

    def build(self) -> None:
        for sub in ("sys/bus/pci/devices", "sys/kernel/iommu_groups", "dev/vfio", "proc", "run/vgpukit", "etc/vgpukit"):
            self.tree.mkdir(self.root / sub)
        self.tree.write_attr(self.tree.bus_pci / "drivers_probe", "", 0o200)
        # this boot's id, as the kernel makes one at every boot (a reboot builds /proc again: a new one)
        self.tree.write_attr(self.root / "proc/sys/kernel/random/boot_id", uuid.uuid4())
        self.tree.write_attr(self.tree.bus_pci / "drivers_autoprobe", 1, RW)
        self.tree.make_devnode(self.tree.devnode("vfio", "vfio"), 10, 196)
        for drv, ids in self.profile.get("drivers", {}).items():
            self.tree.add_driver(drv)
            self.state.driver_ids[drv] = list(ids)
        self.state.vf_models = {k: self.models[v] for k, v in self.profile.get("vf_models", {}).items()}
        nodes = self.profile.get("numa_nodes") or {}
        for node, cpus in nodes.items():
            self.tree.write_attr(self.root / "sys/devices/system/node" / f"node{node}" / "cpulist", cpus)
        self.tree.write_attr(self.root / "sys/devices/system/node/online", ",".join(str(n) for n in nodes) or "0")
        for hb in self.profile.get("host_bridges", []):
            hb_dir = self.root / "sys" / "devices" / hb["name"]
            self.tree.mkdir(hb_dir)
            numa = hb.get("numa")
            for node in hb.get("devices", []):
                self._device(hb_dir, node, numa, nodes.get(numa) if numa is not None else None)
        for vp in self.profile.get("virtual_mdev_parents", []):
            pdir = self.root / "sys" / "devices" / vp["path"]
            self.tree.mkdir(pdir)
            self._mdev_parent(vp["name"], pdir, vp["mdev"])
        # the driver numbers its GPUs (NVML indices, /dev/nvidiaN) in PCI bus order, whatever order
        # the profile lists them in
        self.gpus.sort(key=lambda g: str(g["bdf"]))
        if self.profile.get("nvlink"):
            from .nvlink import wire

            wire(self.profile["nvlink"], self.gpus)
        self._gpu_nodes()
        from .vmhost import write_vm_host

        write_vm_host(self.root)

    def _device(self, parent: Path, node: dict[str, Any], numa: int | None, cpus: str | None) -> None:
        unknown = set(node) - NODE_KEYS
        if unknown:
            raise InvalidInput(f"profile device {node.get('bdf')}: unknown keys {sorted(unknown)}")
        model = self.models.get(node["model"])
        if model is None:
            raise InvalidInput(f"profile device {node['bdf']}: unknown model {node['model']!r}")
        bdf = node["bdf"]
        if "numa" in node:  # firmware's proximity for this device alone (-1: none reported)
            numa = None if node["numa"] is None or node["numa"] < 0 else int(node["numa"])
        group = node.get("group", self.state.next_group)
        self.state.next_group = max(self.state.next_group, group + 1)
        d = self.tree.add_pci_device(parent, bdf, model, numa, cpus, group)
        add_reset_files(self.tree, d, default_methods(model))
        driver = node.get("driver", model.get("driver")) or self.state.match_driver(model["ids"], model["class"])
        if model.get("rdma") and driver:  # e.g. mlx5: mlx5_core registers mlx5_<n> in probe order
            prefix = str(model["rdma"])
            n = sum(1 for e in self.state.rdma.values() if e["name"].startswith(prefix + "_"))
            self.state.rdma[bdf] = {"name": f"{prefix}_{n}", "driver": driver}
        if driver:
            self.tree.add_driver(driver)
            self.tree.bind(bdf, driver, self.state.rdma_for(bdf, driver))
        sriov = model.get("sriov")
        if sriov:
            self.tree.write_attr(d / "sriov_totalvfs", sriov["total_vfs"])
            self.tree.write_attr(d / "sriov_numvfs", 0, RW)
            self.tree.write_attr(d / "sriov_offset", sriov.get("offset", 1))
            self.tree.write_attr(d / "sriov_stride", sriov.get("stride", 1))
            self.tree.write_attr(d / "sriov_vf_device", sriov["vf_device"])
            self.tree.write_attr(d / "sriov_drivers_autoprobe", 1, RW)
        if model.get("mdev"):
            self._mdev_parent(bdf, d, model["mdev"])
        gpu = model.get("gpu")
        if gpu:
            uid = uuid.uuid5(uuid.NAMESPACE_URL, f"vgpukit-sim/{self.profile['name']}/{bdf}")
            self.gpus.append({"bdf": bdf, "uuid": f"GPU-{uid}", **gpu})
        for child in node.get("children", []):
            self._device(d, child, numa, cpus)

    def _mdev_parent(self, name: str, pdir: Path, spec: dict[str, Any]) -> None:
        from .reactions_vgpu import mdev_spec

        spec = mdev_spec(spec)  # vGPU profiles: `vgpu_catalog: KEY` -> a framebuffer pool
        self.state.mdev_pools[name] = {
            "pool": spec["pool"],
            "homogeneous": bool(spec.get("homogeneous")),
            "types": spec["types"],
            "counts": {},
        }
        for type_id, t in spec["types"].items():
            tdir = pdir / "mdev_supported_types" / type_id
            self.tree.write_attr(tdir / "name", t["name"])
            self.tree.write_attr(tdir / "device_api", t.get("device_api", "vfio-pci"))
            if t.get("description"):
                self.tree.write_attr(tdir / "description", t["description"])
            self.tree.write_attr(tdir / "available_instances", spec["pool"] // t["cost"])
            self.tree.write_attr(tdir / "create", "", 0o200)
            self.tree.mkdir(tdir / "devices")
        self.tree.link(self.root / "sys" / "class" / "mdev_bus" / name, pdir)

    def _gpu_nodes(self) -> None:
        if not self.gpus:
            return
        self.tree.make_devnode(self.tree.devnode("nvidiactl"), 195, 255)
        self.tree.make_devnode(self.tree.devnode("nvidia-uvm"), 510, 0)
        self.tree.make_devnode(self.tree.devnode("nvidia-uvm-tools"), 510, 1)
        for i, _gpu in enumerate(self.gpus):
            self.tree.make_devnode(self.tree.devnode(f"nvidia{i}"), 195, i)
        write_driver_files(self.tree)


def _boot(root: Path, writes: list[dict[str, Any]]) -> None:
    """Profile ``boot:`` entries: control-file writes a host's boot services make, played through the
    simulated kernel (e.g. NVIDIA's ``sriov-manage -e`` enabling VFs): ``{sys: PATH-UNDER-/sys, write: V}``."""
    from .kernel import SimKernel

    kernel = SimKernel(root)
    for entry in writes:
        kernel.write(root / "sys" / entry["sys"], str(entry["write"]))


def init_sim(root: Path, profile_name: str, force: bool = False, char_devices: bool = False) -> dict[str, Any]:
    """Create a simulated host under ``root``; refuses a non-empty dir unless ``force``. A profile
    that is wrong in any way leaves nothing half-built (docs/safety.md)."""
    try:
        profile = load_profile(profile_name)
        if root.exists() and not root.is_dir():
            raise InvalidInput(f"{root} exists and is not a directory", path=str(root))
        if char_devices and os.geteuid() != 0:
            raise Unsupported("--char-devices needs root (it makes character device nodes with mknod)")
        return _init_sim(root, profile, force, char_devices)
    except OSError as exc:
        raise from_oserror(exc, path=root, action="creating a simulated host in") from None


def _init_sim(root: Path, profile: dict[str, Any], force: bool = False, char_devices: bool = False) -> dict[str, Any]:
    meta = sim_meta_dir(root)
    if root.exists() and any(root.iterdir()):
        if not force:
            raise Conflict(f"{root} is not empty", path=str(root), hint="use --force to replace it")
        if not meta.is_dir():
            raise Conflict(f"{root} is not empty and is not a simulated host; refusing to delete it", path=str(root))
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    builder = Builder(root, profile)
    info = {"version": 1, "profile": profile["name"], "description": profile.get("description", "")}
    try:
        if char_devices:
            meta.mkdir(parents=True, exist_ok=True)
            (meta / CHAR_DEVICES_MARK).write_text("device nodes are real, with /dev/null's numbers (1:3)\n")
        builder.build()
        meta.mkdir(parents=True, exist_ok=True)
        builder.state.save(root)
        _boot(root, profile.get("boot") or [])
        from .nvml import initial_state

        (meta / "nvml.json").write_text(json.dumps(initial_state(builder.gpus), indent=1))
        (meta / "sim.json").write_text(json.dumps(info, indent=1))
    except (VgpukitError, OSError, KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        # a profile is the user's data: whatever it gets wrong, nothing half-built stays behind
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        if isinstance(exc, VgpukitError):
            raise
        raise InvalidInput(
            f"{profile['name']}: not a valid simulator profile (a value is missing or of the wrong kind)"
        ) from exc
    return {**info, "root": str(root), "devices": len(builder.tree.all_bdfs()), "gpus": len(builder.gpus)}
