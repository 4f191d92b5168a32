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

from . import kubevirt_cr
from .dra.devices import DRIVER
from .kubevirt import Offers
from .kubevirt_cr import Entry

# the DeviceClasses (deploy/kubernetes/dra/deviceclasses.yaml) a VM's claim can use: the DRA driver binds a VF
# to vfio-pci at prepare and makes vGPUs on demand; its whole GPUs are on the NVIDIA driver, for containers
# (a VM gets a whole GPU through the device plugin, bound to vfio-pci)
DRA_CLASSES = {"vf": "vf.gpu.vgpukit.io", "vgpu": "vgpu.gpu.vgpukit.io", "mdev": "mdev.gpu.vgpukit.io"}
DISK = {"name": "containerdisk", "disk": {"bus": "virtio"}}
VOLUME = {"name": "containerdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:latest"}}


def entries(offers: Offers) -> list[Entry]:
    """The ``permittedHostDevices`` entries this node needs: one per PCI resource (by vendor:device), one per mdev
    type its parents offer (by type name), all served by an external provider (vgpukit)."""
    pci = sorted({(o.selector, o.name) for o in offers.resources.values() if o.kind == "pci"})
    mdev = {**offers.types, **{o.selector: o.name for o in offers.resources.values() if o.kind == "mdev"}}
    return [Entry("pci", s, n) for s, n in pci] + [Entry("mdev", s, n) for s, n in sorted(mdev.items())]


def patch(offers: Offers, cr: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """The KubeVirt CR merge patch (``kubectl patch kubevirt kubevirt -n kubevirt --type merge``): the CR's
    ``permittedHostDevices`` lists with this node's entries merged in (:func:`.kubevirt_cr.merge`), and the
    warnings about the CR's entries that clash with this node's."""
    return kubevirt_cr.patch(cr, entries(offers))


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
    then DRA ones (a claim template and its VMI) for each kind the DRA driver offers VMs here (:attr:`Offers.dra`:
    a VF, a vGPU, an mdev)."""
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
        if kind not in offers.dra:
            continue
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"vm-{kind}"},
            "spec": {"spec": {"devices": {"requests": [{"name": kind, "exactly": {"deviceClassName": cls}}]}}},
        }
        key = "gpus" if kind == "vgpu" else "hostDevices"
        entry = {"name": f"{kind}0", "claimName": "devices", "requestName": kind}
        claims = [{"name": "devices", "resourceClaimTemplateName": f"vm-{kind}"}]
        out += [template, _vmi(f"vm-dra-{kind}", {key: [entry]}, claims)]
    return out


def notes(cr: dict[str, Any] | None) -> str:
    """The comment block printed before the documents: how to apply the patch (the first document)."""
    name, ns = kubevirt_cr.target(cr)
    how = (
        "merges this node's entries into the lists of the CR given with -f (every entry it has is kept)"
        if cr is not None
        else "holds this node's entries only: applied as is, it REPLACES the CR's lists (give the CR with -f)"
    )
    return f"""\
# KubeVirt for this node's devices (vgpukit k8s kubevirt-config).
# 1. the KubeVirt CR patch is the first document below; it {how}.
#    Apply it: kubectl patch kubevirt {name} -n {ns} --type merge --patch-file FILE (kubectl reads the
#    file's first document only). Several nodes: one after the other, each from the CR as the last left
#    it (kubectl get kubevirt -n {ns} {name} -o yaml | vgpukit k8s kubevirt-config -f - --patch-only);
#    a 409 Conflict means the CR changed since it was read: read it again (docs/kubevirt.md).
#    Every mdev type this node offers is an external provider's, so KubeVirt's virt-handler keeps vgpukit's
#    mdevs; KubeVirt must not create mdevs here: mediatedDevicesConfiguration enabled: false, or
#    nodeMediatedDeviceTypes selecting other nodes only (-f CR checks it).
# 2. the device plugin: vgpukit k8s device-plugin --kubevirt; DRA: vgpukit k8s dra-plugin --device-metadata
#    (driver {DRIVER}; KubeVirt >= 1.9, or 1.6-1.8 with feature gates GPUsWithDRA / HostDevicesWithDRA).
"""
