"""Prepared ResourceClaims: a per-claim CDI spec and a durable record, written through the change engine.

``prepare`` answers the same devices again for a claim it prepared already (the record is read back);
``unprepare`` removes the spec and the record, and does nothing for a claim it does not know. The
record lives under the run directory (:meth:`vgpukit.host.Host.dra_claim_record`), so a
plugin restarted between the two still unprepares.

Crash safety: a prepare is up to three journaled engine runs (host lock, rollback on failure, repair of
a killed run by the next command):

1. what is **made on demand** for the claim (a MIG slice at the scheduler's placement, a vGPU:
   :mod:`.ondemand`), its *made record* written before it in the same run; no run when every device
   of the claim exists already;
2. the **intent**: the record, in state ``preparing`` (the allocation and every host change about to
   be made, e.g. the VFs moved to vfio-pci), written *first*, then the host changes themselves;
3. the claim's sharing, its CDI spec (its edits are read from the host as it is after run 2) and the
   record, in state ``prepared``.

A kill -9 inside a run is rolled back by the next command (the record with it). A kill after run 1
leaves a made record and no claim record: the retried prepare keeps what was made, and an unprepare
(or a refused prepare) destroys it. A kill between runs 2 and 3 leaves a ``preparing`` record naming
every change made, so the kubelet's retried prepare finishes it and an unprepare undoes exactly it.
Nothing the plugin did is ever unrecorded.

A request's opaque configuration (:mod:`.config`) shares its device: :mod:`.sharing` plans the steps
(QoS tenant, MPS daemon) and the container edits, which run in run 3 with the spec and the record,
and the record's ``sharing`` lists what they made for unprepare. A share of a device shared by capacity
(the result's ``shareID`` and ``consumedCapacity``, kept in the record) is planned the same way by
:mod:`.shares`: its QoS tenant and memory cap, the shareID answered with the device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ...cdi import spec as cdi
from ...cdi.nvidia import Edits
from ...cdi_settings import Settings, load_settings
from ...engine import execute, session
from ...engine.env import Env
from ...engine.files import PutFile
from ...errors import HostIOError, InvalidInput, NotFound, VgpukitError
from . import metadata, ondemand, shares, sharing
from .config import Sharing, configs
from .devices import DRIVER, DraDevice, named_function

CLAIM_CLASS = "claim"  # CDI kind vgpukit.io/claim
PREPARING, PREPARED = "preparing", "prepared"


class Result(msgspec.Struct, frozen=True):
    """One allocated device of a claim, as the scheduler wrote it in ``status.allocation``."""

    request: str
    pool: str
    device: str
    sharing: Sharing = msgspec.field(default_factory=Sharing)  # the request's opaque configuration (:mod:`.config`)
    pods: tuple[str, ...] = ()  # UIDs of the pods the claim is reserved for (status.reservedFor)
    share_id: str = ""  # a share of a device shared by capacity: the allocation's shareID (:mod:`.shares`)
    consumed: tuple[tuple[str, str], ...] = ()  # ... and its consumedCapacity (name, quantity)


class Prepared(msgspec.Struct, frozen=True):
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str = ""
    function: str = ""  # the PCI function whose health is the device's (a MIG slice's GPU): .lost


@dataclass
class ClaimRecord:
    """What the plugin did for a claim, as its record file (:meth:`vgpukit.host.Host.dra_claim_record`) holds it."""

    claim: dict[str, str]
    state: str
    results: list[Result]
    bound: list[str] = field(default_factory=list)  # VFs moved to vfio-pci for the claim
    devices: list[Prepared] = field(default_factory=list)  # the answer, once prepared
    sharing: list[Any] = field(default_factory=list)  # what the claim's sharing made (:mod:`.sharing`)

    def render(self) -> str:
        doc: dict[str, Any] = {
            "claim": self.claim,
            "state": self.state,
            "results": [shares.result_doc(r) for r in self.results],
            "devices": [
                {
                    "requestNames": list(p.request_names),
                    "pool": p.pool,
                    "device": p.device,
                    "cdiDeviceIDs": list(p.cdi_ids),
                    **({"shareID": p.share_id} if p.share_id else {}),
                    **({"function": p.function} if p.function else {}),
                }
                for p in self.devices
            ],
            "boundToVfio": self.bound,
            "sharing": self.sharing,
        }
        return json.dumps(doc, indent=2) + "\n"


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def results_of(claim: Any, pool: str) -> list[Result]:
    """This driver's results in a ResourceClaim (the API object as a dict), each with its request's sharing
    configuration. A claim of another shape than the API's is refused as one with no device of this driver."""
    status = _map(_map(claim).get("status"))
    devices = _map(_map(status.get("allocation")).get("devices"))
    found = configs(devices.get("config"), DRIVER)
    reserved = map(_map, _list(status.get("reservedFor")))
    pods = tuple(str(r["uid"])[:64] for r in reserved if r.get("resource") == "pods" and r.get("uid"))
    out = []
    for r in map(_map, _list(devices.get("results"))):
        if r.get("driver") != DRIVER:
            continue
        if r.get("pool") != pool:
            raise NotFound(f"a device of pool {str(r.get('pool'))[:64]} is not on this node (pool {pool})")
        request = str(r.get("request", ""))[:64]
        share_id, consumed = shares.allocated(r)
        out.append(
            Result(request, pool, str(r.get("device", ""))[:64], found.for_request(request), pods, share_id, consumed)
        )
    if not out:
        raise InvalidInput(f"the claim has no device of {DRIVER} allocated")
    return out


