"""A stand-in for the scheduler's allocation math, enough to allocate claims against the ResourceSlices the
plugin publishes (tests only; written from KEP-5075, KEP-5004 and k8s.io/dynamic-resource-allocation's
structured allocator, as docs/kubernetes.md quotes them):

1. A device fits a request when its DeviceClass's selectors and the request's match (the CEL subset of
   tests/k8s/test_deploy.py) and every taint of the device is tolerated (effects NoSchedule, NoExecute;
   a toleration matches key and, with operator Equal, value).
2. A device without ``allowMultipleAllocations`` goes to one claim at most.
3. A device with ``allowMultipleAllocations`` goes to every claim that fits its capacities (KEP-5075):
   for each capacity of the device, the request's amount (``capacity.requests``, named with or without
   the driver's domain) is rounded up by the capacity's request policy -- ``validRange``: below ``min``
   to ``min``, else to ``min + k * step``; ``validValues``: to the first value not below it -- and an
   amount not requested is the policy's ``default``, or the whole value without a policy. The rounded
   amount must satisfy the policy (at most ``max``; on a step; one of ``validValues``) and the sum of
   every allocation's amount must stay within the capacity's value. A request for a capacity the device
   does not have does not fit. Each such allocation gets a new ``shareID`` and its ``consumedCapacity``
   (named as the slice names the capacity).
4. ``ExactCount`` requests take ``count`` devices, first fit in slice order (no scoring); counters
   (KEP-4815) are not modelled.
5. The allocation's ``config`` is the class's entries (``FromClass``, for the request) then the claim's
   (``FromClaim``), as the API server combines them.

KEP-5004 (extended resources): :func:`extended_claim` makes the claim the scheduler makes for a pod whose
containers' limits name an extended resource that a DeviceClass maps (``spec.extendedResourceName``) and
that the node does not have from a device plugin (``status.allocatable``): one request ``c<i>-e<j>`` per
container ``i`` and name ``j`` (``exactly``: the class, ``ExactCount``, the limit), annotated
``resource.kubernetes.io/extended-resource-claim``.
"""

from __future__ import annotations

import copy
import re
import uuid
from fractions import Fraction
from typing import Any

from tests.k8s.test_deploy import cel
from vgpukit.k8s.dra.devices import DRIVER

EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
_Q = re.compile(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?")
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": Fraction(1, 1000)}
_UNITS.update({"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18})


class Unallocatable(Exception):
    """No devices fit (the scheduler leaves the pod pending)."""


def q(text: str | int) -> Fraction:
    m = _Q.fullmatch(str(text))
    assert m, text
    return Fraction(m[1]) * _UNITS.get(m[2] or "", 1)


def _round(amount: Fraction, policy: dict[str, Any] | None) -> Fraction:
    if policy is None:
        return amount
    rng, values = policy.get("validRange"), policy.get("validValues")
    if rng is not None:
        lo = q(rng["min"])
        if amount < lo:
            return lo
        if "step" in rng:
            step = q(rng["step"])
            n = -(-(amount - lo) // step)
            return lo + n * step
        return amount
    if values:
        return next((q(v) for v in values if amount <= q(v)), amount)
    return amount


def _violates(amount: Fraction, policy: dict[str, Any] | None) -> bool:
    if policy is None or ("default" in policy and amount == q(policy["default"])):
        return False
    rng, values = policy.get("validRange"), policy.get("validValues")
    if rng is not None:
        if "max" in rng and amount > q(rng["max"]):
            return True
        return "step" in rng and (amount - q(rng["min"])) % q(rng["step"]) != 0
    return bool(values) and amount not in [q(v) for v in values]


def _name(request: str, capacity: dict[str, Any]) -> str | None:
    """The device's capacity a request's name means (an unqualified name is the driver's)."""
    if request in capacity:
        return request
    bare = request.removeprefix(f"{DRIVER}/")
    if bare in capacity:
        return bare
    return f"{DRIVER}/{request}" if f"{DRIVER}/{request}" in capacity else None


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


class Allocator:
    """The cluster's allocation state over one set of ResourceSlices and DeviceClasses."""

    def __init__(self, slices: list[dict[str, Any]], classes: list[dict[str, Any]]) -> None:
        self.slices = slices
        self.classes = {c["metadata"]["name"]: c for c in classes}
        self.taken: set[tuple[str, str]] = set()  # (pool, device) allocated exclusively
        self.consumed: dict[tuple[str, str], dict[str, Fraction]] = {}  # (pool, device) -> capacity -> sum

    def devices(self) -> list[tuple[str, dict[str, Any]]]:
        return [(s["spec"]["pool"]["name"], d) for s in self.slices for d in s["spec"].get("devices") or []]

    def _share(self, key: tuple[str, str], device: dict[str, Any], asked: dict[str, Any]) -> dict[str, Fraction] | None:
        """What one allocation of a multi-allocatable device consumes, None when it does not fit."""
        capacity = device.get("capacity") or {}
        wanted: dict[str, Fraction] = {}
        for name, value in asked.items():
            own = _name(name, capacity)
            if own is None:
                return None
            wanted[own] = q(value)
        used = self.consumed.get(key, {})
        out = {}
        for name, cap in capacity.items():
            policy = cap.get("requestPolicy")
            if name in wanted:
                amount = _round(wanted[name], policy)
            elif policy is not None and "default" in policy:
                amount = q(policy["default"])
            else:
                amount = q(cap["value"])
            if _violates(amount, policy) or used.get(name, 0) + amount > q(cap["value"]):
                return None
            out[name] = amount
        return out

    def allocate(self, claim: dict[str, Any], pod_uid: str | None = None) -> dict[str, Any]:
        """The claim with ``status.allocation`` (and ``reservedFor`` the pod), or :class:`Unallocatable`."""
        spec = claim["spec"]["devices"]
        results, config, shares = [], [], []
        taken: set[tuple[str, str]] = set()
        for req in spec["requests"]:
            ask = req["exactly"]
            cls = self.classes[ask["deviceClassName"]]
            selectors = [s["cel"]["expression"] for s in cls["spec"].get("selectors", []) + ask.get("selectors", [])]
            matches = [cel(x) for x in selectors]
            count = int(ask.get("count", 1))
            for _ in range(count):
                for pool, device in self.devices():
                    key = (pool, device["name"])
                    if key in self.taken or key in taken or not all(m(device) for m in matches):
                        continue
                    if not all(_tolerated(t, ask.get("tolerations", [])) for t in device.get("taints", [])):
                        continue
                    result = {"request": req["name"], "driver": DRIVER, "pool": pool, "device": device["name"]}
                    if device.get("allowMultipleAllocations"):
                        used = self._share(key, device, (ask.get("capacity") or {}).get("requests") or {})
                        if used is None:
                            continue
                        shares.append((key, used))
                        result["shareID"] = str(uuid.uuid4())
                        result["consumedCapacity"] = {k: _text(v) for k, v in used.items()}
                        self._add(key, used)  # within the claim too
                    elif ask.get("capacity"):
                        continue  # capacity requests need a multi-allocatable device
                    else:
                        taken.add(key)
                    results.append(result)
                    break
                else:
                    for key, used in shares:  # nothing of the claim stays allocated
                        self._add(key, {k: -v for k, v in used.items()})
                    raise Unallocatable(f"{claim['metadata']['name']}: request {req['name']}: no device fits")
            config += [{**c, "source": "FromClass", "requests": [req["name"]]} for c in cls["spec"].get("config", [])]
        config += [{**c, "source": "FromClaim"} for c in spec.get("config", [])]
        self.taken |= taken
        out = copy.deepcopy(claim)
        devices: dict[str, Any] = {"results": results}
        if config:
            devices["config"] = config
        out["status"] = {"allocation": {"devices": devices}}
        if pod_uid:
            out["status"]["reservedFor"] = [{"resource": "pods", "name": pod_uid, "uid": pod_uid}]
        return out

    def _add(self, key: tuple[str, str], used: dict[str, Fraction]) -> None:
        mine = self.consumed.setdefault(key, {})
        for k, v in used.items():
            mine[k] = mine.get(k, Fraction(0)) + v

    def release(self, claim: dict[str, Any]) -> None:
        """The claim's devices back (it was deleted, or deallocated)."""
        for r in claim["status"]["allocation"]["devices"]["results"]:
            key = (r["pool"], r["device"])
            if "shareID" in r:
                self._add(key, {k: -q(v) for k, v in r["consumedCapacity"].items()})
            else:
                self.taken.discard(key)


def _text(v: Fraction) -> str:
    assert v.denominator == 1, v
    return str(v.numerator)


def extended_claim(
    pod: dict[str, Any], classes: list[dict[str, Any]], allocatable: dict[str, str]
) -> dict[str, Any] | None:
    """The claim the scheduler makes for the pod's extended resources backed by DRA on a node whose
    ``status.allocatable`` is ``allocatable`` (KEP-5004), None when the node serves none of them by DRA."""
    by_name = {c["spec"]["extendedResourceName"]: c for c in classes if c["spec"].get("extendedResourceName")}
    requests, mapping = [], []
    for i, container in enumerate(pod["spec"]["containers"]):
        j = 0
        for name, amount in (container.get("resources", {}).get("limits") or {}).items():
            if name not in by_name or q(allocatable.get(name, "0")) > 0:
                continue  # not an extended resource backed by DRA, or the node's device plugin serves it
            cls = by_name[name]["metadata"]["name"]
            exactly = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": int(q(amount))}
            requests.append({"name": f"c{i}-e{j}", "exactly": exactly})
            mapping.append(
                {"containerName": container["name"], "extendedResourceName": name, "requestName": f"c{i}-e{j}"}
            )
            j += 1
    if not requests:
        return None
    meta = pod["metadata"]
    claim_meta = {
        "name": f"{meta['name']}-extended-resources",
        "namespace": meta["namespace"],
        "uid": str(uuid.uuid4()),
        "annotations": {EXTENDED_ANNOTATION: "true"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}],
    }
    pod.setdefault("status", {})["extendedResourceClaimStatus"] = {
        "resourceClaimName": claim_meta["name"],
        "requestMappings": mapping,
    }
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": claim_meta,
            "spec": {"devices": {"requests": requests}}}  # fmt: skip
