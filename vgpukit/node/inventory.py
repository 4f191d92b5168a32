"""What a node offers Kubernetes: one extended resource per kind of device, read from the host.

=====================================  ===========================================  ==========================
resource (``vgpukit.io/...``)          devices (device plugin ID)                   container gets (CDI name)
=====================================  ===========================================  ==========================
``vf-<pf vendor>-<pf device>``         VFs bound to VFIO of PFs with that id        ``vgpukit.io/vf=<BDF>``
                                       (a PF pool; GPU VFs only as vGPUs)
``mig-<profile>`` (``mig-3g.20gb``)    MIG compute instances (``MIG-<uuid>``)       ``vgpukit.io/mig=MIG-...``
``vgpu-<type>`` (``vgpu-t4-4q``)       NVIDIA vGPUs: mdevs on NVIDIA parents (UUID)  ``vgpukit.io/mdev=<UUID>``,
                                       and VFs with a vGPU type set (BDF)            ``vgpukit.io/vf=<BDF>``
``mdev-<type id>``                     other mediated devices (UUID)                ``vgpukit.io/mdev=<UUID>``
``gpu-share``                          whole NVIDIA GPUs not in MIG mode, one        ``vgpukit.io/gpu-share=
                                       device per QoS tenant of the GPU              <tenant>`` (else device
                                       (``<BDF>-<tenant>``), else N replicas          nodes and env), replicas:
                                       (``<BDF>-<i>``)                               ``vgpukit.io/gpu=GPU-...``
=====================================  ===========================================  ==========================

The CDI names and container edits are the ones :mod:`vgpukit.cdi.spec` writes into the specs, so
the names in an ``Allocate`` answer resolve once ``vgpukit cdi generate`` has run. A device is
*held* when a process outside Kubernetes holds its VFIO group node or VFIO cdev open (a VM's QEMU):
one ``/proc`` scan of :mod:`vgpukit.holders` answers that, as ``sriov list`` and ``mdev list`` do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..cdi import spec as cdi
from ..cdi.mig import gpu_minor
from ..errors import VgpukitError
from ..holders import OpenFiles
from ..host import DRIVER, VFIO_DEV, Host
from ..mdev import sysfs as mdev_sysfs
from ..naming import aliases
from ..partial import Unread, lost_gpus
from ..pci import PciDevice, Scan
from ..vgpu import hostview
from ..vgpu.catalog import short_name
from ..vgpu.model import Vgpu

if TYPE_CHECKING:
    from ..nvml import Nvml
    from ..qos.model import QosConfig

PREFIX = cdi.VENDOR  # vgpukit.io
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"  # the device plugin API's words
GPU_SHARE = "gpu-share"
DEFAULT_REPLICAS = 4  # gpu-share devices per GPU without QoS tenants
_UNSAFE = re.compile(r"[^a-z0-9.-]+")


def resource_part(text: str) -> str:
    """A piece of an extended resource name: lower case, ``[a-z0-9.-]``, at most 50 characters."""
    return _UNSAFE.sub("-", text.lower()).strip("-.")[:50] or "unnamed"


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    read_only: bool = True


@dataclass(frozen=True)
class Device:
    """One schedulable device of a resource, and what a container needs to use it."""

    id: str  # the device plugin ID: BDF, mdev UUID, MIG-uuid, <BDF>-<tenant>
    topo_bdf: str  # the PCI function whose place in the PCIe tree counts (a MIG slice: its GPU)
    numa: int | None
    cdi_name: str | None = None  # vgpukit.io/vf=0000:05:00.2
    nodes: tuple[str, ...] = ()  # device nodes as the host shows them (/dev/vfio/12)
    env: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    watch: tuple[str, ...] = ()  # VFIO nodes (/dev/vfio/12, /dev/vfio/devices/vfio3) a user holds open
    held_by: tuple[str, ...] = ()  # who holds them (empty: free), from one /proc scan per poll


def health_of(dev: Device, sick: Mapping[str, str], allocated: Collection[str] = ()) -> tuple[str, str]:
    """The one rule of a device's health as the device plugin lists it (``ListAndWatch``) and ``k8s
    resources`` shows it: Unhealthy when the health layer finds its PCI function (or, a MIG slice, itself)
    unusable (``sick``: BDF or UUID -> why), or when something outside Kubernetes holds it; (health, why)."""
    for key in (dev.topo_bdf, dev.id):
        if key in sick:
            return UNHEALTHY, sick[key] or "unusable"
    if dev.held_by and dev.id not in allocated:
        return UNHEALTHY, f"held by {'; '.join(dev.held_by)}"
    return HEALTHY, ""


@dataclass
class Inventory:
    resources: dict[str, list[Device]] = field(default_factory=dict)  # full resource name -> devices
    pci: dict[str, PciDevice] = field(default_factory=dict)  # for topology
    warnings: list[str] = field(default_factory=list)
    unread: list[Unread] = field(default_factory=list)  # GPUs NVML cannot answer for (lost): left out
    # what the collection read once for all its devices (not compared): each function's sysfs entries
    # as the scan listed them, and /dev/vfio/ as the host shows it
    listed: dict[str, frozenset[str]] = field(default_factory=dict, compare=False, repr=False)
    vfio_shown: str = field(default="", compare=False, repr=False)
    options: Options | None = field(default=None, compare=False, repr=False)  # what it was collected with

    def add(self, resource: str, dev: Device) -> None:
        self.resources.setdefault(f"{PREFIX}/{resource}", []).append(dev)


@dataclass(frozen=True)
class Options:
    replicas: int = DEFAULT_REPLICAS  # gpu-share devices per GPU without tenants; 0: no gpu-share resource
    qos: QosConfig | None = None


@dataclass(frozen=True)
class CdiEntry:
    """What a CDI spec gives a container for one device: device nodes (its own, then the spec-wide
    ones such as /dev/nvidiactl), env and mounts."""

    nodes: tuple[str, ...]
    env: tuple[str, ...]
    mounts: tuple[Mount, ...] = ()


def cdi_entries(
    host: Host,
    nvml: Nvml | None,
    warnings: list[str],
    scan: Scan | None = None,
    only: Collection[str] | None = None,
    classes: tuple[str, ...] | None = None,
) -> dict[str, CdiEntry]:
    """``vgpukit.io/vf=0000:05:00.2`` -> its entry, for every device the CDI collector
    (:mod:`vgpukit.cdi.spec`, with the host's ``cdi enable`` settings: what ``vgpukit cdi generate``
    writes) names; the one place this module reads CDI. ``all`` devices are left out. ``only``: the
    PCI functions (BDFs) whose ``vf``/``pci`` entries are read (None: every function); ``classes``: the
    CDI classes read (None: all)."""
    from ..cdi_settings import CLASSES, load_settings

    scope = None if only is None else {"vf": only, "pci": only}
    settings = load_settings(host)
    specs, found = cdi.collect(host, nvml, classes or CLASSES, settings=settings, scan=scan, only=scope)
    warnings += found
    out = {}
    for spec in specs:
        for d in spec.devices:
            if d.name == cdi.ALL:
                continue
            edits = d.edits + spec.edits
            mounts = tuple(Mount(m["hostPath"], m["containerPath"], "ro" in m.get("options", ())) for m in edits.mounts)
            out[f"{spec.kind}={d.name}"] = CdiEntry(tuple(n["path"] for n in edits.nodes), edits.env, mounts)
    return out


def collect(
    host: Host,
    nvml: Nvml | None,
    options: Options,
    scan: Scan | None = None,
    only: Collection[str] | None = None,
    read: Collection[str] | None = None,
    holders: bool = True,
) -> Inventory:
    """Every device the node offers, by resource (one read of sysfs, /proc and NVML; ``scan``: the
    caller's PCI snapshot, whose reads are not made again). ``only``: the PCI functions (BDFs) to read,
    with their PFs (None: all): the same rules over fewer functions, for a caller that needs a few
    (a DRA claim's prepare); GPUs, MIG devices and mdevs are read as always. ``read``: the whole bus
    known, but the functions' own devices (VFs of a pool) read for these only (:mod:`.update`).
    ``holders=False``: ``held_by`` not read (a watch's ``held`` view reads it, once per refresh)."""
    inv = Inventory()
    scan = scan or Scan(host)
    if only is None:
        inv.pci = {d.bdf: d for d in scan.devices()}
    else:
        fns = [scan.device(b) for b in sorted(only) if scan.exists(b)]
        pfs = [scan.device(f.physfn) for f in fns if f.physfn and scan.exists(f.physfn)]
        inv.pci = {d.bdf: d for d in sorted([*fns, *pfs], key=lambda d: d.bdf)}
    inv.listed = {bdf: scan.entries(bdf) for bdf in inv.pci}
    inv.vfio_shown = host.display(host.vfio_dir()) + "/"
    cdi_devices = cdi_entries(host, nvml, inv.warnings, scan, only if only is not None else read)
    views = hostview.gpus(host, scan)
    vgpus = hostview.vgpus(host, views)
    taken = {v.id for v in vgpus}
    if nvml is not None and only is None:
        inv.unread = lost_gpus(nvml.gpus(), aliases(scan))
    _vgpus(host, inv, vgpus, cdi_devices)
    vfs(host, inv, taken, cdi_devices)
    _mdevs(host, inv, taken, cdi_devices)
    _mig(host, inv, nvml, cdi_devices)
    if options.replicas > 0:
        vgpu_hosts = {v.bdf for v in views if v.interface is not None}  # a vGPU host driver runs no CUDA
        _shares(host, inv, nvml, options, scan, vgpu_hosts, cdi_devices)
    for devices in inv.resources.values():
        devices.sort(key=lambda d: d.id)
    inv.options = options
    return with_holders(host, inv) if holders else inv


def with_holders(host: Host, inv: Inventory) -> Inventory:
    """The same devices with ``held_by`` read anew (one /proc scan: :class:`vgpukit.holders.OpenFiles`)."""
    files = OpenFiles(host)
    resources = {
        name: [_held(d, tuple(h.describe() for n in d.watch for h in files.holders(n))) for d in devices]
        for name, devices in inv.resources.items()
    }
    return Inventory(resources, inv.pci, inv.warnings, inv.unread, options=inv.options)


def carry_unread(last: Inventory, now: Inventory) -> Inventory:
    """``now`` with the devices ``last`` had on a GPU ``now`` could not read (lost): kept for the health
    layer to mark (the device plugin's Unhealthy, the DRA driver's taint) rather than dropped, while
    every other device follows the host (docs/health.md, "One bad device")."""
    gone = {u.bdf for u in now.unread if u.bdf}
    if not gone:
        return now
    have = {d.id for devices in now.resources.values() for d in devices}
    for name, devices in last.resources.items():
        kept = [d for d in devices if d.topo_bdf in gone and d.id not in have]
        if kept:
            now.resources[name] = sorted([*now.resources.get(name, []), *kept], key=lambda d: d.id)
    return now


def _held(d: Device, held_by: tuple[str, ...]) -> Device:
    return d if held_by == d.held_by else replace(d, held_by=held_by)


def signature(host: Host, nvml: Nvml | None, extra: tuple[str, ...] = ()) -> tuple[object, ...]:
    """What decides which devices exist, cheaply read: PCI functions and their drivers, mdevs, VFIO
    group nodes, MIG instances. A poll rebuilds the inventory only when this changes (else it re-reads
    the holders); ``extra``: more inputs (the QoS config's text)."""
    base = f"{host.pci_devices()}/"
    pci = tuple((b, host.link_name(f"{base}{b}/{DRIVER}")) for b in host.listdir(host.pci_devices()))
    mig: list[object] = []
    for gpu in nvml.gpus() if nvml is not None else []:
        mig.append((gpu.bdf, gpu.mig_current))
        if gpu.mig_current and nvml is not None:
            try:
                instances = nvml.gpu_instances(gpu.index)
            except VgpukitError as err:
                mig.append(str(err))
                continue
            mig.append(tuple((gi.id, tuple(ci.uuid for ci in gi.compute_instances)) for gi in instances))
    return (pci, tuple(host.listdir(host.mdev_devices())), tuple(host.listdir(host.vfio_dir())), tuple(mig), extra)


def _device(
    host: Host, inv: Inventory, id_: str, bdf: str, cls: str, cdi_devices: dict[str, CdiEntry]
) -> Device | None:
    """A device that has a CDI entry (None where the CDI collector skipped it), watched through its
    VFIO group node (and, for a PCI function, its VFIO device cdevs)."""
    name = f"{PREFIX}/{cls}={id_}"
    entry = cdi_devices.get(name)
    if entry is None:
        return None
    dev = inv.pci.get(bdf)
    vfio = inv.vfio_shown or host.display(host.vfio_dir()) + "/"
    watch = [n for n in entry.nodes if n.startswith(vfio) and n != vfio + "vfio"]
    if cls in ("vf", "pci") and (id_ not in inv.listed or VFIO_DEV in inv.listed[id_]):
        watch += [host.display(host.vfio_device_node(n)) for n in host.listdir(host.pci_device(id_, VFIO_DEV))]
    env = entry.env
    if cls == "mig":  # for runtimes without CDI: the NVIDIA container runtime's selector
        env = (*(e for e in env if not e.startswith("NVIDIA_VISIBLE_DEVICES=")), f"NVIDIA_VISIBLE_DEVICES={id_}")
    numa = dev.numa_node if dev else None
    return Device(id_, bdf, numa, name, entry.nodes, env, entry.mounts, watch=tuple(watch))


def _vgpus(host: Host, inv: Inventory, vgpus: list[Vgpu], cdi_devices: dict[str, CdiEntry]) -> None:
    for v in vgpus:
        cls, bdf = ("mdev", v.parent or v.gpu) if v.interface == "mdev" else ("vf", v.vf or v.id)
        dev = _device(host, inv, v.id, bdf, cls, cdi_devices)
        if dev is not None:
            inv.add(f"vgpu-{resource_part(short_name(v.name))}", dev)


def vfs(host: Host, inv: Inventory, taken: set[str], cdi_devices: dict[str, CdiEntry]) -> None:
    """The VFs of ``inv.pci`` bound to VFIO, each in its PF's pool (``taken``: VFs offered as vGPUs)."""
    for bdf, d in inv.pci.items():
        if not d.is_vf or bdf in taken or d.physfn is None:
            continue
        pf = inv.pci.get(d.physfn)
        if pf is None or pf.kind == "gpu":  # a GPU's VFs are handed out as vGPUs only
            continue
        dev = _device(host, inv, bdf, bdf, "vf", cdi_devices)
        if dev is not None:
            inv.add(f"vf-{pf.vendor}-{pf.device}", dev)


def _mdevs(host: Host, inv: Inventory, taken: set[str], cdi_devices: dict[str, CdiEntry]) -> None:
    for inst in mdev_sysfs.instances(host, with_holders=False):
        if inst.uuid in taken:
            continue
        dev = _device(host, inv, inst.uuid, inst.parent, "mdev", cdi_devices)
        if dev is not None:
            inv.add(f"mdev-{resource_part(inst.type_id)}", dev)


def _mig(host: Host, inv: Inventory, nvml: Nvml | None, cdi_devices: dict[str, CdiEntry]) -> None:
    if nvml is None:
        return
    for gpu in nvml.gpus():
        if not gpu.mig_current or gpu.lost:  # a lost GPU's slices cannot be listed (inv.unread names it)
            continue
        try:
            names = {p.id: p.name for p in nvml.gi_profiles(gpu.index)}
            instances = nvml.gpu_instances(gpu.index)
        except VgpukitError as err:
            inv.warnings.append(f"{gpu.bdf}: MIG devices not listed: {err}")
            continue
        for gi in instances:
            for ci in gi.compute_instances:
                profile = names.get(gi.profile_id, f"gi{gi.profile_id}")
                if ci.slices != gi.size and len(gi.compute_instances) > 1:
                    profile = f"{ci.slices}c.{profile}"
                dev = _device(host, inv, ci.uuid, gpu.bdf, "mig", cdi_devices)
                if dev is not None:
                    inv.add(f"mig-{resource_part(profile)}", dev)


def _shares(
    host: Host,
    inv: Inventory,
    nvml: Nvml | None,
    options: Options,
    scan: Scan,
    skip: set[str],
    cdi_devices: dict[str, CdiEntry],
) -> None:
    """One device per QoS tenant of a GPU (the CDI ``gpu-share`` device of that tenant where the CDI
    collector offers one: the CUDA library, the tenant's directory), else ``replicas`` devices of
    the whole GPU (CDI ``gpu`` device); the tenant's compute share and memory cap ride in the env."""
    if nvml is None:
        return
    names = aliases(scan)
    for gpu in nvml.gpus():
        d = inv.pci.get(gpu.bdf)
        if gpu.mig_current or (gpu.lost and not gpu.uuid) or d is None or d.driver != "nvidia" or gpu.bdf in skip:
            continue  # a lost GPU stays listed while NVML still names it: the health rule marks it
        whole = cdi_devices.get(f"{PREFIX}/gpu={gpu.uuid}")
        minor = gpu_minor(host, gpu.bdf, gpu.index)
        own = tuple(
            host.display(p)
            for p in (host.dev_node("nvidiactl"), host.dev_node("nvidia-uvm"), host.nvidia_gpu_node(minor))
        )
        nodes = whole.nodes if whole else own
        visible = f"NVIDIA_VISIBLE_DEVICES={gpu.uuid}"
        keys = {gpu.bdf, gpu.uuid, names.get(gpu.bdf, gpu.bdf)}
        qos = next((g for k, g in (options.qos.gpus.items() if options.qos else ()) if k in keys), None)
        if qos is None or not qos.tenants:
            name = f"{PREFIX}/gpu={gpu.uuid}" if whole else None
            for i in range(options.replicas):
                inv.add(GPU_SHARE, Device(f"{gpu.bdf}-{i}", gpu.bdf, d.numa_node, name, nodes, (visible,)))
            continue
        for t in qos.tenants:
            cdi_name = f"{PREFIX}/gpu-share={t.name}"
            entry = cdi_devices.get(cdi_name)
            env = [visible, f"VGPUKIT_QOS_GPU={qos.key}", f"VGPUKIT_QOS_TENANT={t.name}"]
            env += [f"VGPUKIT_CUDA_TENANT={t.name}", f"VGPUKIT_QOS_SHARE={t.share}"]
            if t.memory is not None:
                env.append(f"VGPUKIT_CUDA_MEMORY={t.memory}")
            if t.memory_burst is not None:
                env += [f"VGPUKIT_CUDA_MEMORY_BURST={t.memory_burst}", f"VGPUKIT_CUDA_CLASS={t.cls}"]
            if entry is not None:
                env = list(dict.fromkeys([*entry.env, *env]))
                mounts = entry.mounts
            else:  # no CUDA library installed (cdi warns): the tenant's identity and caps, no interception
                shared = [host.display(host.state_dir("cuda", t.name)), host.display(host.state_dir("qos"))]
                mounts = tuple(Mount(p, p, False) for p in shared)
            dev = Device(
                f"{gpu.bdf}-{resource_part(t.name)}",
                gpu.bdf,
                d.numa_node,
                cdi_name if entry else None,
                entry.nodes if entry else nodes,
                tuple(env),
                mounts,
            )
            inv.add(GPU_SHARE, dev)


class Poller:
    """The device plugin's view of the host, read once per poll: a full :func:`collect` when the
    :func:`signature` changed (devices, drivers, MIG layout, the options), else only the holders."""

    def __init__(
        self,
        open_host: Callable[[], tuple[Host, Nvml | None, Callable[[], None]]],
        options: Callable[[Host], Options],
    ) -> None:
        self.open_host = open_host
        self.options = options
        self.inv: Inventory | None = None
        self.sig: tuple[object, ...] = ()

    def __call__(self) -> Inventory:
        host, nvml, close = self.open_host()
        try:
            opts = self.options(host)
            sig = signature(host, nvml, (repr(opts),))
            if self.inv is None or sig != self.sig:
                self.inv, self.sig = collect(host, nvml, opts), sig
            else:
                self.inv = with_holders(host, self.inv)
            return self.inv
        finally:
            close()
