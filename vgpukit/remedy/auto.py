"""The remediation policy at work: one look at the host, and what the policy starts (``vgpukit remediate
--auto``, the node agent).

Each look reads every watched device's health (the record saved, as the health watcher does) and, for
a device that needs something (its action: NVML's recovery action where the driver has one, else the
health layer's), does what the policy's ``start`` says -- ``quarantine``, ``drain`` or ``remediate`` --
through the same planner and change engine as the commands, under the host lock, one device after the
other. Limits (the run history of this boot, :mod:`vgpukit.remedies`):

* a device quarantined by the operator is left alone (the operator owns it);
* a device whose escalation (reboot, replace) was raised since its quarantine is not acted on again:
  one event, one metric, never a reset loop;
* ``retries``: failed runs on a device since its quarantine before the policy stops trying;
* ``per-device`` / ``per-host``: at most that many runs in that many hours; a run refused by a limit
  is recorded once (outcome ``refused``), not at every look.

A device the policy quarantined (or a remediation left quarantined) that verifies healthy in a later
boot is released (a reboot was the cure: the escalation's answer).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from .. import quarantine as qr
from .. import remedies as history
from ..engine import Env, execute, session
from ..errors import VgpukitError
from ..remedies import Run
from ..words import plural
from .facts import DeviceFacts, read
from .planner import DrainPolicy, action_of, plan_drain, plan_remediate
from .planner import quarantine as plan_quarantine
from .policy import Policy

AUTO = "auto"


class Event(msgspec.Struct, frozen=True):
    """What a look did about one device (a Kubernetes Event where the node agent runs it)."""

    device: str
    bdf: str
    what: str  # quarantine | drain | remediate | release | limit
    outcome: str  # done | failed | refused | escalated
    action: str
    message: str
    escalate: str = ""

    def as_dict(self) -> dict[str, Any]:
        # a reshape: escalate is null when none, as remediate --json
        return {**msgspec.structs.asdict(self), "escalate": self.escalate or None}


def _recovery(env: Env, f: DeviceFacts) -> int | None:
    if f.nvml_index is None or env.nvml is None:
        return None
    try:
        return env.nvml.recovery_action(f.nvml_index)
    except VgpukitError:
        return None


def _limited(policy: Policy, runs: list[Run], bdf: str, q: qr.Quarantine | None, now: float) -> str:
    """Why the policy may not act on ``bdf`` now ('' when it may)."""
    auto = [r for r in runs if r.what == AUTO and r.outcome != "refused"]
    mine = [r for r in auto if r.bdf == bdf]
    if q is not None:
        since = [r for r in mine if r.time + r.seconds >= q.since]  # the run that quarantined it counts
        if any(r.escalate for r in since):
            return "escalated"  # said once: the operator's turn
        failed = [r for r in since if r.outcome == "failed"]
        if len(failed) > policy.retries:
            return f"{len(failed)} failed runs since its quarantine (retries: {policy.retries})"
    if len(history.since(mine, policy.per_device.hours * 3600, now)) >= policy.per_device.runs:
        return f"per-device limit: {plural(policy.per_device.runs, 'run')} in {policy.per_device.hours:g} h"
    if len(history.since(auto, policy.per_host.hours * 3600, now)) >= policy.per_host.runs:
        return f"per-host limit: {plural(policy.per_host.runs, 'run')} in {policy.per_host.hours:g} h"
    return ""


def _said(runs: list[Run], bdf: str, why: str) -> bool:
    """Whether the device's latest policy entry already says it is limited for this reason."""
    mine = [r for r in runs if r.bdf == bdf and r.what == AUTO]
    return bool(mine) and mine[-1].outcome == "refused" and mine[-1].message == why