def read_record(env: Env, uid: str) -> ClaimRecord | None:
    """The claim's record, None when the plugin never prepared it (or it was unprepared). A record written
    before records had a ``state`` is a prepared one."""
    path = env.host.dra_claim_record(uid)
    text = env.host.read_raw_opt(path)
    if not isinstance(text, str):
        return None
    try:
        doc = json.loads(text)
        devices = [
            Prepared(
                tuple(d["requestNames"]),
                d["pool"],
                d["device"],
                tuple(d["cdiDeviceIDs"]),
                d.get("shareID", ""),
                str(d.get("function", "")),
            )
            for d in doc.get("devices", [])
        ]
        results = [Result(r["request"], r["pool"], r["device"], **shares.recorded(r)) for r in doc.get("results", [])]
        state = doc.get("state", PREPARED)
        if state not in (PREPARING, PREPARED):
            raise ValueError(state)
        claim = {str(k): str(v) for k, v in doc.get("claim", {}).items()}
        bound = [b for b in doc.get("boundToVfio", []) if isinstance(b, str)]
        return ClaimRecord(claim, state, results, bound, devices, _list(doc.get("sharing", [])))
    except (ValueError, KeyError, TypeError, AttributeError):  # not quoted: file content stays out of messages
        raise HostIOError(f"the record of claim {uid} is unreadable: {env.host.display(path)}") from None


def recorded(env: Env, uid: str) -> list[Prepared] | None:
    """The devices a claim was prepared with, None when it is not (or not wholly) prepared. Under the host
    lock, an interrupted run repaired first (a killed run's record is not the host's truth)."""
    with session(env):
        found = read_record(env, uid)
    return found.devices if found is not None and found.state == PREPARED else None


def _bind_steps(env: Env, bdfs: list[str], restore: bool) -> list[Any]:
    """The sriov planner's steps moving VFs to vfio-pci, or (``restore``) back where they were."""
    from ...sriov.planner import BindRequest, Facts, plan_bind

    facts = Facts(env.host, nvml=lambda: env.nvml)
    driver = None if restore else "vfio-pci"
    return [s for b in bdfs for s in plan_bind(facts, BindRequest(b, driver=driver, restore=restore, name=b))]


