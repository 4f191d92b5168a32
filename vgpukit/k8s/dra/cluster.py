"""What the cluster's API server serves for ResourceSlices, found out before the plugin writes any.

Reads none of which can be refused (docs/kubernetes.md, "What the plugin publishes for each
Kubernetes release"):

1. ``GET /version``: the release, hence the layout of partitionable devices and the limits of a slice
   (``vgpukit/data/k8s/dra.json``): 1.34 puts a GPU's counter sets beside its devices in one slice
   (*combined*); 1.35 and later want counter sets in slices of their own (*split*) and refuse the
   combined shape. A release newer than the newest known follows the newest known's rules.
2. ``GET /apis`` (discovery): ``resource.k8s.io/v1`` must be served (1.34 and later).
3. Unless ``--partitionable off``, a **server-side dry run** (``dryRun=All``) of a create of a slice of the
   release's own shape holding one counter set: the API server validates it, applies its feature gates
   and stores nothing. Where ``DRAPartitionableDevices`` is off it drops ``sharedCounters`` from the
   answer (alpha, off by default, in 1.34 and 1.35; beta, on, from 1.36): the plugin then publishes the
   static view (with ``--partitionable on`` too, logged as an error: the operator asked for them).
4. Where the plugin would publish a taint or a device shared by capacity, a second dry run of a slice
   holding one device with a taint, ``allowMultipleAllocations`` and a capacity with a request policy:
   the answer without the taint says ``DRADeviceTaints`` is off, without the other two
   ``DRAConsumableCapacity`` is off, so the first publication already has what the cluster keeps.
   The dry runs' shapes are valid for the release found in step 1, so they are not refused: they are
   reads of the gates, not probes by trial and error.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from ...data import load_json
from ...errors import InvalidInput, Unsupported, VgpukitError
from ..agent import api_error
from .devices import DRIVER

API_TIMEOUT = 30  # seconds one call may take
GROUP, VERSION = "resource.k8s.io", "v1"
LIST_VALUES = ("bools", "ints", "strings", "versions")  # list-type attribute values (1.36 and later)
# 1.35, v1.35.2, v1.35.3-eks-4d5a1b (a provider's), 1.35.0+k3s1: major 1, a minor of at most 3 digits
_VERSION = re.compile(r"v?(\d{1,3})\.(\d{1,3})(?:\.\d{1,5})?(?:[-+][0-9A-Za-z.+-]{0,60})?")


class Limits(msgspec.Struct, frozen=True):
    """The limits of one ResourceSlice (None: no such limit in that layout)."""

    devices_per_slice: int
    devices_per_slice_with_taints_counters_or_lists: int
    counter_sets_per_slice: int | None
    counters_per_slice: int | None
    counters_per_set: int
    consumptions_per_device: int
    counters_per_consumption: int
    counters_consumed_per_device: int | None
    counters_consumed_per_slice: int | None
    taints_per_device: int
    attributes_and_capacities_per_device: int


class Server(msgspec.Struct, frozen=True):
    """What one API server serves: its release (``1.35``), the layout of partitionable devices
    (``combined`` or ``split``), whether it keeps counters (gate ``DRAPartitionableDevices``), the limits."""

    version: str
    layout: str
    partitionable: bool
    limits: Limits
    git_version: str = ""
    taints: bool = False  # the DRADeviceTaints gate's default in that release
    capacity: bool = False  # the DRAConsumableCapacity gate's default in that release
    kept_taints: bool | None = None  # what the dry run found (None: not asked)
    kept_capacity: bool | None = None  # consumable capacity kept by the dry run (None: not asked)

    def describe(self) -> str:
        shape = (
            "counter sets beside their devices (1.34)"
            if self.layout == "combined"
            else "counter sets in slices of their own (1.35+)"
        )
        gate = "on" if self.partitionable else "off (feature gate DRAPartitionableDevices)"
        text = f"Kubernetes {self.git_version or self.version}: {shape}, partitionable devices {gate}"
        if self.kept_taints is not None:
            text += ", device taints " + ("on" if self.kept_taints else "off (feature gate DRADeviceTaints)")
        if self.kept_capacity is not None:
            on = "on" if self.kept_capacity else "off (feature gate DRAConsumableCapacity)"
            text += f", consumable capacity {on}"
        return text


def _table() -> dict[str, Any]:
    table: dict[str, Any] = load_json("k8s/dra.json")
    return table


def _key(version: str) -> tuple[int, int]:
    m = _VERSION.fullmatch(version.strip())
    if m is None:
        raise InvalidInput(f"not a Kubernetes version (1.35, v1.35.2): {version[:40]!r}", value=version[:40])
    if int(m[1]) != 1:
        raise InvalidInput(f"not a Kubernetes 1.x release: {version[:40]!r}", value=version[:40])
    return int(m[1]), int(m[2])


def releases() -> list[str]:
    """The releases whose rules are known, oldest first."""
    return sorted(_table()["releases"], key=_key)


def release(version: str) -> str:
    """The known release whose rules apply to ``version`` (``v1.36.2-eks-1``: 1.36; 1.40: the newest known)."""
    want = _key(version)
    known = releases()
    if want < _key(known[0]):
        raise Unsupported(
            f"Kubernetes {version[:40]} does not serve {GROUP}/{VERSION}: DRA needs {known[0]} or later",
            value=version[:40],
        )
    return max((r for r in known if _key(r) <= want), key=_key)


def newer_than_known(version: str) -> bool:
    """Whether ``version`` is a release newer than the newest whose rules are known (it follows those)."""
    return _key(version) > _key(releases()[-1])


def for_version(version: str, partitionable: bool | None = None, git_version: str = "") -> Server:
    """The server of a release; ``partitionable`` None: the gate's default in that release."""
    key = release(version)
    rel = _table()["releases"][key]
    limits = Limits(**_table()["limits"][rel["layout"]])
    gate = bool(rel["partitionable_default"]) if partitionable is None else partitionable
    return Server(
        key,
        str(rel["layout"]),
        gate,
        limits,
        git_version,
        bool(rel["taints_default"]),
        bool(rel["capacity_default"]),
    )


