"""The API-server stand-in's validation of ResourceSlices, as each release's API server and scheduler do it.

Its own facts (never vgpukit's: were both to share a table, a wrong one would pass everywhere):

* the strict JSON schema of the release (``kubernetes-validate``: unknown fields, types, required fields);
* the rules the schema cannot say, as ``pkg/apis/resource/validation/validation.go``
  (``validateResourceSliceSpec``) of the release has them, with its messages: exactly one node selection,
  1.35's one-of ``devices``/``sharedCounters``, every limit (devices per slice, 64 once a device has
  taints, counters or list attributes; counter sets, counters, consumptions, taints, attributes and
  capacities), unique names, 1.34's counters resolved in the slice itself;
* the scheduler's check of a whole pool (``pools_experimental.go``): the slices of its highest generation
  all there, every counter set a device names found in the pool, once, with every counter it consumes.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import jsonschema
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

RELEASES = ("1.34", "1.35", "1.36", "1.37")
# feature gates and their defaults in each release (kube_features.go)
GATES = ("DRAPartitionableDevices", "DRADeviceTaints", "DRAConsumableCapacity")
GATE_DEFAULTS = {
    "1.34": (False, False, False),
    "1.35": (False, False, False),
    "1.36": (True, True, True),
    "1.37": (True, True, True),
}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
LISTS = ("bools", "ints", "strings", "versions")
NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


@cache
def _validator(release: str) -> Any:
    """The release's strict ResourceSlice schema (built once per test process)."""
    folder = f"kubernetes-json-schema/v{release}.0-local-strict"
    schema = schema_contents(f"{folder}/resourceslice-resource-v1.json", release)
    defs = schema_contents(f"{folder}/_definitions.json", release)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _many(path: str, n: int, most: int) -> str:
    return f"{path}: Too many: {n}: must have at most {most} items"


def _device(dev: dict[str, Any], i: int, release: str, sets: dict[str, set[str]]) -> list[str]:
    where = f"spec.devices[{i}]"
    errs: list[str] = []
    if not DNS_LABEL.match(str(dev.get("name", ""))):
        errs.append(f"{where}.name: Invalid value: {dev.get('name')!r}: a lowercase RFC 1123 label")
    n = len(dev.get("attributes") or {}) + len(dev.get("capacity") or {})
    if n > 32:
        errs.append(f"{where}: Invalid value: {n}: the total number of attributes and capacities must not exceed 32")
    taints = len(dev.get("taints") or [])
    if taints > (4 if release == "1.34" else 16):
        errs.append(_many(f"{where}.taints", taints, 4 if release == "1.34" else 16))
    uses = dev.get("consumesCounters") or []
    if len({u.get("counterSet") for u in uses}) < len(uses):
        errs.append(f"{where}.consumesCounters: Duplicate value")
    if release == "1.34":
        total = sum(len(u.get("counters") or {}) for u in uses)
        if total > 32:
            errs.append(_many(f"{where}.consumesCounters", total, 32))
        for j, u in enumerate(uses):  # 1.34 resolves them in the slice itself
            if u.get("counterSet") not in sets:
                errs.append(
                    f"{where}.consumesCounters[{j}].counterSet: Invalid value: must reference a counterSet "
                    "defined in the ResourceSlice sharedCounters"
                )
            elif not set(u.get("counters") or {}) <= sets[u["counterSet"]]:
                errs.append(
                    f"{where}.consumesCounters[{j}].counters: Invalid value: must reference counters defined "
                    "in the ResourceSlice sharedCounters"
                )
    else:
        if len(uses) > 2:
            errs.append(_many(f"{where}.consumesCounters", len(uses), 2))
        for j, u in enumerate(uses):
            if len(u.get("counters") or {}) > 32:
                errs.append(_many(f"{where}.consumesCounters[{j}].counters", len(u["counters"]), 32))
    return errs


