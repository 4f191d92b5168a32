"""The cluster's KubeVirt CR as ``kubevirt-config -f`` reads it, and this node's entries merged into it.

* :func:`parse`: the CR (``kubectl get kubevirt -n kubevirt kubevirt -o yaml``), or the one KubeVirt CR of
  a ``kind: List`` (what ``kubectl get kubevirt -n kubevirt -o yaml`` prints without a name); anything
  else is refused (exit 2), as is a CR whose parts this command reads have the wrong shape.
* :func:`merge`: ``permittedHostDevices``' two lists with this node's entries added: every entry the CR
  has is kept as it is, in its place; an entry of this node's that the CR already has is not repeated.
  A JSON merge patch replaces whole lists (RFC 7386), so the patch carries the merged lists whole, and
  the CR's ``metadata.resourceVersion``: the API server refuses the patch (409 Conflict) when the CR
  changed since it was read, instead of dropping what another node added meanwhile (docs/kubevirt.md,
  "Several nodes").

KubeVirt's virt-handler (``pkg/virt-handler/device-manager/device_controller.go``) starts its own device
plugin, on every node, for each entry without ``externalResourceProvider``: a PCI entry's plugin offers
every function on vfio-pci with that vendor:device, an mdev entry's every mdev of that type (name, blanks
as ``_``). An entry of the CR with one of this node's selectors and no ``externalResourceProvider``
therefore hands this node's devices out a second time: :func:`merge` warns about it, and about entries
naming one of this node's resources for another selector. Warnings name the CR's entries by their place
(``mediatedDevices[0]``) and this node's own selectors and names, never the file's text.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..errors import InvalidInput
from ..inputs import load_yaml

API_GROUP = "kubevirt.io/"
KIND = "KubeVirt"
LISTS = {"pci": ("pciHostDevices", "pciVendorSelector"), "mdev": ("mediatedDevices", "mdevNameSelector")}
MAX_CR_BYTES = 4 << 20  # a KubeVirt CR with its status is tens of kB


class Entry(msgspec.Struct, frozen=True):
    """One ``permittedHostDevices`` entry this node needs."""

    kind: str  # pci | mdev
    selector: str
    name: str

    def doc(self) -> dict[str, Any]:
        return {LISTS[self.kind][1]: self.selector, "resourceName": self.name, "externalResourceProvider": True}


def _refuse(where: str, what: str) -> InvalidInput:
    return InvalidInput(
        f"{where}: {what}",
        hint="give the cluster's KubeVirt CR: kubectl get kubevirt -n kubevirt kubevirt -o yaml",
    )


def _mapping(value: Any, where: str, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse(where, f"{path} is not a mapping")
    return value


def _strings(value: Any, where: str, path: str) -> None:
    if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise _refuse(where, f"{path} is not a list of names")


def _check(cr: dict[str, Any], where: str) -> None:
    """The parts this command reads have KubeVirt's shapes (its CRD's types)."""
    conf = _mapping(_mapping(cr.get("spec"), where, "spec").get("configuration"), where, "spec.configuration")
    permitted = _mapping(conf.get("permittedHostDevices"), where, "permittedHostDevices")
    for key, selector in LISTS.values():
        entries = permitted.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise _refuse(where, f"permittedHostDevices.{key} is not a list")
        for i, e in enumerate(entries):
            if not (
                isinstance(e, dict) and isinstance(e.get(selector), str) and isinstance(e.get("resourceName"), str)
            ):
                raise _refuse(
                    where, f"permittedHostDevices.{key}[{i}] is not an entry with {selector} and resourceName"
                )
    mdc = _mapping(conf.get("mediatedDevicesConfiguration"), where, "mediatedDevicesConfiguration")
    for key in ("mediatedDeviceTypes", "mediatedDevicesTypes"):
        _strings(mdc.get(key), where, f"mediatedDevicesConfiguration.{key}")
    nodes = mdc.get("nodeMediatedDeviceTypes")
    if nodes is not None and not isinstance(nodes, list):
        raise _refuse(where, "mediatedDevicesConfiguration.nodeMediatedDeviceTypes is not a list")
    for i, node in enumerate(nodes or []):
        path = f"mediatedDevicesConfiguration.nodeMediatedDeviceTypes[{i}]"
        node = _mapping(node, where, path)
        _mapping(node.get("nodeSelector"), where, f"{path}.nodeSelector")
        for key in ("mediatedDeviceTypes", "mediatedDevicesTypes"):
            _strings(node.get(key), where, f"{path}.{key}")


def _is_cr(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("kind") == KIND
        and isinstance(doc.get("apiVersion"), str)
        and doc["apiVersion"].startswith(API_GROUP)
    )


def parse(text: str, where: str) -> dict[str, Any]:
    """The KubeVirt CR of a document: the CR itself, or the one in a ``kind: List``."""
    doc = load_yaml(text, where, max_bytes=MAX_CR_BYTES)
    if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
        crs = [d for d in doc["items"] if _is_cr(d)]
        if len(crs) != 1:
            found = "no KubeVirt CR" if not crs else f"{len(crs)} KubeVirt CRs"
            raise _refuse(where, f"the List holds {found}; give exactly one")
        doc = crs[0]
    if not _is_cr(doc):
        raise _refuse(where, f"not a KubeVirt CR (apiVersion {API_GROUP}v1, kind {KIND})")
    _check(doc, where)
    return dict(doc)


def permitted(cr: dict[str, Any] | None) -> dict[str, Any]:
    """The CR's ``spec.configuration.permittedHostDevices`` (empty without a CR or without one)."""
    spec = (cr or {}).get("spec") or {}
    return (spec.get("configuration") or {}).get("permittedHostDevices") or {}


