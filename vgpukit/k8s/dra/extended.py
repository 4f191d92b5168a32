"""Extended resources backed by DRA (Kubernetes KEP-5004): a pod written for the device plugin
(``resources.limits: vgpukit.io/mig-3g.20gb: 1``) served by the DRA driver unchanged.

Each device the DRA plugin publishes that the device plugin would hand out under a resource name carries
that name as the attribute ``devicePluginResource`` (``vgpukit.io/mig-3g.20gb``, ``vgpukit.io/vf-15b3-101b``,
``vgpukit.io/vgpu-t4-4q``, ``vgpukit.io/mdev-mtty-2``; a whole GPU: ``vgpukit.io/gpu-share``, the device
plugin's name for the GPUs it shares -- exclusive, a pod asking one gets the whole GPU; shared by capacity,
its default share stands for one of the device plugin's replicas). One DeviceClass per name selects the
devices with that attribute and maps the name (``spec.extendedResourceName``): the scheduler then fits such a
pod against the ResourceSlices, makes one ResourceClaim for it (a request ``c<container>-e<resource>`` per
name) and the kubelet has this driver prepare it like any other claim. :func:`device_classes` writes those
classes for the names a host's device plugin serves (``vgpukit k8s dra-classes``).

A GPU is published either way, never both (:mod:`.capacity`), so ``gpu-share`` is always served where the
device plugin served it: four pods a GPU where GPUs are shared by capacity (``--share-by-capacity gpu``:
Kubernetes 1.36+, or DRAConsumableCapacity on), one pod a GPU (all of it) where they are not. A name is
served on a node by the device plugin or by DRA, never both (the manifests run one plugin per node; the
scheduler takes a name from the device plugin where the node's allocatable has it).
"""

from __future__ import annotations

import re
from typing import Any

from ...node.inventory import Inventory
from .devices import DRIVER, DraDevice

ATTRIBUTE = "devicePluginResource"
KINDS = ("gpu", "mig", "vf", "mdev")  # the kinds the device plugin hands out by resource name (a GPU: gpu-share)
SHARE = "vgpukit.io/gpu-share"  # the device plugin's share of a GPU: a share of a GPU shared by capacity
_RESOURCE = re.compile(r"vgpukit\.io/[a-z0-9]([a-z0-9.-]{0,50}[a-z0-9])?")


def annotate(entries: list[dict[str, Any]], devices: dict[str, DraDevice]) -> list[dict[str, Any]]:
    """The slice entries, each device the device plugin serves under a name carrying it (module docstring)."""
    out = []
    for e in entries:
        dev = devices.get(e["name"])
        if dev is not None and dev.kind in KINDS and _RESOURCE.fullmatch(dev.resource):
            e = {**e, "attributes": {**e["attributes"], ATTRIBUTE: {"string": dev.resource}}}
        out.append(e)
    return out


def class_name(resource: str) -> str:
    """``vgpukit.io/mig-3g.20gb`` -> ``mig-3g.20gb.extended.gpu.vgpukit.io`` (a DNS subdomain)."""
    return f"{resource.removeprefix('vgpukit.io/')}.extended.{DRIVER}"


def device_class(resource: str) -> dict[str, Any]:
    """The DeviceClass mapping the extended resource ``resource`` to the devices that carry its name."""
    attr = f'device.attributes["{DRIVER}"].{ATTRIBUTE}'
    expression = f'device.driver == "{DRIVER}" && has({attr}) && {attr} == "{resource}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": class_name(resource)},
        "spec": {"selectors": [{"cel": {"expression": expression}}], "extendedResourceName": resource},
    }


def device_classes(inv: Inventory) -> list[dict[str, Any]]:
    """A DeviceClass per resource name the device plugin serves on the host (``gpu-share`` where it has GPUs
    the device plugin shares)."""
    names = {r for r in inv.resources if _RESOURCE.fullmatch(r)}
    return [device_class(r) for r in sorted(names)]
