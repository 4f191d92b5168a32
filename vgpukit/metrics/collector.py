"""The prometheus-client collector: every scrape takes a fresh :class:`~.snapshot.Snapshot` and
renders it (no state kept between scrapes, no background thread)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import VgpukitError
from ..host import Host
from ..nvml.model import Nvml
from . import devices, slices, tenants
from .snapshot import take


class HostCollector:
    """Host state is read at every scrape; the shipped tables (DCGM mapping, XID table) once."""

    def __init__(self, host: Host, nvml: Callable[[], Nvml | None], model: Any = None) -> None:
        from ..health import xid

        self.host = host
        self.nvml = nvml  # the composition's lazy NVML handle (opened on the first scrape)
        self.model = model  # the watch's host model (devices, health), or None: everything read per scrape
        self.fields = devices.fields()
        self.xids = xid.builtin()

    def describe(self) -> list[Any]:
        return []  # registering does not scrape the host

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        start = time.perf_counter()
        cpu = time.process_time()
        snap = take(self.host, self.nvml(), self.xids, self.model)
        out: list[Any] = []
        for families in (
            devices.dcgm_families,
            devices.mig_families,
            devices.health_families,
            tenants.qos_families,
            tenants.memory_families,
            slices.slice_families,
        ):
            out.extend(families(snap, self.fields))
        try:
            from .remedy import remedy_families

            out.extend(remedy_families(self.host, snap.hostname))
        except VgpukitError:
            snap.errors["remediation"] = 1
        errors = GaugeMetricFamily(
            "vgpukit_exporter_source_errors", "1 when a source could not be read this scrape.", labels=["source"]
        )
        for source, n in sorted(snap.errors.items()):
            errors.add_metric([source], float(n))
        took = GaugeMetricFamily("vgpukit_exporter_scrape_seconds", "Wall time of this scrape's reads.")
        took.add_metric([], time.perf_counter() - start)
        cpu_fam = GaugeMetricFamily("vgpukit_exporter_scrape_cpu_seconds", "CPU time of this scrape's reads.")
        cpu_fam.add_metric([], time.process_time() - cpu)
        yield from out
        yield from (errors, took, cpu_fam)


def text(collector: HostCollector) -> str:
    """One scrape in the text exposition format."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return bytes(generate_latest(registry)).decode()
