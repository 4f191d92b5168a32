"""The KubeVirt side of the configuration: the KubeVirt CR patch for this node's devices, example VMIs, and
the clash with KubeVirt's own mdev handling (docs/kubevirt.md, "KubeVirt's configuration").

* ``permittedHostDevices`` lists each resource the device plugin's KubeVirt mode serves (``pciHostDevices``
  by vendor:device, ``mediatedDevices`` by type name) with ``externalResourceProvider: true``: KubeVirt
  starts no plugin of its own for them. Every mdev type this node's parents offer is listed, whether an
  instance exists yet or not: KubeVirt's virt-handler **removes** every mdev whose type is neither in its
  ``mediatedDevicesConfiguration`` nor an external provider's (``removeUndesiredMDEVs``), unless
  ``mediatedDevicesConfiguration.enabled`` is false.
* :func:`clashes`: the types a KubeVirt CR's ``mediatedDevicesConfiguration`` asks KubeVirt to create
  that this node's parents offer (KubeVirt would create them on parents vgpukit manages).
"""

from __future__ import annotations

from typing import Any

from .dra.devices import DRIVER
from .kubevirt import Offers

DRA_CLASSES = {"vf": "vf.gpu.vgpukit.io", "gpu": "gpu.vgpukit.io", "vgpu": "vgpu.gpu.vgpukit.io"}
DISK = {"name": "containerdisk", "disk": {"bus": "virtio"}}
VOLUME = {"name": "containerdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:latest"}}


def patch(offers: Offers) -> dict[str, Any]:
    """The KubeVirt CR merge patch (``kubectl patch kubevirt kubevirt -n kubevirt --type merge``)."""
    pci = sorted({(o.selector, o.name) for o in offers.resources.values() if o.kind == "pci"})
    mdev = {**offers.types, **{o.selector: o.name for o in offers.resources.values() if o.kind == "mdev"}}
    permitted: dict[str, Any] = {}
    if pci:
        permitted["pciHostDevices"] = [
            {"pciVendorSelector": s, "resourceName": n, "externalResourceProvider": True} for s, n in pci
        ]
    if mdev:
        permitted["mediatedDevices"] = [
            {"mdevNameSelector": s, "resourceName": n, "externalResourceProvider": True}
            for s, n in sorted(mdev.items())
        ]
    return {"spec": {"configuration": {"permittedHostDevices": permitted}}}


def _type_names(value: Any) -> list[str]:
    return [str(t) for t in value] if isinstance(value, list) else []


def clashes(cr: Any, offers: Offers) -> list[str]:
    """One line per mdev type the KubeVirt CR would have KubeVirt create on this node's parents."""
    spec = cr.get("spec") if isinstance(cr, dict) else None
    conf = (spec or {}).get("configuration") if isinstance(spec, dict) else None
    mdc = conf.get("mediatedDevicesConfiguration") if isinstance(conf, dict) else None
    if not isinstance(mdc, dict) or mdc.get("enabled") is False:
        return []
    wanted = {
        t: "mediatedDeviceTypes" for t in _type_names(mdc.get("mediatedDeviceTypes") or mdc.get("mediatedDevicesTypes"))
    }
    for i, node in enumerate(mdc.get("nodeMediatedDeviceTypes") or []):
        if isinstance(node, dict):
            types = _type_names(node.get("mediatedDeviceTypes") or node.get("mediatedDevicesTypes"))
            wanted.update({t: f"nodeMediatedDeviceTypes[{i}] (if its nodeSelector selects this node)" for t in types})
    ours = {n.replace(" ", "_"): n for n in offers.types} | {i: n for i, n in offers.type_ids.items()}
    return [
        f"KubeVirt's {where} would create {ours[t]!r} mdevs on this node, whose mdevs vgpukit makes: set "
        "mediatedDevicesConfiguration.enabled: false, or keep this node out of it (docs/kubevirt.md)"
        for t, where in sorted(wanted.items())
        if t in ours
    ]


def _vmi(name: str, devices: dict[str, Any], claims: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "domain": {"devices": {"disks": [DISK], **devices}, "resources": {"requests": {"memory": "2Gi"}}},
        "volumes": [VOLUME],
    }
    if claims:
        spec["resourceClaims"] = claims
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {"name": name}, "spec": spec}


def _kind(offers: Offers, name: str) -> str:
    """gpu (a whole GPU), vgpu (an mdev on a GPU, a VF of a GPU), vf, mdev or pci: what a resource's devices are."""
    o = offers.resources[name]
    dev = o.devices[0]
    fn = offers.pci.get(dev.topo_bdf)
    on_gpu = fn is not None and fn.kind == "gpu"
    if o.kind == "mdev":
        return "vgpu" if on_gpu else "mdev"
    if on_gpu:
        return "vgpu" if fn is not None and fn.is_vf else "gpu"
    return "vf" if fn is not None and fn.is_vf else "pci"


def examples(offers: Offers) -> list[dict[str, Any]]:
    """Example VMIs: device plugin ones for each kind this node has (a VF, a whole GPU, a vGPU, an mdev...),
    then DRA ones (a claim template and its VMI) for a VF, a whole GPU, a vGPU."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for name in sorted(offers.resources):
        kind = _kind(offers, name)
        if kind in seen:
            continue
        seen.add(kind)
        key = "gpus" if kind in ("gpu", "vgpu") else "hostDevices"
        out.append(_vmi(f"vm-{kind}", {key: [{"name": f"{kind}0", "deviceName": name}]}))
    for kind, cls in DRA_CLASSES.items():
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"vm-{kind}"},
            "spec": {"spec": {"devices": {"requests": [{"name": kind, "exactly": {"deviceClassName": cls}}]}}},
        }
        key = "hostDevices" if kind == "vf" else "gpus"
        entry = {"name": f"{kind}0", "claimName": "devices", "requestName": kind}
        claims = [{"name": "devices", "resourceClaimTemplateName": f"vm-{kind}"}]
        out += [template, _vmi(f"vm-dra-{kind}", {key: [entry]}, claims)]
    return out


NOTES = f"""\
# KubeVirt for this node's devices (vgpukit k8s kubevirt-config).
# 1. the KubeVirt CR patch: kubectl patch kubevirt kubevirt -n kubevirt --type merge --patch-file FILE
#    (the first document). Every mdev type this node offers is an external provider's, so KubeVirt's
#    virt-handler keeps vgpukit's mdevs; KubeVirt must not create mdevs here: mediatedDevicesConfiguration
#    enabled: false, or nodeMediatedDeviceTypes selecting other nodes only (give -f CR to check).
# 2. the device plugin: vgpukit k8s device-plugin --kubevirt; DRA: vgpukit k8s dra-plugin --device-metadata
#    (driver {DRIVER}; KubeVirt >= 1.9, or 1.6-1.8 with feature gates GPUsWithDRA / HostDevicesWithDRA).
"""
