"""Per-tenant series: the QoS daemon's own (its status snapshot, rendered by the daemon's collector:
target and achieved share, state, preemptions, frozen seconds), its latency quantiles, and each
tenant's memory held and cap from the CUDA library's shared region."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..qos.metrics import SnapshotCollector
from .devices import FieldTable
from .snapshot import Snapshot

LATENCY_KINDS = ("detection", "enforcement", "preemption", "timer")


def qos_families(snap: Snapshot, table: FieldTable) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    up = GaugeMetricFamily("vgpukit_qos_daemon_up", "1 when the QoS daemon answered this scrape.")
    up.add_metric([], 0.0 if snap.qos is None else 1.0)
    yield up
    if snap.qos is None:
        return
    daemon = SnapshotCollector()  # the daemon's own rendering of its status, the same series
    daemon.snapshot = list(snap.qos.get("gpus", []))
    daemon.daemon = {k: snap.qos[k] for k in ("config", "demand_refused") if k in snap.qos}
    yield from daemon.collect()
    lat = GaugeMetricFamily(
        "vgpukit_qos_latency_seconds",
        "The daemon's latency quantiles since it started (detection, enforcement, preemption, timer).",
        labels=["gpu", "kind", "quantile"],
    )
    for g in daemon.snapshot:
        for kind in LATENCY_KINDS:
            summary = g.get("latency", {}).get(kind) or {}
            for q, key in (("0.5", "p50_ms"), ("0.99", "p99_ms")):
                if summary.get(key) is not None:
                    lat.add_metric([g["gpu"], kind, q], summary[key] / 1000)
    yield lat


def memory_families(snap: Snapshot, table: FieldTable) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    used = GaugeMetricFamily(
        "vgpukit_tenant_memory_used_bytes",
        "Device memory the tenant's live processes hold (CUDA library's shared region).",
        labels=["tenant", "gpu"],
    )
    cap = GaugeMetricFamily(
        "vgpukit_tenant_memory_cap_bytes", "The tenant's memory cap (0: uncapped).", labels=["tenant", "gpu"]
    )
    procs = GaugeMetricFamily(
        "vgpukit_tenant_processes", "Live processes of the tenant using the CUDA library.", labels=["tenant"]
    )
    refused = CounterMetricFamily(
        "vgpukit_tenant_memory_cap_refusals",
        "Allocation attempts the tenant's memory cap refused (CUDA library's shared region; version 1: none).",
        labels=["tenant", "gpu"],
    )
    for tenant, usage in sorted(snap.cuda.items()):
        for dev in range(max(len(usage.used), len(usage.caps))):
            used.add_metric([tenant, str(dev)], float(usage.used[dev] if dev < len(usage.used) else 0))
            cap.add_metric([tenant, str(dev)], float(usage.caps[dev] if dev < len(usage.caps) else 0))
            refused.add_metric([tenant, str(dev)], float(usage.refused[dev] if dev < len(usage.refused) else 0))
        procs.add_metric([tenant], float(usage.processes))
    yield from (used, cap, procs, refused)
