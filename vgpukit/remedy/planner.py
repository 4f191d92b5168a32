"""The remediation planner: one device's facts and a request in, typed steps (or a refusal) out.

Every rule of curing a device lives here (docs/health.md, "Remediation"):

* **quarantine / release** -- a record per device (:mod:`vgpukit.quarantine`); idempotent: quarantining a
  quarantined device again with the same reason changes nothing.
* **drain** -- quarantine with ``evict`` (the DRA driver taints the device ``NoExecute`` and the device
  plugin lists it Unhealthy: Kubernetes evicts), stop or move every VM holding a piece (``--vms``:
  ``migrate`` to ``--to URI``, ``managedsave``, ``shutdown``; ``fail`` refuses; a destroy only with
  ``--force``), ask the QoS tenants' processes to end with ``--tenants stop``, then wait until no
  holder is left (processes end on their own).
* **reset** -- refused while anything holds the device (the holders named), when the device needs
  more than a reset (the action is ``reboot`` or ``replace``: a lost GPU) and when it has no reset
  method. Takes down everything carved from it (mdevs and vGPUs, MIG instances, VFs), resets it as
  its driver wants (``vgpukit/data/remedy.yaml``), rebuilds exactly what was there (the same mdev
  UUIDs, vGPU types, VF drivers and bind records, MIG profiles at the same placements) and verifies
  the device healthy.
* **remediate** -- quarantine, drain, reset, rebuild, verify, start the drained VMs again, release: one
  journaled run. The quarantine's inverse lifts it only for a device that verifies healthy, so a
  crash or a failure at any step leaves the device as before or rebuilt, and quarantined until
  verified. A device whose action is ``reboot`` or ``replace`` is quarantined and drained and the
  escalation is reported (vgpukit never reboots a host).

Which action a device needs: NVIDIA's recovery action (NVML field 230) where the driver reports one,
else the health layer's (the XID catalog, as data): :func:`action_of`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .. import quarantine as qr
from ..data import load_yaml
from ..engine import Step
from ..errors import InUse, InvalidInput, Unsupported
from ..libvirt.connection import DEFAULT_URI
from ..mdev.steps import CreateMdev, RemoveMdev
from ..mig.steps import CreateCi, CreateGi, DestroyCi, DestroyGi
from ..sriov.steps import RestoreVfs, SetNumVfs
from ..vgpu.steps import SetVgpuType
from ..words import plural
from .domains import MigrateDomain, StartDomain, StopDomain
from .facts import DeviceFacts, Holder
from .steps import Quarantine, ResetDevice, StopTenant, VerifyHealthy, WaitFree

VMS = ("migrate", "managedsave", "shutdown", "fail")
CURABLE = ("none", "restart-app", "reset", "drain")  # a reset is worth trying; reboot / replace are not


class DrainPolicy(msgspec.Struct, frozen=True):
    vms: str = "shutdown"
    to: str | None = None  # the destination libvirt URI for --vms migrate
    uri: str = DEFAULT_URI  # where the VMs holding the device are defined
    timeout: float = 300.0
    force: bool = False
    tenants: str = "wait"  # wait for the QoS tenants' processes to end, or stop them (SIGTERM)


class Plan(msgspec.Struct):
    """What a remediation command will do (the steps) and everything its dry run shows."""

    bdf: str
    label: str
    steps: list[Step] = msgspec.field(default_factory=list)
    holders: list[Holder] = msgspec.field(default_factory=list)
    rebuild: list[str] = msgspec.field(default_factory=list)
    action: str = "none"  # what the device needs (reset, reboot...)
    source: str = ""  # where the action comes from (NVML recovery action, the health layer)
    escalate: str = ""  # reboot | replace: what the operator must do (vgpukit does not)
    method: str = ""  # how it is reset

    def as_dict(
        self,
    ) -> dict[str, Any]:  # a reshape: the report's words, null when none
        return {
            "device": self.label,
            "bdf": self.bdf,
            "action": self.action,
            "action_source": self.source,
            "escalate": self.escalate or None,
            "reset_method": self.method or None,
            "holders": msgspec.to_builtins(self.holders),
            "rebuild": list(self.rebuild),
        }


# ----------------------------------------------------------------------------- which action
def recovery_actions() -> dict[int, tuple[str, str]]:
    """NVML recovery action value -> (NVIDIA's name, the health layer's action)."""
    doc = load_yaml("remedy.yaml")
    return {int(k): (str(v["name"]), str(v["action"])) for k, v in doc["recovery-actions"].items()}


def action_of(health_action: str, reasons: tuple[str, ...], recovery: int | None) -> tuple[str, str]:
    """(action, why): NVIDIA's recovery action where the driver reports a non-zero one, else the health
    layer's (its XID catalog mapping). A reboot or replace from the health layer is never weakened."""
    known = recovery_actions()
    why = "; ".join(reasons) if reasons else "healthy"
    if recovery and recovery in known and health_action not in ("reboot", "replace"):
        name, action = known[recovery]
        return action, f"NVML recovery action {recovery} ({name}); health: {why}"
    return health_action, f"health: {why}"


