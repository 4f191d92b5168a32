"""What the cluster's API server serves for ResourceSlices, found out before the plugin writes any.

Three reads, none of which can be refused (docs/kubernetes.md, "What the plugin publishes for each
Kubernetes release"):

1. ``GET /version``: the release, hence the layout of partitionable devices and the limits of a slice
   (``vgpukit/data/k8s/dra.json``): 1.34 puts a GPU's counter sets beside its devices in one slice
   (*combined*); 1.35 and later want counter sets in slices of their own (*split*) and refuse the
   combined shape. A release newer than the newest known follows the newest known's rules.
2. ``GET /apis`` (discovery): ``resource.k8s.io/v1`` must be served (1.34 and later).
3. With ``--partitionable auto``, a **server-side dry run** (``dryRun=All``) of a create of a slice of the
   release's own shape holding one counter set: the API server validates it, applies its feature gates
   and stores nothing. Where ``DRAPartitionableDevices`` is off it drops ``sharedCounters`` from the
   answer (alpha, off by default, in 1.34 and 1.35; beta, on, from 1.36): the plugin then publishes the
   static view. The dry run's shape is valid for the release found in step 1, so it is not refused: it
   is a read of the gate, not a probe by trial and error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ...data import load_json
from ...errors import Unsupported, VgpukitError
from ..agent import api_error
from .devices import DRIVER

API_TIMEOUT = 30  # seconds one call may take
GROUP, VERSION = "resource.k8s.io", "v1"
LIST_VALUES = ("bools", "ints", "strings", "versions")  # list-type attribute values (1.36 and later)
_VERSION = re.compile(r"v?(\d+)\.(\d+)")


@dataclass(frozen=True)
class Limits:
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


@dataclass(frozen=True)
class Server:
    """What one API server serves: its release (``1.35``), the layout of partitionable devices
    (``combined`` or ``split``), whether it keeps counters (gate ``DRAPartitionableDevices``), the limits."""

    version: str
    layout: str
    partitionable: bool
    limits: Limits
    git_version: str = ""
    taints: bool = False  # the DRADeviceTaints gate's default in that release

    def describe(self) -> str:
        shape = (
            "counter sets beside their devices (1.34)"
            if self.layout == "combined"
            else "counter sets in slices of their own (1.35+)"
        )
        gate = "on" if self.partitionable else "off (feature gate DRAPartitionableDevices)"
        return f"Kubernetes {self.git_version or self.version}: {shape}, partitionable devices {gate}"


def _table() -> dict[str, Any]:
    table: dict[str, Any] = load_json("k8s/dra.json")
    return table


def _key(version: str) -> tuple[int, int]:
    m = _VERSION.match(version.strip())
    if m is None:
        raise Unsupported(f"not a Kubernetes version: {version[:40]!r}", value=version[:40])
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


def for_version(version: str, partitionable: bool | None = None, git_version: str = "") -> Server:
    """The server of a release; ``partitionable`` None: the gate's default in that release."""
    key = release(version)
    rel = _table()["releases"][key]
    limits = Limits(**_table()["limits"][rel["layout"]])
    gate = bool(rel["partitionable_default"]) if partitionable is None else partitionable
    return Server(key, str(rel["layout"]), gate, limits, git_version, bool(rel["taints_default"]))


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


def detect(resource_api: Any, node: str, mode: str = "auto") -> Server:
    """What the API server behind ``resource_api`` (a ``ResourceV1Api``) serves; ``mode`` is
    ``--partitionable``: ``auto`` reads the gate with a dry run, ``on``/``off`` take it as given."""
    try:
        text, git = server_version(resource_api.api_client)
        found = for_version(text, True, git)  # raises for a release before DRA's GA
        if not serves_resource_v1(resource_api.api_client):
            raise Unsupported(
                f"the API server ({text}) does not serve {GROUP}/{VERSION} (disabled by --runtime-config?)"
            )
        if mode != "auto":
            return for_version(text, mode == "on", git)
        raw = resource_api.create_resource_slice(
            probe_slice(node, found.layout), dry_run="All", _preload_content=False, _request_timeout=API_TIMEOUT
        )
        stored = json.loads(raw.data) if raw.data else {}
    except VgpukitError:
        raise
    except Exception as err:  # ApiException, connection errors: the next poll asks again
        raise api_error(err) from None
    kept = bool((stored.get("spec") or {}).get("sharedCounters"))
    return for_version(text, kept, git)
