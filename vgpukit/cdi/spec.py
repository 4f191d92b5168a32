"""CDI (Container Device Interface) specs for what vgpukit carves out, one spec per device class.

A CDI spec has exactly one ``kind``, so vgpukit writes one spec per class (docs/cdi.md):

=============  ==========================================  =========================================
class          devices (CDI names)                         container edits
=============  ==========================================  =========================================
``vf``         SR-IOV VFs bound to a VFIO driver, or       ``/dev/vfio/vfio``, ``/dev/vfio/<group>``
               with an NVIDIA vGPU type (vendor VFIO)
               (BDF)
``pci``        other functions bound to VFIO (BDF)         same
``mdev``       mediated devices (UUID)                     same, with the mdev's own group
``gpu``        whole GPUs on the NVIDIA driver             what nvidia-ctk injects (cdi/nvidia.py):
               (NVML index ``0`` and ``GPU-<uuid>``)       driver libraries, binaries, ldcache hook,
                                                           control nodes; ``/dev/nvidia<N>``
``mig``        MIG devices (``<gpu>:<n>``, ``MIG-<uuid>``) same, with the GI and CI access nodes
``gpu-share``  QoS tenants (tenant name)                   the tenant's GPU or MIG device, plus
                                                           libvgpukit-cuda.so (LD_PRELOAD), its
                                                           config directory and the tenant identity
=============  ==========================================  =========================================

Every class but ``gpu-share`` (a container is one tenant) also has an ``all`` device (every
device's edits together), as nvidia-ctk writes.

Public API for other front ends (the Kubernetes device plugin's ``Allocate`` answers CDI names):
:func:`device_names` ``(host, nvml, settings=None) -> {class: ["vgpukit.io/<class>=<name>", ...]}``
gives the fully qualified names a container engine resolves, per class, from the host's current
state (what :func:`collect` would write; ``all`` included). :func:`edits_of` ``(host, nvml, names,
settings=None) -> {name: Edits}`` gives the edits of a few named devices, reading only those (a
DRA claim's prepare: its cost depends on the claim, not on the host's size).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from ..cdi_settings import CLASSES, Settings
from ..host import IOMMU_GROUP, Host
from ..pci import PciDevice, Scan
from ..pci_kind import vgpu_type
from . import nvidia
from .mig import gpu_minor, mig_slices
from .nvidia import Edits

if TYPE_CHECKING:
    from pathlib import Path

    from ..nvml import Nvml

CDI_VERSION = "0.5.0"  # what these specs need (hostPath, spec-wide edits); podman 4.3 reads up to 0.5.0
VENDOR = "vgpukit.io"
NVML_CLASSES = frozenset({"gpu", "mig", "gpu-share"})
ALL = "all"


class Node(msgspec.Struct, frozen=True):
    """A VFIO node: the path as the host shows it, with the real path under a non-/ root."""

    path: str  # /dev/vfio/12
    host_path: str | None = None
    major: int | None = None
    minor: int | None = None

    def to_dict(
        self,
    ) -> dict[str, Any]:  # a reshape: CDI's words (hostPath, type), major/minor when known
        d: dict[str, Any] = {"path": self.path}
        if self.host_path:
            d["hostPath"] = self.host_path
        d.update(type="c", permissions="rw")
        if self.major is not None and self.minor is not None:
            d["major"], d["minor"] = self.major, self.minor
        return d


class CdiDevice(msgspec.Struct, frozen=True):
    name: str
    edits: Edits

    def to_dict(self) -> dict[str, Any]:  # a reshape: CDI's containerEdits
        return {"name": self.name, "containerEdits": self.edits.to_dict()}


class Spec(msgspec.Struct):
    cls: str
    devices: list[CdiDevice] = msgspec.field(default_factory=list)
    edits: Edits = msgspec.field(default_factory=Edits)  # spec-wide (the NVIDIA driver's user space)

    @property
    def kind(self) -> str:
        return f"{VENDOR}/{self.cls}"

    def names(self) -> list[str]:
        return [f"{self.kind}={d.name}" for d in self.devices]

    def to_dict(
        self,
    ) -> dict[str, Any]:  # a reshape: cdiVersion and kind first, edits when any
        doc: dict[str, Any] = {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "devices": [d.to_dict() for d in self.devices],
        }
        if self.edits:
            doc["containerEdits"] = self.edits.to_dict()
        return doc

    def render(self, fmt: str) -> str:
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2) + "\n"
        import yaml

        return str(yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=False))


def with_all(devices: list[CdiDevice]) -> list[CdiDevice]:
    """The devices followed by ``all``: every device's edits together (none when there are none)."""
    if not devices:
        return []
    env: dict[str, None] = {}  # what Edits.__add__ over the devices gives, in one pass (not quadratic)
    nodes: dict[str, dict[str, Any]] = {}
    hooks: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for d in devices:
        env.update(dict.fromkeys(d.edits.env))
        for n in d.edits.nodes:
            nodes.setdefault(n["path"], n)
        hooks += d.edits.hooks
        mounts += (m for m in d.edits.mounts if m not in mounts)
    return [*devices, CdiDevice(ALL, Edits(tuple(env), tuple(nodes.values()), tuple(hooks), tuple(mounts)))]


