"""Prepared ResourceClaims: a per-claim CDI spec and a durable record, written through the change engine.

``prepare`` answers the same devices again for a claim it prepared already (the record is read back);
``unprepare`` removes the spec and the record, and does nothing for a claim it does not know. The
record lives under the run directory (:meth:`vgpukit.host_layout.Layout.dra_claim_record`), so a
plugin restarted between the two still unprepares. Both files change in one journaled engine run
(host lock, rollback, ``vgpukit recover``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...cdi import spec as cdi
from ...cdi_settings import load_settings
from ...engine import execute
from ...engine.env import Env
from ...engine.files import PutFile
from ...errors import HostIOError, InvalidInput, NotFound, VgpukitError
from . import ondemand
from .devices import DRIVER, DraDevice

CLAIM_CLASS = "claim"  # CDI kind vgpukit.io/claim
REFUSED_CONFIG = (
    "opaque driver configuration (MPS, time-slicing, QoS shares) is not implemented yet by {driver}: "
    "the claim asks for it"
)


@dataclass(frozen=True)
class Result:
    """One allocated device of a claim, as the scheduler wrote it in ``status.allocation``."""

    request: str
    pool: str
    device: str


@dataclass(frozen=True)
class Prepared:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def results_of(claim: Any, pool: str) -> list[Result]:
    """This driver's results in a ResourceClaim (the API object as a dict); refuses what phase 1 cannot
    do. A claim of another shape than the API's is refused as one with no device of this driver."""
    devices = _map(_map(_map(_map(claim).get("status")).get("allocation")).get("devices"))
    for cfg in _list(devices.get("config")):
        if _map(_map(cfg).get("opaque")).get("driver") == DRIVER:
            raise InvalidInput(REFUSED_CONFIG.format(driver=DRIVER))
    out = []
    for r in map(_map, _list(devices.get("results"))):
        if r.get("driver") != DRIVER:
            continue
        if r.get("pool") != pool:
            raise NotFound(f"a device of pool {str(r.get('pool'))[:64]} is not on this node (pool {pool})")
        out.append(Result(str(r.get("request", ""))[:64], pool, str(r.get("device", ""))[:64]))
    if not out:
        raise InvalidInput(f"the claim has no device of {DRIVER} allocated")
    return out


def _record(env: Env, uid: str) -> tuple[list[Prepared], list[str]] | None:
    """The devices a claim was prepared with and the VFs bound to vfio-pci for it; None when it is not
    prepared. The record is read once."""
    text = env.host.read_raw_opt(env.host.dra_claim_record(uid))
    if not isinstance(text, str):
        return None
    try:
        doc = json.loads(text)
        devices = [
            Prepared(tuple(d["requestNames"]), d["pool"], d["device"], tuple(d["cdiDeviceIDs"])) for d in doc["devices"]
        ]
        return devices, [b for b in doc.get("boundToVfio", []) if isinstance(b, str)]
    except (ValueError, KeyError, TypeError):  # not quoted: file content stays out of messages
        raise HostIOError(
            f"the record of claim {uid} is unreadable: {env.host.display(env.host.dra_claim_record(uid))}"
        ) from None


def recorded(env: Env, uid: str) -> list[Prepared] | None:
    """The devices a claim was prepared with, None when it is not prepared."""
    found = _record(env, uid)
    return None if found is None else found[0]


def _bind_steps(env: Env, bdfs: list[str], restore: bool) -> list[Any]:
    """The sriov planner's steps moving VFs to vfio-pci, or (``restore``) back where they were."""
    from ...sriov.planner import BindRequest, Facts, plan_bind

    facts = Facts(env.host, nvml=lambda: env.nvml)
    driver = None if restore else "vfio-pci"
    return [s for b in bdfs for s in plan_bind(facts, BindRequest(b, driver=driver, restore=restore, name=b))]


def prepare(
    env: Env, uid: str, ref: dict[str, str], results: list[Result], offered: dict[str, DraDevice]
) -> list[Prepared]:
    """Write the claim's CDI spec (one CDI device per allocated device) and its record; idempotent. A VF on a
    host driver is first bound to vfio-pci (the sriov planner's rules: not while in use), back at unprepare."""
    again = recorded(env, uid)
    if again is not None:
        return again
    # made on demand (a MIG slice at the placement the scheduler chose): created now, see .ondemand
    made = ondemand.prepare(env, uid, [r.device for r in results if r.device not in offered])
    offered = {**offered, **made}
    missing = [r.device for r in results if r.device not in offered]
    if missing:
        raise NotFound(
            f"no device {', '.join(missing)[:200]} on this node: {DRIVER} prepares existing GPUs, MIG slices, "
            "VFs and mdevs, and MIG slices made on demand on GPUs in MIG mode"
        )
    bound = sorted({offered[r.device].device.id for r in results if offered[r.device].host_driver})
    if bound:
        execute(env, _bind_steps(env, bound, restore=False))
    try:
        return _write(env, uid, ref, results, offered, bound)
    except VgpukitError:
        if bound:
            execute(env, _bind_steps(env, bound, restore=True))
        if made:
            execute(env, ondemand.unprepare_steps(env, uid))
        raise


def _write(
    env: Env, uid: str, ref: dict[str, str], results: list[Result], offered: dict[str, DraDevice], bound: list[str]
) -> list[Prepared]:
    specs, _warnings = cdi.collect(env.host, env.nvml, settings=load_settings(env.host))
    edits = {f"{s.kind}={d.name}": d.edits + s.edits for s in specs for d in s.devices}
    spec = cdi.Spec(CLAIM_CLASS)
    by_device: dict[str, list[str]] = {}
    for r in results:
        by_device.setdefault(r.device, []).append(r.request)
    prepared = []
    for name, requests in by_device.items():
        source = offered[name].device.cdi_name or ""
        if source not in edits:
            raise NotFound(f"device {name}: no CDI entry for {source}")
        spec.devices.append(cdi.CdiDevice(f"{uid}-{name}", edits[source]))
        prepared.append(Prepared(tuple(requests), results[0].pool, name, (f"{spec.kind}={uid}-{name}",)))
    record = {
        "claim": {"uid": uid, **ref},
        "devices": [
            {"requestNames": list(p.request_names), "pool": p.pool, "device": p.device, "cdiDeviceIDs": list(p.cdi_ids)}
            for p in prepared
        ],
        "boundToVfio": bound,
    }
    host = env.host
    steps = [
        PutFile(
            host.display(host.dra_claim_cdi_spec(uid)), spec.render("json"), what=f"write the CDI spec of claim {uid}"
        ),
        PutFile(host.display(host.dra_claim_record(uid)), json.dumps(record, indent=2) + "\n", 0o600),
    ]
    execute(env, steps, derived=False)
    return prepared


def unprepare(env: Env, uid: str) -> bool:
    """Remove the claim's spec and record; False (nothing done) for a claim not prepared here."""
    found = _record(env, uid)
    made = ondemand.unprepare_steps(env, uid)  # what was made on demand for it (also without a claim record)
    if found is None:
        if made:
            execute(env, made)
        return bool(made)
    host, bound = env.host, found[1]
    steps = [
        *made,
        *_bind_steps(env, bound, restore=True),
        PutFile(host.display(host.dra_claim_cdi_spec(uid)), None),
        PutFile(host.display(host.dra_claim_record(uid)), None),
    ]
    execute(env, steps, derived=bool(bound) or bool(made))  # a VF moved back, a slice gone: the host's CDI specs
    return True
