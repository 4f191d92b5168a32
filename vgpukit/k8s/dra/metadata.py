"""Device metadata for workloads (KEP-5304): what each prepared request's devices are, in the file the
kubelet-plugin library of Kubernetes 1.36/1.37 writes, mounted into the containers by CDI.

Per request of a prepared claim (docs/kubernetes.md, "Device metadata"; the same places and format as
``k8s.io/dynamic-resource-allocation/kubeletplugin``):

* the **metadata file** ``/var/lib/kubelet/plugins/gpu.vgpukit.io/dra-device-metadata/<namespace>_<claim>/
  <request>/metadata.json``: a JSON stream of one ``DeviceMetadata`` object per API version, newest
  first (``metadata.resource.k8s.io/v1beta1``, then ``v1alpha1``, which KubeVirt 1.9 decodes), each
  naming the claim (name, namespace, uid, generation 1), the pod's claim name for a claim made from a
  template, and the request's devices (driver, pool, name, attributes: :mod:`.attributes`);
* a **CDI spec** ``/run/cdi/gpu.vgpukit.io-metadata-<uid>-<request>.json`` (kind
  ``gpu.vgpukit.io/metadata``, device ``<uid>_<request>``) bind-mounting that file read-only at
  ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/gpu.vgpukit.io-metadata.json``
  (``resourceclaimtemplates/<pod claim name>/...`` for a claim made from a template); its CDI device
  ID joins the request's devices' answer.

Both are :class:`~vgpukit.engine.files.PutFile` steps of the claim's second prepare run (with its CDI
spec and record: :mod:`.claims`), so a kill -9 leaves all or none; unprepare removes them in the run
that removes the claim's spec and record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar

from msgspec.structs import replace

from ...engine.env import Env
from ...engine.files import PutFile
from ...errors import VgpukitError
from ...host import DRA_METADATA_CONTAINER_DIR as CONTAINER_DIR
from ...pci import read_device
from .attributes import standard
from .devices import DRIVER, DraDevice

GROUP = "metadata.resource.k8s.io"
VERSIONS = ("v1beta1", "v1alpha1")  # newest first; KubeVirt 1.9 reads only v1alpha1
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"  # set on claims made from a template
CDI_VERSION = "0.3.0"  # what the library writes (mounts only)


class Prepared(Protocol):
    """A prepared device of the claim (:class:`.claims.Prepared`)."""

    @property
    def request_names(self) -> tuple[str, ...]: ...
    @property
    def pool(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def cdi_ids(self) -> tuple[str, ...]: ...


P = TypeVar("P", bound=Prepared)


def pod_claim(claim: Any) -> dict[str, str]:
    """``{"podClaimName": ...}`` of a ResourceClaim (the API object as a dict) made from a pod's claim
    template (its annotation), else empty."""
    meta = claim.get("metadata") if isinstance(claim, dict) else None
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    name = notes.get(POD_CLAIM_ANNOTATION) if isinstance(notes, dict) else None
    return {"podClaimName": name[:253]} if isinstance(name, str) and name else {}


def base(request: str) -> str:
    """A request's base name (``gpu/high-memory`` -> ``gpu``: a subrequest's file is its request's)."""
    return request.partition("/")[0]


def container_path(claim: dict[str, str], request: str) -> str:
    """Where a container (a VM's virt-launcher) finds the request's file."""
    pod_claim_name = claim.get("podClaimName")
    where = f"resourceclaimtemplates/{pod_claim_name}" if pod_claim_name else f"resourceclaims/{claim['name']}"
    return f"{CONTAINER_DIR}/{where}/{base(request)}/{DRIVER}-metadata.json"


def cdi_id(uid: str, request: str) -> str:
    return f"{DRIVER}/metadata={uid}_{base(request)}"