# ----------------------------------------------------------------------------- device numbers
def proc_major(host: Host, name: str) -> int | None:
    """The character major registered as ``name`` in /proc/devices."""
    text = host.read_opt(host.proc_devices()) or ""
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


def vfio_node(host: Host, *parts: str, path: Path | str | None = None) -> Node:
    """The node ``/dev/<parts>`` (``path``: the same, already joined by the caller)."""
    path = path or host.dev_node(*parts)
    shown = host.display(path)
    nums = host.char_device(path)
    major, minor = nums if nums else (None, None)
    return Node(shown, str(path) if str(path) != shown else None, major, minor)


# ----------------------------------------------------------------------------- VFIO collectors
class VfioEdits:
    """Each IOMMU group's edits (``/dev/vfio/vfio`` and ``/dev/vfio/<group>``) for one collection:
    ``/dev/vfio`` listed once and the container node read once, each group's node once."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.dir = f"{host.vfio_dir()}/"
        self.present = set(host.listdir(self.dir))
        self._container: dict[str, Any] | None = None
        self._groups: dict[int, Edits] = {}

    def __call__(self, group: int) -> Edits | None:
        if str(group) not in self.present:
            return None
        if group not in self._groups:
            if self._container is None:
                self._container = vfio_node(self.host, "vfio", "vfio").to_dict()
            self._groups[group] = Edits(
                nodes=(self._container, vfio_node(self.host, path=self.dir + str(group)).to_dict())
            )
        return self._groups[group]


def vendor_vfio(host: Host, dev: PciDevice) -> bool:
    """A VF with an NVIDIA vGPU type set (vGPU 17+, vendor-specific VFIO): it stays on ``nvidia``,
    which registers it with VFIO, and a VMM opens its ``/dev/vfio/<group>`` as a plain PCI hostdev
    (docs/cdi.md); a VF of no vGPU is the GPU driver's, not VFIO's."""
    return dev.is_vf and dev.driver == "nvidia" and vgpu_type(host, dev.bdf) != 0


def collect_pci(
    host: Host, warnings: list[str], scan: Scan | None = None, only: Collection[str] | None = None
) -> tuple[list[CdiDevice], list[CdiDevice]]:
    """(VFs, other functions) bound to VFIO; ``only``: the functions (BDFs) to look at, None: all."""
    vfs: list[CdiDevice] = []
    others: list[CdiDevice] = []
    vfio_edits = VfioEdits(host)
    scan = scan or Scan(host)
    devices = scan.devices() if only is None else [scan.device(b) for b in sorted(only) if scan.exists(b)]
    for dev in devices:
        bdf = dev.bdf
        if not dev.driver or dev.iommu_group is None or not ("vfio" in dev.driver or vendor_vfio(host, dev)):
            continue
        edits = vfio_edits(dev.iommu_group)
        if edits is None:
            why = f"is bound to {dev.driver}" if "vfio" in dev.driver else "has a vGPU type"
            warnings.append(f"{bdf} {why} but /dev/vfio/{dev.iommu_group} is missing; skipped")
            continue
        (vfs if dev.is_vf else others).append(CdiDevice(bdf, edits))
    return vfs, others


def collect_mdev(host: Host, warnings: list[str], only: Collection[str] | None = None) -> list[CdiDevice]:
    """Mediated devices with a VFIO group node; ``only``: the UUIDs to look at, None: all."""
    out = []
    vfio_edits = VfioEdits(host)
    for uuid in host.listdir(host.mdev_devices()):
        if only is not None and uuid not in only:
            continue
        group = host.link_name(host.mdev_device(uuid, IOMMU_GROUP))
        if not group or not group.isdigit():
            warnings.append(f"mdev {uuid} has no IOMMU group (vfio_mdev not bound?); skipped")
            continue
        edits = vfio_edits(int(group))
        if edits is None:
            warnings.append(f"mdev {uuid}: /dev/vfio/{group} is missing; skipped")
            continue
        out.append(CdiDevice(uuid, edits))
    return out


# ----------------------------------------------------------------------------- NVIDIA collectors
def caps_node(host: Host, minor: int, caps_major: int | None) -> dict[str, Any]:
    """An nvidia-caps access node; with its numbers when the node is missing but the driver's major is
    known (nvidia-modprobe creates these nodes on first use)."""
    real = host.nvidia_cap_node(minor)
    d = nvidia.node(host, real)
    if not host.exists(real) and caps_major is not None:
        d.update(type="c", major=caps_major, minor=minor)
    return d


def collect_gpus(host: Host, nvml: Nvml | None) -> dict[str, list[CdiDevice]]:
    """Whole GPUs (not in MIG mode) and MIG devices: the names nvidia-ctk gives them (index and UUID)."""
    out: dict[str, list[CdiDevice]] = {"gpu": [], "mig": []}
    if nvml is None:
        return out
    for g in nvml.gpus():
        if g.mig_current or (g.lost and not g.uuid):  # a lost GPU keeps its entry while its identity is known
            continue
        edits = nvidia.gpu_edits(host, gpu_minor(host, g.bdf, g.index))
        out["gpu"] += [CdiDevice(str(g.index), edits), CdiDevice(g.uuid, edits)]
    caps_major = proc_major(host, "nvidia-caps")
    for s in mig_slices(host, nvml, []):
        edits = Edits(
            nodes=(
                nvidia.node(host, host.nvidia_gpu_node(s.minor)),
                caps_node(host, s.gi_cap_minor, caps_major),
                caps_node(host, s.ci_cap_minor, caps_major),
            )
        )
        out["mig"] += [CdiDevice(f"{s.gpu_index}:{s.index}", edits), CdiDevice(s.uuid, edits)]
    return out


def collect(
    host: Host,
    nvml: Nvml | None,
    classes: tuple[str, ...] = CLASSES,
    settings: Settings | None = None,
    scan: Scan | None = None,
    only: Mapping[str, Collection[str]] | None = None,
) -> tuple[list[Spec], list[str]]:
    """One spec per requested class (possibly empty) and the warnings worth showing (``nvml``: the GPU
    classes; ``settings``: the hook and library paths, defaults when None; ``scan``: the caller's PCI
    snapshot, whose reads are not made again; ``only``: per class, the only device names to look at,
    its spec then without ``all``, a class not in it whole). The same rules either way: a scoped
    collection skips the devices not asked for, it decides nothing else."""
    settings = settings or Settings()
    warnings: list[str] = []
    specs = {c: Spec(c) for c in classes}
    scope = dict(only or {})

    def kept(cls: str, devices: list[CdiDevice]) -> list[CdiDevice]:
        if cls not in scope:
            return with_all(devices)
        return [d for d in devices if d.name in scope[cls]]

    if "vf" in specs or "pci" in specs:
        pci_scope = None
        if all(c in scope for c in ("vf", "pci") if c in specs):  # every PCI class asked is scoped
            pci_scope = {b for c in ("vf", "pci") if c in specs for b in scope[c]}
        vfs, others = collect_pci(host, warnings, scan, pci_scope)
        if "vf" in specs:
            specs["vf"].devices = kept("vf", vfs)
        if "pci" in specs:
            specs["pci"].devices = kept("pci", others)
    if "mdev" in specs:
        specs["mdev"].devices = kept("mdev", collect_mdev(host, warnings, scope.get("mdev")))
    if NVML_CLASSES & set(specs):
        common = nvidia.common_edits(host, nvidia.find_driver(host), settings.hook)
        if "mig" in specs:
            mig_slices(host, nvml, warnings)  # its warnings, once
        gpus = collect_gpus(host, nvml)
        for cls in ("gpu", "mig"):
            if cls in specs:
                specs[cls].devices = kept(cls, gpus[cls])
                specs[cls].edits = common if specs[cls].devices else Edits()
        if "gpu-share" in specs:
            from .share import collect_share

            by_name = {d.name: d.edits for d in gpus["gpu"] + gpus["mig"]}
            share = [CdiDevice(n, e) for n, e in collect_share(host, nvml, by_name, settings, warnings)]
            share = [d for d in share if "gpu-share" not in scope or d.name in scope["gpu-share"]]
            specs["gpu-share"].devices = share  # a container is one tenant: no `all`
            specs["gpu-share"].edits = common if share else Edits()
    return [specs[c] for c in classes], warnings


def device_names(host: Host, nvml: Nvml | None, settings: Settings | None = None) -> dict[str, list[str]]:
    """``{class: ["vgpukit.io/<class>=<name>", ...]}`` for every class, from the host's current state
    (the Kubernetes device plugin answers ``Allocate`` with these)."""
    specs, _ = collect(host, nvml, CLASSES, settings)
    return {s.cls: s.names() for s in specs}


def edits_of(
    host: Host, nvml: Nvml | None, names: Collection[str], settings: Settings | None = None
) -> dict[str, Edits]:
    """``{"vgpukit.io/<class>=<name>": edits}`` (the device's and its spec's together) of the named
    devices the host has now, reading only those (:func:`collect` scoped to them); a name the
    collector does not write (gone, not on VFIO, another vendor or class) is left out."""
    scope: dict[str, set[str]] = {}
    for full in names:
        kind, _, name = full.partition("=")
        vendor, _, cls = kind.rpartition("/")
        if vendor == VENDOR and cls in CLASSES and name and name != ALL:
            scope.setdefault(cls, set()).add(name)
    if not scope:
        return {}
    specs, _warnings = collect(host, nvml, tuple(c for c in CLASSES if c in scope), settings, only=scope)
    return {f"{s.kind}={d.name}": d.edits + s.edits for s in specs for d in s.devices}
