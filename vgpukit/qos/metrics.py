"""Prometheus metrics (``vgpukit qos daemon --metrics-port N``), labelled by gpu, tenant, class.

Per-tenant gauges and counters come from a status snapshot the daemon refreshes every 250 ms (the
HTTP server runs in its own thread and never touches live scheduler state); latency histograms are
observed as events happen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..metrics_server import MetricsServer

LABELS = ["gpu", "tenant", "class"]
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
STATES = ("running", "frozen", "idle")


class SnapshotCollector:
    def __init__(self) -> None:
        self.snapshot: list[dict[str, Any]] = []
        self.daemon: dict[str, Any] = {}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        target = GaugeMetricFamily("vgpukit_qos_target_share_ratio", "Configured share (0-1).", labels=LABELS)
        achieved = GaugeMetricFamily(
            "vgpukit_qos_achieved_share_ratio",
            "Device time held over the window (0-1).",
            labels=[*LABELS, "window"],
        )
        state = GaugeMetricFamily("vgpukit_qos_tenant_state", "1 for the tenant's state.", labels=[*LABELS, "state"])
        preempt = CounterMetricFamily("vgpukit_qos_preemptions", "Times preempted by online work.", labels=LABELS)
        frozen = CounterMetricFamily("vgpukit_qos_frozen_seconds", "Seconds spent frozen.", labels=LABELS)
        for gpu in self.snapshot:
            for t in gpu["tenants"]:
                lab = [gpu["gpu"], t["name"], t["class"]]
                target.add_metric(lab, t["share"] / 100)
                achieved.add_metric([*lab, "1s"], t["achieved_1s"] / 100)
                achieved.add_metric([*lab, "10s"], t["achieved_10s"] / 100)
                for s in STATES:
                    state.add_metric([*lab, s], 1.0 if t["state"] == s else 0.0)
                preempt.add_metric(lab, t["preemptions"])
                frozen.add_metric(lab, t["frozen_s"])
        yield from (target, achieved, state, preempt, frozen)
        yield from self._memory()
        conf = self.daemon.get("config")
        if conf is not None:
            reloads = CounterMetricFamily(
                "vgpukit_qos_config_reloads", "Config reloads (SIGHUP or the reload op).", labels=["result"]
            )
            reloads.add_metric(["ok"], conf["reloads"])
            reloads.add_metric(["refused"], conf["reloads_refused"])
            failing = GaugeMetricFamily(
                "vgpukit_qos_config_reload_error", "1 while the last reload was refused (the previous config runs)."
            )
            failing.add_metric([], 1.0 if conf["reload_error"] else 0.0)
            yield from (reloads, failing)
        if "demand_refused" in self.daemon:
            refused = CounterMetricFamily(
                "vgpukit_qos_demand_refused", "Demand datagrams not acted on, by reason.", labels=["reason"]
            )
            for reason, n in self.daemon["demand_refused"].items():
                refused.add_metric([reason], n)
            yield refused

    def _memory(self) -> Iterator[Any]:
        """Memory QoS: where each tenant's memory is, and what the daemon did per GPU."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        where = GaugeMetricFamily(
            "vgpukit_qos_memory_bytes",
            "Tenant memory by place: device (resident), host (moved on request), suspended (checkpointed).",
            labels=[*LABELS, "place"],
        )
        rounds = CounterMetricFamily("vgpukit_qos_memory_eviction_rounds", "Eviction rounds asked.", labels=["gpu"])
        suspends = CounterMetricFamily("vgpukit_qos_memory_suspensions", "Tenants suspended.", labels=["gpu"])
        p99 = GaugeMetricFamily(
            "vgpukit_qos_memory_eviction_p99_seconds",
            "99th percentile: request written -> every process of the tenants complied.",
            labels=["gpu"],
        )
        cap = GaugeMetricFamily(
            "vgpukit_qos_memory_cap_bytes",
            "The tenant's configured memory cap (its guaranteed part), whether or not a process runs yet.",
            labels=LABELS,
        )
        burst = GaugeMetricFamily(
            "vgpukit_qos_memory_burst_bytes",
            "The offline tenant's configured burst: unified memory beyond its cap, lent back under pressure.",
            labels=LABELS,
        )
        for gpu in self.snapshot:
            for t in gpu["tenants"]:
                lab = [gpu["gpu"], t["name"], t["class"]]
                if t.get("memory"):
                    cap.add_metric(lab, t["memory"])
                if t.get("memory_burst"):
                    burst.add_metric(lab, t["memory_burst"])
        yield from (cap, burst)
        for gpu in self.snapshot:
            mem = gpu.get("memory")
            if not mem:
                continue
            for t in gpu["tenants"]:
                if "memory_state" in t:
                    lab = [gpu["gpu"], t["name"], t["class"]]
                    where.add_metric([*lab, "device"], t["memory_resident"])
                    where.add_metric([*lab, "host"], t["memory_evicted"])
                    where.add_metric([*lab, "suspended"], t["memory_suspended"])
            rounds.add_metric([gpu["gpu"]], mem.get("rounds", 0))
            suspends.add_metric([gpu["gpu"]], mem.get("suspensions", 0))
            ev = (mem.get("eviction") or {}).get("p99_ms")
            if ev is not None:
                p99.add_metric([gpu["gpu"]], ev / 1000)
        yield from (where, rounds, suspends, p99)


class Metrics:
    """An :class:`~vgpukit.qos.runtime.Observer` that exports to Prometheus."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Histogram

        self.registry = CollectorRegistry()
        self.snap = SnapshotCollector()
        self.registry.register(self.snap)
        self.h_detect = Histogram(
            "vgpukit_qos_detection_latency_seconds",
            "Tenant busy signal sent -> received by the daemon.",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.h_enforce = Histogram(
            "vgpukit_qos_enforcement_latency_seconds",
            "Duration of one freeze or thaw.",
            [*LABELS, "action"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.h_preempt = Histogram(
            "vgpukit_qos_preemption_latency_seconds",
            "Online busy signal sent -> offline tenant frozen.",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def bind(self, port: int, addr: str) -> MetricsServer:
        """The one metrics server on ``addr:port``, bound (a port in use is refused here, before the daemon
        says it is ready); :meth:`MetricsServer.serve_in_thread` answers from then on."""
        from ..metrics_server import MetricsServer

        return MetricsServer(self.registry, addr, port, hint="another QoS daemon? pick one with --metrics-port")

    def update(self, snapshot: list[dict[str, Any]], daemon: dict[str, Any] | None = None) -> None:
        self.snap.snapshot = snapshot
        if daemon is not None:
            self.snap.daemon = daemon

    def text(self) -> str:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry)).decode()

    # Observer
    def detection(self, gpu: str, tenant: str, cls: str, seconds: float) -> None:
        self.h_detect.labels(gpu, tenant, cls).observe(seconds)

    def enforcement(self, gpu: str, tenant: str, cls: str, action: str, seconds: float) -> None:
        self.h_enforce.labels(gpu, tenant, cls, action).observe(seconds)

    def preemption(self, gpu: str, tenant: str, cls: str, seconds: float) -> None:
        self.h_preempt.labels(gpu, tenant, cls).observe(seconds)