def _key(kind: str, selector: str) -> str:
    """How KubeVirt compares selectors: vendor:device in lower case; a type name with blanks as ``_``."""
    return selector.strip().lower() if kind == "pci" else "_".join(selector.split())


def merge(cr: dict[str, Any] | None, ours: list[Entry]) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """(the merged lists by key, the warnings): the CR's entries kept, this node's added after them."""
    have = permitted(cr)
    out: dict[str, list[dict[str, Any]]] = {}
    warnings: list[str] = []
    for kind, (key, sel) in LISTS.items():
        existing: list[dict[str, Any]] = list(have.get(key) or [])
        merged = list(existing)
        for entry in (e for e in ours if e.kind == kind):
            present = False
            for i, e in enumerate(existing):
                same_selector = _key(kind, str(e[sel])) == _key(kind, entry.selector)
                same_name = e["resourceName"] == entry.name
                external = e.get("externalResourceProvider") is True
                place = f"the CR's permittedHostDevices.{key}[{i}]"
                if same_selector and same_name:
                    present = True
                    if not external:
                        warnings.append(
                            f"{place} lists {entry.name} without externalResourceProvider: KubeVirt's own device "
                            "plugin serves it on this node too, beside vgpukit's (one resource name, two plugins): "
                            "set externalResourceProvider: true on it"
                        )
                elif same_selector:
                    whose = (
                        "another device plugin's resource (externalResourceProvider): where that plugin runs "
                        "beside vgpukit"
                        if external
                        else "a resource of KubeVirt's own device plugin, which runs on every node: on this node"
                    )
                    warnings.append(
                        f"{place} has the selector {entry.selector!r} of {entry.name} for {whose}, the same devices "
                        "are handed out twice (set externalResourceProvider: true on it, or remove it)"
                    )
                elif same_name:
                    warnings.append(
                        f"{place} names {entry.name} for another selector: one resource name for two kinds of "
                        "device (and two plugins, if another one serves it)"
                    )
            if not present:
                merged.append(entry.doc())
        if merged:
            out[key] = merged
    return out, warnings


def patch(cr: dict[str, Any] | None, ours: list[Entry]) -> tuple[dict[str, Any], list[str]]:
    """The merge patch (``kubectl patch kubevirt NAME -n NAMESPACE --type merge``) and the warnings."""
    lists, warnings = merge(cr, ours)
    doc: dict[str, Any] = {}
    version = ((cr or {}).get("metadata") or {}).get("resourceVersion")
    if isinstance(version, str) and version:
        doc["metadata"] = {"resourceVersion": version}  # the API server's precondition (409 when it changed)
    doc["spec"] = {"configuration": {"permittedHostDevices": lists}}
    return doc, warnings


def target(cr: dict[str, Any] | None) -> tuple[str, str]:
    """(name, namespace) of the CR to patch: the CR's own when they are plain names, else KubeVirt's defaults."""
    import re

    meta = (cr or {}).get("metadata") or {}
    label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    name, ns = meta.get("name"), meta.get("namespace")
    return (
        name if isinstance(name, str) and label.match(name) else "kubevirt",
        ns if isinstance(ns, str) and label.match(ns) else "kubevirt",
    )