def reset_method(f: DeviceFacts) -> str:
    """The first row of the data's ``resets`` matching the device: ``nvidia-smi`` or ``function``."""
    for row in load_yaml("remedy.yaml")["resets"]:
        match = row["match"]
        vendor_ok = match["vendor"] in ("*", f.vendor)
        driver_ok = match["driver"] in ("*", f.driver)
        if vendor_ok and driver_ok and (row["method"] != "nvidia-smi" or f.nvml_index is not None):
            return str(row["method"])
    return "function"


# ----------------------------------------------------------------------------- quarantine
def quarantine(f: DeviceFacts, q: qr.Quarantine, host_path: str) -> list[Step]:
    """Quarantine ``f``'s device with ``q``; nothing when it already is, for the same reason."""
    from ..engine.files import PutFile

    now = f.quarantine if f.quarantine is not None and f.quarantine.bdf == f.bdf else None
    if now is not None and (now.reason, now.evict) == (q.reason, q.evict or now.evict):
        return []
    if now is not None:  # a new reason: the record keeps when and by whom it started
        q = qr.Quarantine(
            q.bdf, q.device, q.reason, now.since, now.by, q.evict or now.evict, q.finding, q.action, now.boot_id
        )
    return [PutFile(host_path, q.render(), 0o644, what=f"quarantine {f.label}: {q.reason or 'no reason given'}")]


def release(f: DeviceFacts, host_path: str) -> list[Step]:
    from ..engine.files import PutFile

    q = f.quarantine
    if q is None:
        return []
    if q.bdf != f.bdf:
        raise InvalidInput(
            f"{f.label} is not quarantined itself: it is carved from {q.device}, which is",
            device=f.bdf,
            hint=f"release {q.device}",
        )
    return [PutFile(host_path, None, 0o644, what=f"release {f.label} (quarantined: {q.reason or 'no reason'})")]


# ----------------------------------------------------------------------------- drain
def _vms(holders: list[Holder]) -> list[str]:
    return list(dict.fromkeys(h.name for h in holders if h.kind == "vm"))


def drain_steps(f: DeviceFacts, policy: DrainPolicy, claims: tuple[str, ...]) -> tuple[list[Step], list[Step]]:
    """(the steps that move work off the device, the steps that start the stopped VMs again)."""
    if policy.vms not in VMS:
        raise InvalidInput(f"--vms must be one of {', '.join(VMS)}")
    if policy.tenants not in ("wait", "stop"):
        raise InvalidInput("--tenants must be wait or stop")
    vms = _vms(f.holders)
    if vms and policy.vms == "fail":
        raise InUse(
            f"{f.label} is held by {plural(len(vms), 'VM')}: {', '.join(vms)} (--vms fail)",
            device=f.bdf,
            hint="--vms managedsave|shutdown|migrate moves them",
        )
    if vms and policy.vms == "migrate" and not policy.to:
        raise InvalidInput("--vms migrate needs --to URI (the destination libvirt)")
    out: list[Step] = []
    again: list[Step] = []
    for vm in vms:
        if policy.vms == "migrate":
            assert policy.to is not None
            out.append(MigrateDomain(policy.uri, vm, policy.to))
            continue
        how = "managedsave" if policy.vms == "managedsave" else "shutdown"
        out.append(StopDomain(policy.uri, vm, how, policy.timeout, policy.force))
        again.append(StartDomain(policy.uri, vm, "", how))
    if policy.tenants == "stop":  # the tenants' processes are asked to end; the wait sees them go
        for t in f.carried.tenants:
            pids = tuple(h.pid for h in f.holders if h.kind == "tenant" and h.name == t.name and h.pid)
            if pids:
                out.append(StopTenant(t.gpu, t.name, pids))
    out.append(WaitFree(f.bdf, f.label, policy.timeout, claims))
    return out, again


def plan_drain(
    f: DeviceFacts, policy: DrainPolicy, q: qr.Quarantine, host_path: str, claims: tuple[str, ...] = ()
) -> Plan:
    steps, _again = drain_steps(f, policy, claims)
    plan = Plan(f.bdf, f.label, holders=list(f.holders))
    plan.steps = quarantine(f, q, host_path) + (steps if f.holders or claims else [])
    return plan


