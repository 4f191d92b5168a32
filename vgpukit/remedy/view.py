"""What ``vgpukit health`` and the exporter show of remediation: the quarantined devices and the runs of
this boot (:mod:`.history`), read only."""

from __future__ import annotations

import time
from typing import Any

from ..host import Host
from . import history
from . import quarantine as qr

SHOWN = 10  # the latest runs the health report lists


def section(host: Host) -> dict[str, Any]:
    """The ``remediation`` object of the ``vgpukit.health/v1`` document."""
    runs = history.load(host)
    return {
        "quarantined": [q.as_dict() for q in qr.load(host).values()],
        "runs": [r.as_dict() for r in runs[-SHOWN:]],
        "escalations": [r.as_dict() for r in runs if r.escalate][-SHOWN:],
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