def attributes(env: Env, dev: DraDevice) -> dict[str, Any]:
    """A prepared device's attributes: its kind, UUID (GPU, MIG device, mdev), the standard ones and
    ``mdevUUID`` (:func:`.attributes.standard`)."""
    d = dev.device
    attrs: dict[str, Any] = {"kind": {"string": dev.kind}}
    uuid = (d.cdi_name or "").partition("=")[2] if dev.kind == "gpu" else d.id
    if dev.kind in ("gpu", "mig", "mdev") and uuid:
        attrs["uuid"] = {"string": uuid}
    if dev.kind == "mdev":
        attrs["parentBusID"] = {"string": d.topo_bdf}
    bridge, numa = None, d.numa
    try:
        fn = read_device(env.host, d.topo_bdf) if env.host.exists(env.host.pci_device(d.topo_bdf)) else None
    except VgpukitError:  # a parent that is no PCI function (mtty), or gone: no place in the PCIe tree
        fn = None
    if fn is not None:
        bridge, numa = fn.host_bridge, fn.numa_node if numa is None else numa
    attrs.update(standard(dev.kind, d.id, d.topo_bdf, bridge, numa))
    if dev.resource.rpartition("/")[2].startswith("vgpu-"):
        attrs["vgpuType"] = {"string": dev.resource.rpartition("/")[2].removeprefix("vgpu-")}
    return attrs


def stream(claim: dict[str, str], request: str, devices: list[dict[str, Any]]) -> str:
    """The metadata file: one ``DeviceMetadata`` object per version, each followed by a newline."""
    out = []
    for version in VERSIONS:
        doc: dict[str, Any] = {
            "kind": "DeviceMetadata",
            "apiVersion": f"{GROUP}/{version}",
            "metadata": {
                "name": claim["name"],
                "namespace": claim["namespace"],
                "uid": claim["uid"],
                "generation": 1,
            },
        }
        if claim.get("podClaimName"):
            doc["podClaimName"] = claim["podClaimName"]
        doc["requests"] = [{"name": request, "devices": devices}]
        out.append(json.dumps(doc, indent=2) + "\n")
    return "".join(out)


def _spec(env: Env, claim: dict[str, str], request: str) -> str:
    host = env.host
    mount = {
        "hostPath": host.display(host.dra_metadata_file(DRIVER, claim["namespace"], claim["name"], base(request))),
        "containerPath": container_path(claim, request),
        "options": ["ro", "bind"],
    }
    doc = {
        "cdiVersion": CDI_VERSION,
        "kind": f"{DRIVER}/metadata",
        "devices": [{"name": f"{claim['uid']}_{base(request)}", "containerEdits": {"mounts": [mount]}}],
    }
    return json.dumps(doc, indent=2) + "\n"


def plan(
    env: Env, claim: dict[str, str], prepared: Sequence[P], offered: dict[str, DraDevice]
) -> tuple[list[PutFile], list[P]]:
    """The steps writing each request's metadata file and CDI spec, and the prepared devices with the
    metadata's CDI device ID added to their answer."""
    host, uid = env.host, claim["uid"]
    by_request: dict[str, list[dict[str, Any]]] = {}
    refs: dict[str, str] = {}  # base request -> the request (or subrequest) the file names
    for p in prepared:
        entry = {"driver": DRIVER, "pool": p.pool, "name": p.device, "attributes": attributes(env, offered[p.device])}
        for r in p.request_names:
            by_request.setdefault(base(r), []).append(entry)
            refs.setdefault(base(r), r)
    steps: list[PutFile] = []
    for req, devices in sorted(by_request.items()):
        path = host.dra_metadata_file(DRIVER, claim["namespace"], claim["name"], req)
        what = f"write the device metadata of claim {uid} request {req}"
        steps.append(PutFile(host.display(path), stream(claim, refs[req], devices), 0o644, what))
        spec = host.display(host.dra_metadata_cdi_spec(DRIVER, uid, req))
        steps.append(PutFile(spec, _spec(env, claim, req), 0o644, f"write the CDI spec of that metadata ({spec})"))
    out = [replace(p, cdi_ids=(*p.cdi_ids, *(cdi_id(uid, r) for r in p.request_names))) for p in prepared]  # type: ignore[type-var]
    return steps, out


def remove_steps(env: Env, claim: dict[str, str], requests: Iterable[str]) -> list[PutFile]:
    """The steps removing each request's metadata file and CDI spec (absent ones stay absent)."""
    host, uid = env.host, claim.get("uid", "")
    if not claim.get("namespace") or not claim.get("name") or not uid:
        return []
    steps = []
    for req in sorted({base(r) for r in requests}):
        path = host.dra_metadata_file(DRIVER, claim["namespace"], claim["name"], req)
        steps.append(PutFile(host.display(path), None))
        steps.append(PutFile(host.display(host.dra_metadata_cdi_spec(DRIVER, uid, req)), None))
    return steps