# ----------------------------------------------------------------------------- reset
def teardown(f: DeviceFacts) -> list[Step]:
    """Everything carved from the device, taken down (each step journals the inverse that rebuilds it)."""
    c = f.carried
    out: list[Step] = [RemoveMdev(m.uuid, m.parent, m.type_id) for m in c.mdevs]
    out += [SetVgpuType(v.bdf, "0") for v in c.vfs if v.vgpu_type]
    for gi in c.gis:
        out += [
            DestroyCi(f.bdf, f.label, gi.profile_id, gi.start, ci.start, ci.slices, gi.id, ci.id, ci.uuid)
            for ci in gi.cis
        ]
        out.append(DestroyGi(f.bdf, f.label, gi.profile_id, gi.profile, gi.start, gi.size, gi.id))
    if c.numvfs:
        out.append(SetNumVfs(f.bdf, 0, c.total_vfs, why=" (before the reset)", was=c.numvfs))
    return out


def rebuild(f: DeviceFacts) -> list[Step]:
    """Exactly what the device carried, made again (the same UUIDs, types, drivers, placements)."""
    c = f.carried
    out: list[Step] = []
    if c.numvfs:
        out.append(
            RestoreVfs(f.bdf, c.numvfs, c.total_vfs, tuple((v.bdf, v.driver, v.override, v.record) for v in c.vfs))
        )
    for gi in c.gis:
        out.append(CreateGi(f.bdf, f.label, gi.profile_id, gi.profile, gi.start, gi.size))
        out += [
            CreateCi(f.bdf, f.label, gi.profile_id, gi.start, ci.slices, f"{ci.slices}c.{gi.profile}", ci.start)
            for ci in gi.cis
        ]
    out += [SetVgpuType(v.bdf, str(v.vgpu_type)) for v in c.vfs if v.vgpu_type]
    out += [CreateMdev(m.parent, m.type_id, m.uuid, check_capacity=False) for m in c.mdevs]
    slices = c.mig_slices()
    moved = tuple(dict.fromkeys(t.name for t in c.tenants if t.gpu.lower() in {s[0].lower() for s in slices}))
    if moved and f.nvml_index is not None:  # new MIG UUIDs: the tenants follow their slices
        from .rekey import RekeyQos

        out.append(RekeyQos(f.bdf, f.label, f.nvml_index, slices, moved))
    return out


def _curable(f: DeviceFacts, action: str, source: str) -> None:
    if action not in CURABLE:
        raise Unsupported(
            f"{f.label} needs a {action}, which a reset does not replace ({source})",
            device=f.bdf,
            hint="vgpukit never reboots a host: quarantine and drain it (vgpukit remediate does), then reboot",
        )


def reset_steps(f: DeviceFacts) -> tuple[list[Step], str]:
    method = reset_method(f)
    if method == "function" and not f.has_reset:
        raise Unsupported(
            f"{f.label} has no reset method (the kernel offers no /sys/bus/pci/devices/{f.bdf}/reset)",
            device=f.bdf,
            hint="a reboot resets it",
        )
    step = ResetDevice(f.bdf, f.label, method, f.nvml_index if f.nvml_index is not None else -1, f.reset_methods)
    return [*teardown(f), step, *rebuild(f), VerifyHealthy(f.bdf, f.label)], method


def plan_reset(f: DeviceFacts, action: str, source: str) -> Plan:
    _curable(f, action, source)
    if f.holders:
        shown = "; ".join(h.describe() for h in f.holders[:5])
        more = f" and {plural(len(f.holders) - 5, 'more')}" if len(f.holders) > 5 else ""
        raise InUse(f"{f.label} is in use: {shown}{more}", device=f.bdf, hint=f"drain it first: vgpukit drain {f.name}")
    steps, method = reset_steps(f)
    return Plan(f.bdf, f.label, steps, [], f.carried.pieces(), action, source, method=method)


# ----------------------------------------------------------------------------- remediate
def plan_remediate(
    f: DeviceFacts,
    policy: DrainPolicy,
    q: qr.Quarantine,
    record_path: str,
    action: str,
    source: str,
    claims: tuple[str, ...] = (),
) -> Plan:
    """quarantine -> drain -> reset -> rebuild -> verify -> start the VMs again -> release, as one plan;
    for a device a reset does not cure (reboot, replace): quarantine and drain, and the escalation."""
    from ..engine.files import PutFile

    plan = Plan(f.bdf, f.label, holders=list(f.holders), action=action, source=source)
    drain, again = drain_steps(f, policy, claims)
    plan.steps = [Quarantine(f.bdf, f.label, q.render()), *drain]
    if action not in CURABLE:
        plan.escalate = action
        return plan
    reset, plan.method = reset_steps(f)
    plan.rebuild = f.carried.pieces()
    own = f.quarantine if f.quarantine is not None and f.quarantine.bdf == f.bdf else None
    if own is not None and own.by == "operator":  # an operator's "do not use" outlives the cure (health.md)
        why = own.reason or "no reason given"
        end = PutFile(
            record_path,
            own.render(),
            0o644,
            what=f"keep {f.label} quarantined (by the operator: {why}); verified: vgpukit release {f.name} ends it",
        )
    else:
        end = PutFile(record_path, None, 0o644, what=f"release {f.label} (verified)")
    plan.steps += [*reset, *again, end]
    return plan