def spec_errors(doc: dict[str, Any], release: str, schema: bool = True) -> list[str]:
    """Why the release's API server refuses this ResourceSlice (empty: it stores it); ``schema`` False: the
    rules the schema cannot say only (the schema check costs ~60 ms a slice of 26 devices)."""
    errs = (
        []
        if not schema
        else [
            f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}"[:200] for e in _validator(release).iter_errors(doc)
        ]
    )
    if errs:
        return errs
    spec = doc.get("spec") or {}
    chosen = [f for f in NODE_FIELDS if spec.get(f) not in (None, "", False)]
    if len(chosen) != 1:
        one = "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
        errs.append(f"spec: Required value: exactly one of {one} is required")
    pool = spec.get("pool") or {}
    if int(pool.get("resourceSliceCount", 0)) <= 0:
        errs.append("spec.pool.resourceSliceCount: Invalid value: must be greater than zero")
    if int(pool.get("generation", 0)) < 0:
        errs.append("spec.pool.generation: Invalid value: must be greater than or equal to zero")
    devices, counter_sets = spec.get("devices") or [], spec.get("sharedCounters") or []
    if release != "1.34" and spec.get("devices") is not None and spec.get("sharedCounters") is not None:
        errs.append('spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed')
    dense = any(
        d.get("taints")
        or d.get("consumesCounters")
        or any(k in LISTS for a in (d.get("attributes") or {}).values() for k in a)
        for d in devices
    )
    most = 64 if dense and release != "1.34" else 128
    if len(devices) > most:
        errs.append(_many("spec.devices", len(devices), most))
    names = [d.get("name") for d in devices]
    if len(set(names)) < len(names):
        errs.append("spec.devices: Duplicate value: a device name")
    sets = {str(s.get("name")): set(s.get("counters") or {}) for s in counter_sets}
    if len(sets) < len(counter_sets):
        errs.append("spec.sharedCounters: Duplicate value: a counter set name")
    for i, s in enumerate(counter_sets):
        if not DNS_LABEL.match(str(s.get("name", ""))) or not all(DNS_LABEL.match(c) for c in s.get("counters") or {}):
            errs.append(f"spec.sharedCounters[{i}]: Invalid value: names must be RFC 1123 labels")
        if release != "1.34" and len(s.get("counters") or {}) > 32:
            errs.append(_many(f"spec.sharedCounters[{i}].counters", len(s["counters"]), 32))
    if release == "1.34":
        total = sum(len(c) for c in sets.values())
        if total > 32:
            errs.append(_many("spec.sharedCounters", total, 32))
        consumed = sum(len(u.get("counters") or {}) for d in devices for u in d.get("consumesCounters") or [])
        if consumed > 1024:
            errs.append(_many("spec.devices", consumed, 1024) + " (counters consumed in the slice)")
    elif len(counter_sets) > 8:
        errs.append(_many("spec.sharedCounters", len(counter_sets), 8))
    for i, dev in enumerate(devices):
        errs += _device(dev, i, release, sets)
    return errs


def update_errors(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """The fields a ResourceSlice keeps for life."""
    errs = []
    for path in (("driver",), ("nodeName",), ("pool", "name")):
        a, b = new.get("spec") or {}, old.get("spec") or {}
        for key in path:
            a, b = (a or {}).get(key), (b or {}).get(key)
        if a != b:
            errs.append(f"spec.{'.'.join(path)}: Invalid value: field is immutable")
    return errs


def pool_problems(slices: list[dict[str, Any]], release: str) -> list[str]:
    """What the scheduler finds wrong with each pool (by driver and pool name) at its highest generation:
    incomplete, a duplicate counter set or device, a counter set or counter a device names not found."""
    pools: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for doc in slices:
        spec = doc["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    out: list[str] = []
    for (driver, name), specs in sorted(pools.items()):
        top = max(int(s["pool"]["generation"]) for s in specs)
        current = [s for s in specs if int(s["pool"]["generation"]) == top]
        want = {int(s["pool"]["resourceSliceCount"]) for s in current}
        if want != {len(current)}:
            out.append(f"pool {driver}/{name}: incomplete: {len(current)} slices of generation {top}, count {want}")
            continue
        devices = [d["name"] for s in current for d in s.get("devices") or []]
        if len(set(devices)) < len(devices):
            out.append(f"pool {driver}/{name}: duplicate device name")
        scope: list[list[dict[str, Any]]] = [current] if release != "1.34" else [[s] for s in current]
        for group in scope:
            sets: dict[str, set[str]] = {}
            for s in group:
                for cs in s.get("sharedCounters") or []:
                    if cs["name"] in sets:
                        out.append(f"pool {driver}/{name}: duplicate counter set name {cs['name']}")
                    sets[cs["name"]] = set(cs.get("counters") or {})
            for s in group:
                for d in s.get("devices") or []:
                    for u in d.get("consumesCounters") or []:
                        if u["counterSet"] not in sets:
                            out.append(f"pool {driver}/{name}: counter set {u['counterSet']} not found")
                            continue
                        for c in u.get("counters") or {}:
                            if c not in sets[u["counterSet"]]:
                                out.append(
                                    f"pool {driver}/{name}: counter {c} not found in counter set {u['counterSet']}"
                                )
    return out
