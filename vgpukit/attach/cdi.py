"""CDI (Container Device Interface) specs for the host's VFIO devices, mdevs and MIG slices.

A CDI spec has exactly one ``kind``, so vgpukit writes one spec per device class:

========  ====================================  ==========================================
class     devices (CDI name)                    container edits
========  ====================================  ==========================================
``vf``    SR-IOV VFs bound to a VFIO driver     ``/dev/vfio/vfio``, ``/dev/vfio/<group>``
          (name: BDF ``0000:3b:02.1``)
``pci``   other functions bound to VFIO         same
          (whole GPUs, NVMe...; name: BDF)
``mdev``  mediated devices (name: UUID)         same, with the mdev's own group
``mig``   MIG devices (name: ``MIG-<uuid>``)    ``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
                                                ``/dev/nvidia<N>``, GI + CI access caps,
                                                ``NVIDIA_VISIBLE_DEVICES=MIG-<uuid>``
========  ====================================  ==========================================

so ``podman run --device vgpukit.io/vf=0000:3b:02.1`` works. Device numbers come from the host's
nodes (``stat``) where they are character devices, else (nvidia-caps) from ``/proc/devices`` and
``mig-minors``; when unknown they are left out and the container runtime reads them from the node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..host import Host
from ..host_layout import IOMMU_GROUP
from ..pci import Scan
from .mig import MigSlice, mig_slices

if TYPE_CHECKING:
    from ..nvml import Nvml

CDI_VERSION = "0.6.0"
VENDOR = "vgpukit.io"
CLASSES = ("vf", "pci", "mdev", "mig")
GENERATOR_KEY = f"{VENDOR}/generator"


@dataclass(frozen=True)
class Node:
    path: str  # as the host (and the container) sees it: /dev/vfio/12
    major: int | None = None
    minor: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "type": "c", "permissions": "rw"}
        if self.major is not None and self.minor is not None:
            d["major"], d["minor"] = self.major, self.minor
        return d


@dataclass(frozen=True)
class CdiDevice:
    name: str
    nodes: tuple[Node, ...]
    env: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        edits: dict[str, Any] = {}
        if self.env:
            edits["env"] = list(self.env)
        edits["deviceNodes"] = [n.to_dict() for n in self.nodes]
        return {"name": self.name, "containerEdits": edits}


@dataclass
class Spec:
    cls: str
    devices: list[CdiDevice] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return f"{VENDOR}/{self.cls}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "annotations": {GENERATOR_KEY: "vgpukit cdi generate"},
            "devices": [d.to_dict() for d in self.devices],
        }

    def render(self, fmt: str) -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        import yaml

        return str(yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False))


# ----------------------------------------------------------------------------- device numbers
def proc_major(host: Host, name: str) -> int | None:
    """The character major registered as ``name`` in /proc/devices."""
    text = host.read_opt(host.proc("devices")) or ""
    in_char = False
    for line in text.splitlines():
        if line.startswith("Character devices"):
            in_char = True
        elif line.startswith("Block devices"):
            in_char = False
        elif in_char:
            parts = line.split()
            if len(parts) == 2 and parts[1] == name and parts[0].isdigit():
                return int(parts[0])
    return None


def node(host: Host, *parts: str, fallback: tuple[int | None, int | None] = (None, None)) -> Node:
    path = host.dev(*parts)
    nums = host.char_device(path)
    major, minor = nums if nums else fallback
    return Node(host.display(path), major, minor)


# ----------------------------------------------------------------------------- collectors
def vfio_nodes(host: Host, group: int) -> tuple[Node, ...] | None:
    if not host.exists(host.vfio_group_node(group)):
        return None
    return node(host, "vfio", "vfio"), node(host, "vfio", str(group))


def collect_pci(host: Host, warnings: list[str]) -> tuple[list[CdiDevice], list[CdiDevice]]:
    vfs: list[CdiDevice] = []
    others: list[CdiDevice] = []
    for dev in Scan(host).devices():
        bdf = dev.bdf
        if not dev.driver or "vfio" not in dev.driver or dev.iommu_group is None:
            continue
        nodes = vfio_nodes(host, dev.iommu_group)
        if nodes is None:
            warnings.append(f"{bdf} is bound to {dev.driver} but /dev/vfio/{dev.iommu_group} is missing; skipped")
            continue
        (vfs if dev.is_vf else others).append(CdiDevice(bdf, nodes))
    return vfs, others


def collect_mdev(host: Host, warnings: list[str]) -> list[CdiDevice]:
    out = []
    for uuid in host.listdir(host.mdev_devices()):
        group = host.link_name(host.mdev_device(uuid, IOMMU_GROUP))
        if not group or not group.isdigit():
            warnings.append(f"mdev {uuid} has no IOMMU group (vfio_mdev not bound?); skipped")
            continue
        nodes = vfio_nodes(host, int(group))
        if nodes is None:
            warnings.append(f"mdev {uuid}: /dev/vfio/{group} is missing; skipped")
            continue
        out.append(CdiDevice(uuid, nodes))
    return out


def mig_device(host: Host, s: MigSlice, caps_major: int | None) -> CdiDevice:
    def cap(minor: int) -> Node:
        return node(host, "nvidia-caps", f"nvidia-cap{minor}", fallback=(caps_major, minor))

    nodes = (
        node(host, "nvidiactl"),
        node(host, "nvidia-uvm"),
        node(host, f"nvidia{s.minor}"),
        cap(s.gi_cap_minor),
        cap(s.ci_cap_minor),
    )
    return CdiDevice(s.uuid, nodes, env=(f"NVIDIA_VISIBLE_DEVICES={s.uuid}",))


def collect(host: Host, nvml: Nvml | None, classes: tuple[str, ...] = CLASSES) -> tuple[list[Spec], list[str]]:
    """One spec per requested class (possibly empty) and the warnings worth showing (``nvml``: MIG only)."""
    warnings: list[str] = []
    specs = {c: Spec(c) for c in classes}
    if "vf" in specs or "pci" in specs:
        vfs, others = collect_pci(host, warnings)
        if "vf" in specs:
            specs["vf"].devices = vfs
        if "pci" in specs:
            specs["pci"].devices = others
    if "mdev" in specs:
        specs["mdev"].devices = collect_mdev(host, warnings)
    if "mig" in specs:
        slices = mig_slices(host, nvml, warnings)
        major = proc_major(host, "nvidia-caps")
        specs["mig"].devices = [mig_device(host, s, major) for s in slices]
    return [specs[c] for c in classes], warnings


# ----------------------------------------------------------------------------- files
def spec_path(output: Path, cls: str) -> Path:
    """``/etc/cdi/vgpukit.yaml`` -> ``/etc/cdi/vgpukit-vf.yaml`` (one spec per kind)."""
    return output.with_name(f"{output.stem}-{cls}{output.suffix}")


def output_format(output: Path) -> str:
    if output.suffix in (".yaml", ".yml"):
        return "yaml"
    if output.suffix == ".json":
        return "json"
    raise InvalidInput(f"--output {output}: CDI specs are .yaml or .json files", value=str(output))


@dataclass
class FilePlan:
    path: Path
    action: str  # write | remove | keep
    spec: Spec
    text: str


def plan_files(host: Host, output: Path, specs: list[Spec]) -> list[FilePlan]:
    """What to write: changed specs; stale vgpukit specs of now-empty classes are removed."""
    fmt = output_format(output)
    plans = []
    for spec in specs:
        path = spec_path(output, spec.cls)
        text = spec.render(fmt)
        current = host.read_doc(path, "CDI spec", missing_ok=True)
        if not spec.devices:
            ours = current is not None and GENERATOR_KEY in current
            plans.append(FilePlan(path, "remove" if ours else "keep", spec, ""))
        else:
            same = current is not None and current.strip() == text.strip()
            plans.append(FilePlan(path, "keep" if same else "write", spec, text))
    return plans


def apply_files(host: Host, plans: list[FilePlan]) -> None:
    for p in plans:
        if p.action == "write":
            host.write_file(p.path, p.text)
        elif p.action == "remove":
            host.remove(p.path)
