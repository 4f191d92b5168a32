"""Node labels through node-feature-discovery's local feature files (no API access needed).

NFD's ``local`` feature source reads ``/etc/kubernetes/node-feature-discovery/features.d/*``, one
``name=value`` per line, and publishes each as a node label. Names go under
``vgpukit.feature.node.kubernetes.io/`` (a sub-domain of NFD's own namespace, allowed without
``-extra-label-ns``); values are label values (at most 63 of ``[A-Za-z0-9._-]``, alphanumeric at
both ends).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from ..health import fact as health
from ..host import Host
from ..node.inventory import PREFIX, Inventory, resource_part
from ..pci import Scan
from ..vgpu import hostview
from ..vgpu.catalog import short_name

if TYPE_CHECKING:
    from pathlib import Path

    from ..nvml import Nvml

NAMESPACE = "vgpukit.feature.node.kubernetes.io"
_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def feature_file(host: Host) -> Path:
    return host.nfd_feature_file()


def value(text: str) -> str:
    """A valid label value: ``NVIDIA A100-SXM4-40GB`` -> ``NVIDIA-A100-SXM4-40GB``."""
    v = _VALUE_BAD.sub("-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", v)


def labels(host: Host, nvml: Nvml | None, inv: Inventory) -> dict[str, str]:
    """Label name (without namespace) -> value: GPU model, MIG capability and layout, VF counts, vGPU
    types, health (``health``: healthy / degraded / unusable, the worst watched device's)."""
    out: dict[str, str] = {}
    scan = Scan(host)
    gpus = [d for d in scan.physical() if d.kind == "gpu"]
    if gpus:
        models = Counter(d.name for d in gpus)
        out["gpu.count"] = str(len(gpus))
        out["gpu.model"] = value(models.most_common(1)[0][0])
        if len(models) > 1:
            out["gpu.models"] = str(len(models))
    nv = nvml.gpus() if nvml is not None else []
    if nv:
        out["mig.capable"] = "true" if any(g.mig_capable for g in nv) else "false"
        out["mig.enabled.count"] = str(sum(g.mig_current for g in nv))
    for res, devices in sorted(inv.resources.items()):
        part = res.removeprefix(PREFIX + "/")
        if part.startswith("mig-"):  # the MIG layout: slices per profile
            out[f"mig.{part[4:]}.count"] = str(len(devices))
    for d in scan.physical():
        if d.sriov is not None and d.sriov.total_vfs:
            key = f"sriov.{d.vendor}-{d.device}"
            out[f"{key}.vfs"] = str(int(out.get(f"{key}.vfs", "0")) + d.sriov.num_vfs)
            out[f"{key}.total"] = str(int(out.get(f"{key}.total", "0")) + d.sriov.total_vfs)
    watched = health.current(host, nvml, save=False)
    if watched:  # the worst device's state: a scheduler can keep work off a node with an unusable GPU
        out["health"] = health.worst(watched)
        out["health.unusable.count"] = str(len(health.unusable(watched)))
    for view in hostview.gpus(host, scan):
        for t in hostview.types(host, view):
            key = f"vgpu.{resource_part(short_name(t.name))}"
            if t.available is not None or t.free_vfs is not None:
                n = t.available if t.available is not None else t.free_vfs or 0
                out[f"{key}.available"] = str(int(out.get(f"{key}.available", "0")) + n)
    return dict(sorted(out.items()))


def render(found: dict[str, str]) -> str:
    head = "# written by vgpukit k8s labels --write; node-feature-discovery publishes each line as a label\n"
    return head + "".join(f"{NAMESPACE}/{k}={v}\n" for k, v in found.items())
