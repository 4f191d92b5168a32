"""What one device carries and who holds it, read from the host (the remediation planner's facts).

*Carried*: what a reset destroys and a remediation rebuilds exactly -- the MIG layout (GPU instances
by profile and placement, their compute instances), the VFs with their drivers, driver overrides and
bind records, per-VF vGPU types (vendor VFIO), the mdevs (legacy vGPUs too) with their UUIDs, and the
QoS tenants scheduled on the device or its slices (configuration: a reset leaves it, it is recorded
so the plan can say whom it stops).

*Holders*: who uses the device or a piece carved from it, from the sources every planner reads: the
processes holding a VFIO node (a VM's QEMU names its domain: :mod:`vgpukit.holders`), the GPU's NVML
clients (inside a MIG slice or not), the live processes of its QoS tenants
(:mod:`vgpukit.processes`), and what the caller adds (the Kubernetes claims prepared on it: the front
end reads them, as only it may reach the Kubernetes package).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from .. import naming, processes
from .. import quarantine as qr
from ..errors import NotFound, VgpukitError
from ..holders import Holder as VfioHolder
from ..holders import OpenFiles, callers, device_users
from ..host import SRIOV_AUTOPROBE, Host
from ..nvml.errors import NvmlError
from ..nvml.model import Nvml
from ..pci import Scan, virtfns


class Ci(msgspec.Struct, frozen=True):
    id: int
    start: int
    slices: int
    uuid: str


class Gi(msgspec.Struct, frozen=True):
    id: int
    profile_id: int
    profile: str
    start: int
    size: int
    cis: tuple[Ci, ...] = ()


class Vf(msgspec.Struct, frozen=True):
    bdf: str
    driver: str | None
    override: str | None
    record: str | None  # the bind record's exact text (vgpukit bind), None: none
    vgpu_type: int = 0  # nvidia/current_vgpu_type (vendor VFIO vGPU); 0: none
    group: int | None = None


class Mdev(msgspec.Struct, frozen=True):
    uuid: str
    parent: str
    type_id: str
    group: int | None = None


class Tenant(msgspec.Struct, frozen=True):
    gpu: str  # the QoS GPU key it is scheduled under (gpuN, the address, a MIG UUID)
    name: str
    kind: str  # cgroup | pids | domain
    target: str
    pids: tuple[int, ...] = ()
    domain: str = ""


class Carried(msgspec.Struct, frozen=True):
    """What the device carries now; rebuilt exactly after a reset."""

    mig: bool  # MIG mode in effect
    gis: tuple[Gi, ...] = ()
    numvfs: int = 0
    total_vfs: int = 0
    autoprobe: int | None = None
    vfs: tuple[Vf, ...] = ()
    mdevs: tuple[Mdev, ...] = ()
    tenants: tuple[Tenant, ...] = ()

    def pieces(self) -> list[str]:
        """Every piece, in words (the plan lists what it will rebuild)."""
        out = []
        for gi in self.gis:
            cis = ", ".join(f"CI {c.id} {c.slices}c {c.uuid}" for c in gi.cis)
            out.append(f"MIG GPU instance {gi.id} {gi.profile} at slot {gi.start}" + (f" ({cis})" if cis else ""))
        if self.numvfs:
            drivers = sorted({v.driver or "no driver" for v in self.vfs})
            out.append(f"{self.numvfs} VFs on {', '.join(drivers)}")
        out += [f"vGPU type {v.vgpu_type} on VF {v.bdf}" for v in self.vfs if v.vgpu_type]
        out += [f"mdev {m.uuid} ({m.type_id} on {m.parent})" for m in self.mdevs]
        mig = {s[0].lower() for s in self.mig_slices()}
        out += [
            f"QoS tenant {t.name} on {t.gpu} ({t.target})"
            + (", re-keyed to the rebuilt slice's new MIG UUID" if t.gpu.lower() in mig else "")
            for t in self.tenants
        ]
        return out

    def mig_slices(self) -> tuple[tuple[str, int, int, int], ...]:
        """Each MIG device: (its UUID, its GPU instance's profile id and start, its compute instance's start)."""
        return tuple((c.uuid, g.profile_id, g.start, c.start) for g in self.gis for c in g.cis if c.uuid)

    def as_dict(self) -> dict[str, Any]:  # a reshape: the report's words (gpu_instances, vf_drivers...)
        return {
            "mig": self.mig,
            "gpu_instances": [
                {
                    "id": g.id,
                    "profile": g.profile,
                    "start": g.start,
                    "size": g.size,
                    "compute_instances": msgspec.to_builtins(g.cis),
                }
                for g in self.gis
            ],
            "vfs": self.numvfs,
            "vf_drivers": {v.bdf: v.driver for v in self.vfs},
            "vgpus": {v.bdf: v.vgpu_type for v in self.vfs if v.vgpu_type},
            "mdevs": msgspec.to_builtins(self.mdevs),
            "qos_tenants": [{"gpu": t.gpu, "name": t.name, "target": t.target} for t in self.tenants],
        }


class Holder(msgspec.Struct, frozen=True):
    """Someone using the device or a piece of it."""

    kind: str  # vm | process | tenant | pod
    name: str  # the domain, the process's command, the tenant, namespace/claim
    piece: str  # what it holds: the device, a VF, an mdev, a MIG slice
    pid: int = 0
    claim: str = ""  # a Kubernetes claim's UID

    def describe(self) -> str:
        who = {"vm": "VM", "process": "process", "tenant": "QoS tenant", "pod": "Kubernetes claim"}[self.kind]
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"{who} {self.name}{pid} on {self.piece}"


@dataclass
class DeviceFacts:
    bdf: str
    name: str  # gpu3, nic0, or the address
    label: str  # "gpu3 (0000:24:00.0)"
    vendor: str
    driver: str | None
    is_vf: bool
    nvml_index: int | None
    carried: Carried
    holders: list[Holder] = field(default_factory=list)
    quarantine: qr.Quarantine | None = None
    reset_methods: tuple[str, ...] = ()  # the function's reset_method (empty: no reset file, or none listed)
    has_reset: bool = False  # the function has a sysfs ``reset`` file
    gpu_uuid: str = ""


def _vf(host: Host, bdf: str) -> Vf:
    from ..sriov import binding
    from ..vgpu.hostview import current_type

    group = host.link_name(host.pci_device(bdf, "iommu_group"))
    nvidia = host.exists(host.pci_device(bdf, "nvidia", "current_vgpu_type"))
    return Vf(
        bdf,
        binding.current_driver(host, bdf),
        binding.current_override(host, bdf),
        host.read_raw_opt(binding.record_path(host, bdf)),
        current_type(host, bdf) if nvidia else 0,
        int(group) if group and group.isdigit() else None,
    )


def _mig(nvml: Nvml | None, index: int | None) -> tuple[bool, tuple[Gi, ...]]:
    if nvml is None or index is None:
        return False, ()
    try:
        gpu = next((g for g in nvml.gpus() if g.index == index), None)
        if gpu is None or not gpu.mig_capable:
            return False, ()
        current, _ = nvml.mig_mode(index)
        if not current:
            return False, ()
        names = {p.id: p.name for p in nvml.gi_profiles(index)}
        gis = tuple(
            Gi(
                gi.id,
                gi.profile_id,
                names.get(gi.profile_id, str(gi.profile_id)),
                gi.start,
                gi.size,
                tuple(Ci(c.id, c.start, c.slices, c.uuid) for c in sorted(gi.compute_instances, key=lambda c: c.start)),
            )
            for gi in sorted(nvml.gpu_instances(index), key=lambda g: g.start)
        )
        return True, gis
    except NvmlError:
        return False, ()


def _tenants(host: Host, keys: set[str]) -> tuple[Tenant, ...]:
    from ..qos.planner import running

    try:
        cfg, _ = running(host)
    except VgpukitError:  # a broken QoS config is the QoS commands' to report
        return ()
    out = []
    for key, gpu in sorted(cfg.gpus.items()):
        if key.lower() not in keys:
            continue
        for t in gpu.tenants:
            out.append(Tenant(key, t.name, t.kind, t.target, tuple(t.pids), t.domain or ""))
    return tuple(out)


def _vfio_holders(host: Host, groups: dict[int, str]) -> list[Holder]:
    files, calling = OpenFiles(host), callers(host)
    out: list[Holder] = []
    for group, piece in sorted(groups.items()):
        users: list[VfioHolder] = device_users(files.group(group), calling)
        for h in users:
            out.append(Holder("vm" if h.vm else "process", h.vm or h.comm or "process", piece, h.pid))
    return out


def tenant_pids(host: Host, t: Tenant) -> list[int]:
    """The tenant's live processes: its ``pids``, or its cgroup's ``cgroup.procs`` (a domain tenant is a
    VM: its QEMU holds the device's VFIO node)."""
    if t.kind == "pids":
        return [p for p in t.pids if processes.alive(host, p)]
    if t.kind == "cgroup":
        from ..qos.backends import cgroup_dir

        try:
            text = host.read_opt(cgroup_dir(host, t.target.removeprefix("cgroup:")) / "cgroup.procs") or ""
        except VgpukitError:  # the cgroup is gone: nobody in it
            return []
        return [int(w) for w in text.split() if w.isdigit() and processes.alive(host, int(w))]
    return []


def _tenant_holders(host: Host, tenants: tuple[Tenant, ...], label: str) -> list[Holder]:
    return [Holder("tenant", t.name, f"{label} (QoS {t.gpu})", p) for t in tenants for p in tenant_pids(host, t)]


def read(host: Host, nvml: Nvml | None, name: str, scan: Scan | None = None) -> DeviceFacts:
    """Everything the remediation planner needs about the device ``name`` (an alias, an address, a GPU UUID)."""
    scan = scan or Scan(host)
    target = naming.resolve(host, name, frozenset({naming.PCI}), nvml=lambda: nvml, scan=scan)
    bdf = target.bdf
    if bdf is None:
        raise NotFound(f"no PCI device {name} on this host")
    dev = scan.device(bdf)
    alias = naming.aliases(scan).get(bdf, "")
    label = f"{alias} ({bdf})" if alias else bdf
    index = nvml.index_of(bdf) if nvml is not None and dev.vendor == "10de" and dev.driver == "nvidia" else None
    uuid = ""
    if index is not None and nvml is not None:
        uuid = next((g.uuid for g in nvml.gpus() if g.index == index), "")
    mig, gis = _mig(nvml, index)
    vfs = tuple(_vf(host, v) for v in virtfns(host, bdf)) if dev.sriov is not None else ()
    parents = {bdf, *(v.bdf for v in vfs)}
    from ..mdev import sysfs as mdev_sysfs

    mdevs = tuple(
        Mdev(m.uuid, m.parent, m.type_id, m.iommu_group)
        for m in mdev_sysfs.instances(host, with_holders=False)
        if m.parent in parents
    )
    keys = {k.lower() for k in (alias, bdf, uuid, *(c.uuid for g in gis for c in g.cis)) if k}
    tenants = _tenants(host, keys)
    carried = Carried(
        mig,
        gis,
        dev.sriov.num_vfs if dev.sriov is not None else 0,
        dev.sriov.total_vfs if dev.sriov is not None else 0,
        host.read_int(host.pci_device(bdf, SRIOV_AUTOPROBE)) if dev.sriov is not None else None,
        vfs,
        mdevs,
        tenants,
    )
    groups: dict[int, str] = {}
    if dev.iommu_group is not None and dev.driver and "vfio" in dev.driver:
        groups[dev.iommu_group] = label
    for v in vfs:
        if v.group is not None:
            groups.setdefault(v.group, f"VF {v.bdf}")
    for m in mdevs:
        if m.group is not None:
            groups.setdefault(m.group, f"mdev {m.uuid}")
    holders = _vfio_holders(host, groups)
    if index is not None and nvml is not None:
        try:
            for p in nvml.processes(index):
                piece = f"{label} GI {p.gi_id}" if p.gi_id is not None else label
                holders.append(Holder("process", p.name, piece, p.pid))
        except NvmlError:
            pass
    holders += _tenant_holders(host, tenants, label)
    methods_text = host.read_opt(host.pci_device(bdf, "reset_method"))
    return DeviceFacts(
        bdf,
        alias or bdf,
        label,
        dev.vendor,
        dev.driver,
        dev.physfn is not None,
        index,
        carried,
        holders,
        qr.covering(qr.load(host), host, bdf),
        tuple(methods_text.split()) if methods_text else (),
        host.exists(host.pci_device(bdf, "reset")),
        uuid,
    )