def _act(env: Env, policy: Policy, f: DeviceFacts, what: str, action: str, source: str, finding: str) -> Event:
    drain = DrainPolicy(policy.vms, policy.to, policy.connect, policy.timeout, policy.force, policy.tenants)
    q = qr.make(env.host, f.bdf, f.name, f"{finding or action} (policy: {what})", "policy", evict=what != "quarantine")
    had = f.quarantine if f.quarantine is not None and f.quarantine.bdf == f.bdf else None
    since = had.since if had is not None else q.since  # a quarantine goes on: it keeps when it started
    q = qr.Quarantine(q.bdf, q.device, q.reason, since, q.by, q.evict, finding, action, q.boot_id)
    path = env.host.display(env.host.quarantine_record(f.bdf))
    curable = action not in ("reboot", "replace")
    if what == "remediate" or (what == "drain" and not curable):  # drain: quarantine, drain, the escalation
        plan = plan_remediate(f, drain, q, path, action, source)
    elif what == "drain":
        plan = plan_drain(f, drain, q, path)
    else:
        from .planner import Plan

        plan = Plan(f.bdf, f.label, plan_quarantine(f, q, path), list(f.holders), [], action, source)
        plan.escalate = "" if curable else action
    execute(env, plan.steps)
    if plan.escalate:
        return Event(f.name, f.bdf, what, "escalated", action, f"needs a {plan.escalate} ({source})", plan.escalate)
    return Event(f.name, f.bdf, what, "done", action, source)  # the line says "<what> done: <source>"


def _release(env: Env, f: DeviceFacts, started: float) -> Event:
    """A device the policy (or a remediation) quarantined, healthy in a later boot: released."""
    from .steps import put_quarantine

    execute(env, [put_quarantine(env.host, None, f.bdf, f"release {f.label} (healthy after a reboot)")])
    return Event(f.name, f.bdf, "release", "done", "none", "healthy in a new boot: released")


def _one(env: Env, policy: Policy, d: Any, boot: str, now: float) -> Event | None:
    """What the policy does about device ``d`` (its health), under the host lock; None: nothing."""
    runs = history.load(env.host)
    q = qr.load(env.host).get(d.bdf)
    if q is not None and q.by == "operator":
        return None  # the operator owns it
    started = time.time()
    f = read(env.host, env.nvml, d.bdf)
    if d.state == "healthy":
        if q is not None and q.boot_id and boot and q.boot_id != boot:
            return _release(env, f, started)
        return None
    action, source = action_of(d.action, d.reasons, _recovery(env, f))
    what = policy.what(action)
    if what == "none":
        return None
    why = _limited(policy, runs, d.bdf, q, now)
    if why:
        if why == "escalated" or _said(runs, d.bdf, why):
            return None
        return Event(f.name, d.bdf, what, "refused", action, why)
    return _act(env, policy, f, what, action, source, d.reasons[0] if d.reasons else "")


def look(env: Env, policy: Policy, now: float | None = None) -> list[Event]:
    """One look: every device the policy should act on, acted on (each under the host lock)."""
    from ..health import fact

    now = time.time() if now is None else now
    events: list[Event] = []
    devices = fact.current(env.host, env.nvml)  # the record saved, as the health watcher does
    quarantined = qr.load(env.host)
    boot = qr.boot_id(env.host)
    for d in devices:
        if d.kind == "vf" or (d.state == "healthy" and d.bdf not in quarantined):
            continue  # a VF is cured with its PF; a healthy device nobody quarantined needs nothing
        started = time.time()
        try:
            with session(env):  # planned and done under the host lock, an interrupted change repaired first
                ev = _one(env, policy, d, boot, now)
        except VgpukitError as err:
            ev = Event(d.device, d.bdf, "remediate", "failed", d.action, str(err)[:500])
        if ev is None:
            continue
        seconds = time.time() - started
        run = Run(started, ev.device, d.bdf, AUTO, ev.outcome, ev.action, ev.escalate, seconds, ev.message)
        history.add(env.host, run)
        events.append(ev)
    return events
