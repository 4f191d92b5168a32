"""The host as it is, written as a ``vgpukit.host/v1`` document (applying it changes nothing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from .. import naming
from ..errors import VgpukitError
from ..holders import OpenFiles
from ..host import Host
from ..mdev import sysfs as mdev_sysfs
from ..pci import Scan
from ..sriov.binding import VFIO
from ..sriov.model import list_pfs
from ..vgpu import hostview
from ..vgpu.catalog import short_name
from ..vgpu.model import VFIO as VENDOR_VFIO
from ..words import plural
from .document import SCHEMA

MigExport = Callable[[], list[dict[str, Any]] | None]


def current(host: Host, name: str, mig: MigExport | None, left_out: list[str] | None = None) -> dict[str, Any]:
    """The host as a document with one config ``name``; what cannot be written into it is said in
    ``left_out`` (one line each: a QoS tenant named by process ids)."""
    scan = Scan(host)
    names = naming.aliases(scan)
    cfg: dict[str, Any] = {}
    sriov = []
    notes = left_out if left_out is not None else []
    for pf in list_pfs(host, OpenFiles(host), scan):
        label = pf.alias or pf.bdf
        drivers = {v.driver for v in pf.vfs} if pf.vfs else _missing(host, label, pf.bdf, pf.missing, notes)
        driver = "vfio-pci" if drivers == {VFIO} else "none" if drivers == {None} else "default"
        sriov.append({"device": label, "vfs": pf.num_vfs, **({"driver": driver} if drivers else {})})
    if sriov:
        cfg["sriov"] = sriov
    vfio = [{"device": names.get(d.bdf, d.bdf)} for d in scan.physical() if d.driver == VFIO]
    if vfio:
        cfg["vfio"] = vfio
    views = hostview.gpus(host, scan)
    groups: dict[tuple[str, str], list[str]] = {}
    for inst in mdev_sysfs.instances(host, with_holders=False):
        groups.setdefault((inst.parent, inst.type_id), []).append(inst.uuid)
    if groups:
        cfg["mdev"] = [
            {"parent": names.get(p, p), "type": t, "count": len(u), "uuids": sorted(u)}
            for (p, t), u in sorted(groups.items())
        ]
    vgpus: dict[tuple[str, str], int] = {}
    for v in hostview.vgpus(host, [g for g in views if g.interface == VENDOR_VFIO]):
        if v.interface == VENDOR_VFIO:
            key = (v.gpu, short_name(v.name) if not v.name.startswith("vGPU type") else v.type_id)
            vgpus[key] = vgpus.get(key, 0) + 1
    if vgpus:
        cfg["vgpu"] = [{"device": names.get(g, g), "type": t, "count": n} for (g, t), n in sorted(vgpus.items())]
    doc: dict[str, Any] = {"version": SCHEMA, "configs": {name: cfg}}
    entries = mig() if mig is not None else None
    if entries:
        cfg["mig"] = name
        doc["mig-configs"] = {name: entries}
    qos = _qos(host, notes)
    if qos is not None:
        cfg["qos"] = qos
    return doc


def _missing(host: Host, label: str, pf: str, missing: int, left_out: list[str]) -> set[str | None]:
    """The drivers the VFs of ``pf`` had, when a PF reset took them away (``missing``): as the health
    record last saw them (docs/sriov.md). What the host no longer shows and no record kept (which
    driver; the vGPUs on a GPU's VFs) is said in ``left_out``, not guessed."""
    if not missing:
        return set()
    from ..health import log

    seen = [v for v in log.load(host).pci.values() if v.get("physfn") == pf]
    drivers = {d if isinstance(d := v.get("driver"), str) else None for v in seen}
    what = f"sriov: {label}: {plural(missing, 'VF')} missing (a PF reset took them away)"
    if pf in {g.bdf for g in hostview.gpus(host, Scan(host))}:  # a GPU's VFs: the vGPUs were on them
        left_out.append(f"{what}: the vGPUs they held cannot be read; take the export before a reset")
    elif not seen:
        left_out.append(f"{what}: their driver is not known (no health record saw them); add driver: if they had one")
    return drivers


def _qos(host: Host, left_out: list[str]) -> dict[str, Any] | None:
    """The QoS configuration the daemon runs: ``/etc/vgpukit/qos.yaml`` with the run-time changes
    (``qos set``, ``qos tenant add|rm``, kept in /run) on top, as ``k8s resources`` and the gpu-share
    CDI spec see it (docs/fleet.md: applying it elsewhere makes them permanent there). Tenants named by
    process ids are left out (``left_out`` says so): a process id means nothing on another host or
    after a restart; such a tenant is reproduced by naming its cgroup instead."""
    from ..qos.config import Overlay, default_config_path
    from ..qos.planner import effective, load

    path = default_config_path(host)
    overlay = Overlay.load(host)
    if not host.exists(path) and not overlay.gpus and not overlay.tenants:
        return None
    try:
        cfg, _skipped = effective(load(host, path), overlay)  # what no longer fits, the daemon skips too
    except VgpukitError:  # a broken qos.yaml is not part of a config to reproduce
        return None
    out = cfg.to_dict()
    for key, gpu in out["gpus"].items():
        for tname in [n for n, t in gpu["tenants"].items() if "pids" in t]:
            del gpu["tenants"][tname]
            left_out.append(
                f"qos: {key}: tenant {tname} left out: it names process ids, which mean nothing on another host"
                " or after a restart (give it a cgroup: vgpukit qos tenant add ... --cgroup)"
            )
    return out


def dump(doc: dict[str, Any], left_out: list[str] | None = None) -> str:
    """The document as YAML, after a comment line for each thing ``left_out`` of it."""
    notes = "".join(f"# {line}\n" for line in left_out or ())
    return notes + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
