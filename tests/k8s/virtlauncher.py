"""A stand-in for KubeVirt's virt-launcher: a VMI's ``gpus``/``hostDevices`` and what the pod was given
(device plugin environment variables, DRA device metadata files) -> the domain's ``<hostdev>`` elements.

Written from KubeVirt's code (kubevirt/kubevirt v1.9.0 = main d923fdb8 for these files; docs/kubevirt.md,
"The contract", cites each rule):

* device plugin (``pkg/virt-launcher/virtwrap/device/hostdevice/{addresspool,hostdev}.go``, ``gpu/`` and
  ``generic/``): the variable is ``PCI_RESOURCE_`` / ``MDEV_PCI_RESOURCE_`` + the resource name upper-cased
  with ``/`` and ``.`` as ``_`` (``pkg/util/util.go``); its value loses a trailing comma and is split on
  commas; each entry of the spec takes the first address of its resource, which leaves every pool; all
  PCI hostdevs first (spec order), then the mdevs; an address must match ``DDDD:BB:DD.F``; the number made
  must equal the number of entries with a ``deviceName``;
* DRA (``hostdevice/dra/{gpu,generic}_hostdev.go``, ``pkg/dra/utils.go``, ``pkg/dra/metadata/types.go``): an
  entry with ``claimName``/``requestName`` and no ``deviceName``; the file is
  ``<base>/resourceclaims/<resourceClaimName>/<request>/*-metadata.json`` or
  ``<base>/resourceclaimtemplates/<claim name>/<request>/*-metadata.json``, exactly one; the first
  ``metadata.resource.k8s.io/v1alpha1`` object of the stream; the request's one device; ``mdevUUID`` first,
  else ``resource.kubernetes.io/pciBusID``;
* the elements: PCI ``<hostdev type="pci" managed="no">`` with the host address and no guest address,
  mdev ``<hostdev type="mdev" mode="subsystem" model="vfio-pci">``; alias ``ua-`` + ``gpu-``/``hostdevice-``
  (``dra-gpu-``/``dra-hostdevice-``) + the entry's name; a GPU list without a display setting gives its
  first mdev ``display="on" ramfb="on"``, host devices never.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

PCI, MDEV = "PCI_RESOURCE", "MDEV_PCI_RESOURCE"
METADATA_BASE = "/var/run/kubernetes.io/dra-device-attributes"
ADDRESS = re.compile(r"^([\da-fA-F]{4}):([\da-fA-F]{2}):([\da-fA-F]{2})\.([0-7]{1})$")


class LaunchError(Exception):
    """What virt-launcher would fail the VM with."""


def env_var(prefix: str, resource: str) -> str:
    return f"{prefix}_{resource.upper().replace('/', '_').replace('.', '_')}"


class Pool:
    """addresspool.go: addresses per resource; ``pop`` takes the first and removes it from every resource."""

    def __init__(self, env: dict[str, str], prefix: str, resources: list[str]) -> None:
        self.by: dict[str, list[str]] = {}
        for r in resources:
            value = env.get(env_var(prefix, r))
            if value is None:
                continue  # logged as a warning by KubeVirt: the resource is absent
            value = value.removesuffix(",")
            self.by[r] = value.split(",") if value else []

    def pop(self, resource: str) -> str:
        found = self.by.get(resource)
        if not found:
            return ""  # BestEffortAddressPool: an error is an empty address, and the device is skipped
        address = found[0]
        for addresses in self.by.values():
            if address in addresses:
                addresses.remove(address)
        return address


def _alias(el: ET.Element, name: str) -> None:
    ET.SubElement(el, "alias", {"name": "ua-" + name})


def pci_hostdev(address: str, alias: str) -> ET.Element:
    m = ADDRESS.match(address)
    if m is None:
        raise LaunchError(f"failed to parse address {address}")
    el = ET.Element("hostdev", {"type": "pci", "managed": "no"})
    src = ET.SubElement(el, "source")
    d, b, s, f = m.groups()
    ET.SubElement(
        src, "address", {"type": "pci", "domain": "0x" + d, "bus": "0x" + b, "slot": "0x" + s, "function": "0x" + f}
    )
    _alias(el, alias)
    return el


def mdev_hostdev(uuid: str, alias: str, display: bool) -> ET.Element:
    el = ET.Element("hostdev", {"type": "mdev", "mode": "subsystem", "model": "vfio-pci"})
    if display:
        el.set("display", "on")
        el.set("ramfb", "on")
    src = ET.SubElement(el, "source")
    ET.SubElement(src, "address", {"uuid": uuid})
    _alias(el, alias)
    return el


def _entries(vmi: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    devices = vmi["spec"]["domain"]["devices"]
    return [("gpu", e) for e in devices.get("gpus", [])] + [("hostdevice", e) for e in devices.get("hostDevices", [])]


def from_env(vmi: dict[str, Any], env: dict[str, str]) -> list[ET.Element]:
    """The device-plugin entries' hostdevs from the pod's environment (gpus first, then hostDevices)."""
    out: list[ET.Element] = []
    for kind in ("gpu", "hostdevice"):
        entries = [e for k, e in _entries(vmi) if k == kind and e.get("deviceName")]
        names = list(dict.fromkeys(e["deviceName"] for e in entries))
        pci, mdev = Pool(env, PCI, names), Pool(env, MDEV, names)
        made: list[ET.Element] = []
        for e in entries:
            address = pci.pop(e["deviceName"])
            if address:
                made.append(pci_hostdev(address, f"{kind}-{e['name']}"))
        no_display = kind == "gpu" and not any("display" in (e.get("virtualGPUOptions") or {}) for e in entries)
        for e in entries:
            uuid = mdev.pop(e["deviceName"])
            if uuid:
                made.append(mdev_hostdev(uuid, f"{kind}-{e['name']}", no_display))
                no_display = False
        if len(made) != len(entries):
            raise LaunchError(
                f"the number of device plugin {kind}s do not match: {len(entries)} asked, {len(made)} found"
            )
        out += made
    return out


def metadata_file(vmi: dict[str, Any], base: Path, claim: str, request: str) -> Path:
    found = [c for c in vmi["spec"].get("resourceClaims", []) if c["name"] == claim]
    if not found:
        raise LaunchError(f"resource claim {claim} is not in the VMI")
    c = found[0]
    where = (
        f"resourceclaims/{c['resourceClaimName']}"
        if c.get("resourceClaimName")
        else f"resourceclaimtemplates/{c['name']}"
    )
    files = sorted((base / where / request).glob("*-metadata.json"))
    if len(files) != 1:
        raise LaunchError(f"expected exactly one metadata file for {claim}/{request}, found {len(files)}")
    return files[0]


def _v1alpha1(text: str) -> dict[str, Any]:
    decoder, at = json.JSONDecoder(), 0
    while at < len(text):
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            break
        doc, at = decoder.raw_decode(text, at)
        if doc.get("apiVersion") == "metadata.resource.k8s.io/v1alpha1":
            return doc  # type: ignore[no-any-return]
    raise LaunchError("no metadata.resource.k8s.io/v1alpha1 object in the stream")


def from_metadata(vmi: dict[str, Any], base: Path) -> list[ET.Element]:
    """The DRA entries' hostdevs from the device metadata files under ``base`` (the pod's view)."""
    out: list[ET.Element] = []
    gpus = [e for k, e in _entries(vmi) if k == "gpu" and not e.get("deviceName")]
    no_display = not any("display" in (e.get("virtualGPUOptions") or {}) for e in gpus)
    for kind, e in _entries(vmi):
        if e.get("deviceName") or not (e.get("claimName") and e.get("requestName")):
            continue
        doc = _v1alpha1(metadata_file(vmi, base, e["claimName"], e["requestName"]).read_text())
        reqs = [r for r in doc.get("requests", []) if r.get("name") == e["requestName"]]
        if len(reqs) != 1 or len(reqs[0].get("devices", [])) != 1:
            raise LaunchError(f"expected exactly one device for request {e['requestName']}")
        attrs = reqs[0]["devices"][0].get("attributes", {})
        mdev = (attrs.get("mdevUUID") or {}).get("string")
        bus = (attrs.get("resource.kubernetes.io/pciBusID") or {}).get("string")
        if mdev:
            out.append(mdev_hostdev(mdev, f"dra-{kind}-{e['name']}", kind == "gpu" and no_display))
            no_display = no_display and kind != "gpu"
        elif bus:
            out.append(pci_hostdev(bus, f"dra-{kind}-{e['name']}"))
        else:
            raise LaunchError(f"no mdevUUID or pciBusID for {e['claimName']}/{e['requestName']}")
    return out


def pod_view(cdi_specs: list[dict[str, Any]], root: Path, host_root: Path = Path("/")) -> Path:
    """What the container runtime does with the metadata CDI specs: each mount's host file (under
    ``host_root``: a simulated host's) at its container path under ``root`` (a symlink stands for the
    read-only bind mount); the base directory."""
    for spec in cdi_specs:
        for dev in spec.get("devices", []):
            for m in dev.get("containerEdits", {}).get("mounts", []):
                assert "ro" in m.get("options", []), m
                target = root / m["containerPath"].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(host_root / m["hostPath"].lstrip("/"))
    return root / METADATA_BASE.lstrip("/")


def domain(name: str, hostdevs: list[ET.Element], memory_mib: int = 64) -> str:
    """A minimal domain around the hostdevs (TCG, q35, no disk: it only has to start)."""
    dom = ET.Element("domain", {"type": "qemu"})
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", {"unit": "MiB"}).text = str(memory_mib)
    ET.SubElement(dom, "vcpu").text = "1"
    os_ = ET.SubElement(dom, "os")
    ET.SubElement(os_, "type", {"arch": "x86_64", "machine": "q35"}).text = "hvm"
    devices = ET.SubElement(dom, "devices")
    devices.extend(hostdevs)
    ET.SubElement(devices, "memballoon", {"model": "none"})
    return ET.tostring(dom, encoding="unicode")