def _get(call: Any) -> Any:
    raw = call(_preload_content=False, _request_timeout=API_TIMEOUT)
    return json.loads(raw.data)


def server_version(api_client: Any) -> tuple[str, str]:
    """``GET /version``: the release (``1.35``; a provider's ``35+`` minor read as 35) and the git version."""
    from kubernetes import client

    doc = _get(client.VersionApi(api_client).get_code)
    minor = str(doc.get("minor", "")).rstrip("+")
    git = str(doc.get("gitVersion", ""))[:64]
    return (f"{doc.get('major', '')}.{minor}" if minor.isdigit() else git), git


def serves_resource_v1(api_client: Any) -> bool:
    """Whether discovery (``GET /apis``) lists ``resource.k8s.io/v1``."""
    from kubernetes import client

    doc = _get(client.ApisApi(api_client).get_api_versions)
    for group in doc.get("groups") or []:
        if group.get("name") == GROUP:
            return any(v.get("version") == VERSION for v in group.get("versions") or [])
    return False


def probe_slice(node: str, layout: str) -> dict[str, Any]:
    """The dry run's slice: one counter set (and, combined, one device consuming it), named by the server."""
    counters: dict[str, Any] = {"sharedCounters": [{"name": "probe", "counters": {"probe": {"value": "1"}}}]}
    if layout == "combined":
        use = [{"counterSet": "probe", "counters": {"probe": {"value": "1"}}}]
        counters["devices"] = [{"name": "probe", "consumesCounters": use}]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{DRIVER}-probe-"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            **counters,
        },
    }


def feature_probe(node: str) -> dict[str, Any]:
    """The second dry run's slice: one device with a taint, ``allowMultipleAllocations`` and a capacity with
    a request policy (what a tainted device and a device shared by capacity carry)."""
    policy = {"default": "1", "validRange": {"min": "1", "max": "2", "step": "1"}}
    device = {
        "name": "probe",
        "taints": [{"key": f"{DRIVER}/probe", "value": "probe", "effect": "NoSchedule"}],
        "allowMultipleAllocations": True,
        "capacity": {"probe": {"value": "2", "requestPolicy": policy}},
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{DRIVER}-probe-"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


def _dry_run(resource_api: Any, doc: dict[str, Any]) -> dict[str, Any]:
    raw = resource_api.create_resource_slice(doc, dry_run="All", _preload_content=False, _request_timeout=API_TIMEOUT)
    stored = json.loads(raw.data) if raw.data else {}
    return stored if isinstance(stored, dict) else {}


def detect(resource_api: Any, node: str, mode: str = "auto", features: bool = False) -> Server:
    """What the API server behind ``resource_api`` (a ``ResourceV1Api``) serves; ``mode`` is
    ``--partitionable``: ``auto`` and ``on`` read the gate with a dry run, ``off`` does not ask;
    ``features``: also read the device taints' and consumable capacity's gates (a second dry run)."""
    try:
        text, git = server_version(resource_api.api_client)
        found = for_version(text, True, git)  # raises for a release before DRA's GA
        if not serves_resource_v1(resource_api.api_client):
            raise Unsupported(
                f"the API server ({text}) does not serve {GROUP}/{VERSION} (disabled by --runtime-config?)"
            )
        kept = False
        if mode != "off":
            stored = _dry_run(resource_api, probe_slice(node, found.layout))
            kept = bool((stored.get("spec") or {}).get("sharedCounters"))
        taints = capacity = None
        if features:
            (dev,) = (_dry_run(resource_api, feature_probe(node)).get("spec") or {}).get("devices") or [{}]
            taints = bool(dev.get("taints"))
            policies = [c.get("requestPolicy") for c in (dev.get("capacity") or {}).values() if isinstance(c, dict)]
            capacity = bool(dev.get("allowMultipleAllocations")) and bool(policies) and all(policies)
    except VgpukitError:
        raise
    except Exception as err:  # ApiException, connection errors: the next poll asks again
        raise api_error(err) from None
    s = for_version(text, kept, git)
    return Server(s.version, s.layout, s.partitionable, s.limits, git, s.taints, s.capacity, taints, capacity)