def _record_step(env: Env, record: ClaimRecord) -> PutFile:
    path = env.host.display(env.host.dra_claim_record(record.claim.get("uid", "")))
    return PutFile(path, record.render(), 0o600, what=f"record claim {record.claim.get('uid', '')} ({record.state})")


def prepare(
    env: Env,
    uid: str,
    ref: dict[str, str],
    results: list[Result],
    offered: dict[str, DraDevice],
    device_metadata: bool = False,
) -> list[Prepared]:
    """Prepare a claim (idempotent): the intent and the host changes (a VF on a host driver is bound to
    vfio-pci, the sriov planner's rules: not while in use), then the CDI spec (one CDI device per
    allocated device) and the record; ``device_metadata``: each request's metadata file and its CDI spec
    too (:mod:`.metadata`). A claim left ``preparing`` by a killed plugin is finished.
    The host lock is held throughout, and an interrupted run is repaired before the record is read."""
    with session(env):
        return _prepare(env, uid, ref, results, offered, device_metadata)


def _prepare(
    env: Env, uid: str, ref: dict[str, str], results: list[Result], offered: dict[str, DraDevice], meta: bool
) -> list[Prepared]:
    found = read_record(env, uid)
    if found is not None and found.state == PREPARED:
        return found.devices
    if found is None:
        refuse_unusable(env, results, offered)
    # made on demand (a MIG slice at the placement the scheduler chose, a vGPU): created now, or kept when a
    # killed prepare made it already (its own record, written in the same run: see .ondemand)
    try:
        names = [r.device for r in results if r.device not in offered]
        made = ondemand.prepare(env, uid, names, tuple(r.device for r in results if r.device in offered))
    except VgpukitError:
        if found is not None:
            _undo(env, found)
        raise
    offered = {**offered, **made}
    if found is None:
        missing = [r.device for r in results if r.device not in offered]
        if missing:
            _drop_made(env, uid)
            raise NotFound(
                f"no device {', '.join(missing)[:200]} on this node: {DRIVER} prepares existing GPUs, MIG slices, "
                "VFs and mdevs, and MIG slices and vGPUs made on demand"
            )
        bound = sorted({offered[r.device].device.id for r in results if offered[r.device].host_driver})
        found = ClaimRecord({"uid": uid, **ref}, PREPARING, list(results), bound)
        try:
            execute(env, [_record_step(env, found), *_bind_steps(env, bound, restore=False)], derived=bool(bound))
        except VgpukitError:
            _drop_made(env, uid)
            raise
    elif results:  # left preparing: the allocation as the API server has it (the record keeps no sharing)
        found.results = list(results)
    try:
        return _write(env, found, offered, meta)
    except VgpukitError:
        _undo(env, found)
        raise


def refuse_unusable(env: Env, results: list[Result], offered: dict[str, DraDevice]) -> None:
    """The health rule, as every door gives it (:mod:`vgpukit.exclusion`): a claim's device on a PCI
    function the health layer finds unusable -- a MIG slice's, a vGPU's or a VF's: its GPU or PF -- is
    refused before anything is made, with the refusal ``partition`` gives."""
    from ...exclusion import Exclusions
    from ...naming import aliases
    from ...pci import Scan

    scan = Scan(env.host)
    functions: list[str] = []
    for r in results:
        dev = offered.get(r.device)
        bdf = dev.device.topo_bdf if dev is not None else named_function(r.device)
        if bdf and scan.exists(bdf):
            pf = scan.device(bdf).physfn
            functions += [bdf, *([pf] if pf else [])]
    if not functions:
        return
    left = Exclusions(env.host, lambda: env.nvml, scan)
    names = aliases(scan)
    for bdf in dict.fromkeys(functions):
        err = left.check(bdf, f"{names[bdf]} ({bdf})" if bdf in names else bdf)
        if err is not None:
            raise err


