"""What remediation did this boot: ``/run/vgpukit/remedy/history.json`` (the last 256 runs), and what
``vgpukit health`` and the exporter show of it with the quarantined devices (:func:`section`).

Each entry: when, which device, what ran (``quarantine``, ``drain``, ``reset``, ``remediate``, the
policy's ``auto``), its outcome (``done``, ``failed``, ``refused``, ``escalated``), the action the device
needed, an escalation (``reboot``, ``replace``: what vgpukit leaves to the operator), how long it took
and its one-line message. ``vgpukit health`` and the exporter (``vgpukit_remediation_*``) read it; the
policy's rate limits count its entries. Written through the host door (a record, like the health
layer's, not host configuration: not journaled); ``/run`` empties at boot, and so do the limits.
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

from . import quarantine as qr
from .errors import VgpukitError
from .host import Host
from .inputs import load_json

KEEP = 256
OUTCOMES = ("done", "failed", "refused", "escalated")


class Run(msgspec.Struct, frozen=True):
    time: float
    device: str
    bdf: str
    what: str
    outcome: str
    action: str = ""
    escalate: str = ""
    seconds: float = 0.0
    message: str = ""


def _path(host: Host) -> Any:
    return host.remedy_state("history.json")


def load(host: Host) -> list[Run]:
    try:
        doc = load_json(host.read_raw_opt(_path(host)) or "{}", "remediation history")
    except VgpukitError:
        return []
    runs = doc.get("runs") if isinstance(doc, dict) else None
    out = []
    for r in runs if isinstance(runs, list) else []:
        if not isinstance(r, dict):
            continue
        try:
            out.append(
                Run(
                    float(r["time"]),
                    str(r["device"]),
                    str(r["bdf"]),
                    str(r["what"]),
                    str(r["outcome"]),
                    str(r.get("action", "")),
                    str(r.get("escalate", "")),
                    float(r.get("seconds", 0.0)),
                    str(r.get("message", ""))[:500],
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


def add(host: Host, run: Run) -> None:
    runs = [*load(host), run][-KEEP:]
    host.mkdir(_path(host).parent)
    host.write_file(_path(host), json.dumps({"runs": msgspec.to_builtins(runs)}, indent=1) + "\n")


def since(runs: list[Run], seconds: float, now: float | None = None) -> list[Run]:
    now = time.time() if now is None else now
    return [r for r in runs if now - r.time <= seconds]


SHOWN = 10  # the latest runs the health report lists


def section(host: Host, only: set[str] | None = None) -> dict[str, Any]:
    """The ``remediation`` object of the ``vgpukit.health/v1`` document; ``only``: of those devices (BDFs:
    ``health gpu3`` shows gpu3's)."""
    runs = [r for r in load(host) if only is None or r.bdf in only]
    return {
        "quarantined": [msgspec.to_builtins(q) for q in qr.load(host).values() if only is None or q.bdf in only],
        "runs": msgspec.to_builtins(runs[-SHOWN:]),
        "escalations": msgspec.to_builtins([r for r in runs if r.escalate][-SHOWN:]),
    }


def lines(doc: dict[str, Any]) -> list[str]:
    """The same, for people (nothing when nothing is quarantined and nothing ran)."""
    out = []
    for q in doc["quarantined"]:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(q["since"]))
        why = q["reason"] or "no reason given"
        evict = ", evicting its pods" if q["evict"] else ""
        out.append(f"  quarantined: {q['device']} ({q['bdf']}) since {since} by {q['by']}: {why}{evict}")
    for r in doc["runs"]:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["time"]))
        esc = f", needs a {r['escalate']}" if r["escalate"] else ""
        out.append(f"  {when}  {r['what']} {r['device']}: {r['outcome']}{esc} ({r['seconds']:.1f} s)")
    return out
