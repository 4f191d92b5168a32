"""The ``vgpukit_remediation_*`` series: quarantined devices and what remediation did this boot
(``/run/vgpukit/remedy/history.json``, :mod:`vgpukit.remedies`), read at every scrape."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from ..host import Host


def remedy_families(host: Host, hostname: str) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from .. import quarantine as qr
    from .. import remedies as history

    quarantined = GaugeMetricFamily(
        "vgpukit_remediation_quarantined",
        "1 per quarantined device (no door places work on it; evict=true: Kubernetes evicts its pods).",
        labels=["device", "bdf", "by", "evict", "Hostname"],
    )
    for q in qr.load(host).values():
        quarantined.add_metric([q.device, q.bdf, q.by, str(q.evict).lower(), hostname], 1.0)
    runs = history.load(host)
    count = CounterMetricFamily(  # counters: exposed as ..._total, reset at a reboot (Prometheus expects it)
        "vgpukit_remediation_runs",
        "Remediation runs this boot (quarantine, drain, reset, remediate, auto), by outcome.",
        labels=["device", "bdf", "what", "outcome", "Hostname"],
    )
    for (device, bdf, what, outcome), n in sorted(Counter((r.device, r.bdf, r.what, r.outcome) for r in runs).items()):
        count.add_metric([device, bdf, what, outcome, hostname], float(n))
    escalations = CounterMetricFamily(
        "vgpukit_remediation_escalations",
        "Escalations this boot: a device that needs a reboot (or a replacement) vgpukit does not do.",
        labels=["device", "bdf", "action", "Hostname"],
    )
    for (device, bdf, action), n in sorted(Counter((r.device, r.bdf, r.escalate) for r in runs if r.escalate).items()):
        escalations.add_metric([device, bdf, action, hostname], float(n))
    last = GaugeMetricFamily(
        "vgpukit_remediation_last_seconds",
        "How long the device's last remediation run took (quarantine to release for remediate).",
        labels=["device", "bdf", "what", "outcome", "Hostname"],
    )
    latest = {(r.bdf, r.what): r for r in runs}
    for (_bdf, _what), r in sorted(latest.items()):
        last.add_metric([r.device, r.bdf, r.what, r.outcome, hostname], r.seconds)
    yield from (quarantined, count, escalations, last)