def _drop_made(env: Env, uid: str) -> bool:
    """What was made on demand for a claim with no record (a prepare refused, or killed, before it
    recorded the claim) destroyed again; False when nothing was."""
    steps = ondemand.unprepare_steps(env, uid)
    if steps:
        execute(env, steps)
    return bool(steps)


def _write(
    env: Env, record: ClaimRecord, offered: dict[str, DraDevice], device_metadata: bool = False
) -> list[Prepared]:
    """Run 3: the claim's sharing (QoS tenant, MPS daemon), its CDI spec from the host as it is now, and the
    record marked prepared."""
    uid = record.claim["uid"]
    settings = load_settings(env.host)
    wanted = {offered[r.device].device.cdi_name or "" for r in record.results if r.device in offered}
    edits = cdi.edits_of(env.host, env.nvml, wanted, settings)  # the claim's devices only
    own = [r for r in record.results if not r.share_id]  # the claim's devices, and its shares of shared ones
    shared = sharing.plan(env, uid, own, offered, settings or Settings())  # refused: nothing done
    shared.merge(shares.plan(env, uid, record.results, offered, settings or Settings()))
    spec = cdi.Spec(CLAIM_CLASS)
    by_device: dict[tuple[str, str], list[str]] = {}
    for r in record.results:
        by_device.setdefault((r.device, r.share_id), []).append(r.request)
    prepared = []
    for (name, share_id), requests in by_device.items():
        if name not in offered:
            raise NotFound(f"device {name} is no longer on this node")
        source = offered[name].device.cdi_name or ""
        if source not in edits:
            raise NotFound(f"device {name}: no CDI entry for {source}")
        if not any(d.name == f"{uid}-{name}" for d in spec.devices):  # two shares of one device: one CDI device
            spec.devices.append(cdi.CdiDevice(f"{uid}-{name}", edits[source] + shared.edits.get(name, Edits())))
        cdi_ids = (f"{spec.kind}={uid}-{name}",)
        fn = offered[name].device.topo_bdf
        prepared.append(Prepared(tuple(requests), record.results[0].pool, name, cdi_ids, share_id, fn))
    meta: list[PutFile] = []
    if device_metadata:  # KEP-5304: what each request's devices are, for the workload (KubeVirt)
        meta, prepared = metadata.plan(env, record.claim, prepared, offered)
    done = ClaimRecord(record.claim, PREPARED, record.results, record.bound, prepared, shared.record)
    host = env.host
    steps = [
        *shared.steps,
        *meta,
        PutFile(
            host.display(host.dra_claim_cdi_spec(uid)), spec.render("json"), what=f"write the CDI spec of claim {uid}"
        ),
        _record_step(env, done),
    ]
    execute(env, steps, derived=False)
    return prepared


def _undo(env: Env, record: ClaimRecord) -> None:
    """Every change the record names put back (what its sharing made first: an MPS daemon stops before its
    MIG slice goes), what was made on demand for the claim destroyed, the spec and the record removed:
    one engine run."""
    host, uid = env.host, record.claim.get("uid", "")
    made = ondemand.unprepare_steps(env, uid)
    steps = [
        *sharing.undo(env, uid, record.sharing),
        *made,
        *_bind_steps(env, record.bound, restore=True),
        *metadata.remove_steps(env, record.claim, [r.request for r in record.results]),
        PutFile(host.display(host.dra_claim_cdi_spec(uid)), None),
        PutFile(host.display(host.dra_claim_record(uid)), None),
    ]
    execute(env, steps, derived=bool(record.bound) or bool(made))  # a VF back, a slice gone: CDI specs follow


def unprepare(env: Env, uid: str) -> bool:
    """Undo a claim, prepared or left preparing; False (nothing done) for a claim not known here."""
    with session(env):  # an interrupted run repaired first: the record read is the host's truth
        found = read_record(env, uid)
        if found is None:  # what was made on demand for it may outlive a prepare killed before its record
            return _drop_made(env, uid)
        found.claim.setdefault("uid", uid)
        _undo(env, found)
        return True
