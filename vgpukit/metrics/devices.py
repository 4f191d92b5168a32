"""The GPU series under dcgm-exporter's names and labels (the mapping is data:
``vgpukit/data/dcgm-fields.yaml``), and each watched device's health from the health layer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from ..health.model import STATES
from .snapshot import Gpu, Snapshot

MIB = 1 << 20


class Field(msgspec.Struct, frozen=True):
    name: str
    type: str  # gauge | counter
    unit: str
    source: str  # a GpuTelemetry attribute, or last_xid
    help: str


class FieldTable(msgspec.Struct, frozen=True):
    labels: tuple[str, ...]
    mig_labels: tuple[str, ...]
    fields: tuple[Field, ...]


def fields() -> FieldTable:
    """The shipped DCGM mapping (the collector loads it once: shipped data, not host state)."""
    from ..data import DATA_DIR
    from ..inputs import load_yaml

    doc = load_yaml((DATA_DIR / "dcgm-fields.yaml").read_text(), "vgpukit/data/dcgm-fields.yaml")
    return FieldTable(
        tuple(doc["labels"]),
        tuple(doc["mig_labels"]),
        tuple(Field(f["name"], f["type"], f["unit"], f["from"], f["help"]) for f in doc["fields"]),
    )


def bus_id(bdf: str) -> str:
    """dcgm-exporter's ``pci_bus_id``: an 8-digit upper-case domain (00000000:07:00.0)."""
    domain, _, rest = bdf.partition(":")
    return f"{int(domain, 16):08X}:{rest.upper()}"


def gpu_labels(snap: Snapshot, g: Gpu) -> list[str]:
    """Values of dcgm-exporter's labels: gpu, UUID, device, modelName, Hostname, pci_bus_id."""
    name = g.gpu.name
    return [str(g.gpu.index), g.gpu.uuid, f"nvidia{g.gpu.index}", name, snap.hostname, bus_id(g.gpu.bdf)]


def _last_xid(snap: Snapshot) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in snap.health:
        for e in d.events:
            if e.kind == "xid":
                out[d.bdf] = e.data  # events are oldest first: the last one stays
    return out


def dcgm_families(snap: Snapshot, table: FieldTable) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    xids = _last_xid(snap)
    for f in table.fields:
        # every DCGM field is exposed as a gauge: dcgm-exporter's counters carry no _total suffix, and
        # the exact DCGM name is what dashboards written for dcgm-exporter query (docs/metrics.md)
        fam = GaugeMetricFamily(f.name, f.help, labels=list(table.labels))
        for g in snap.gpus:
            if f.source == "last_xid":  # the health layer's record: there for a lost GPU too
                value: Any = xids.get(g.gpu.bdf, 0)
            elif g.telemetry is None:
                continue  # a lost GPU reports nothing (its health says why)
            else:
                value = getattr(g.telemetry, f.source)
            if value is not None:
                fam.add_metric(gpu_labels(snap, g), float(value))
        yield fam


def health_families(snap: Snapshot, table: FieldTable) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    fam = GaugeMetricFamily(
        "vgpukit_device_health",
        "Device health from the health layer: 0 healthy, 1 degraded, 2 unusable.",
        labels=["device", "bdf", "kind", "state", "action", "Hostname"],
    )
    for d in snap.health:
        fam.add_metric([d.device, d.bdf, d.kind, d.state, d.action, snap.hostname], float(STATES.index(d.state)))
    yield fam


def mig_families(snap: Snapshot, table: FieldTable) -> Iterator[Any]:
    """Each MIG GPU instance with dcgm-exporter's MIG labels, and the memory its profile gives it."""
    from prometheus_client.core import GaugeMetricFamily

    labels = [*table.labels, *table.mig_labels]
    info = GaugeMetricFamily("vgpukit_mig_instance_info", "1 per MIG GPU instance.", labels=[*labels, "mig_uuid"])
    mem = GaugeMetricFamily("vgpukit_mig_instance_memory_bytes", "Memory of the instance's profile.", labels=labels)
    health = GaugeMetricFamily(
        "vgpukit_mig_instance_health",
        "The MIG slice's health: 0 healthy, 1 degraded, 2 unusable (its GPU's, or worse by XIDs of its own).",
        labels=[*labels, "state"],
    )
    by_bdf = {d.bdf: d for d in snap.health}
    for g in snap.gpus:
        gpu_health = by_bdf.get(g.gpu.bdf)
        for gi in g.instances:
            lab = [*gpu_labels(snap, g), g.profiles.get(gi.profile_id, f"gi{gi.profile_id}"), str(gi.id)]
            if gpu_health is not None:
                state = gpu_health.slice_state(gi.id)
                health.add_metric([*lab, state], float(STATES.index(state)))
            for ci in gi.compute_instances or ():
                info.add_metric([*lab, ci.uuid], 1.0)
            if not gi.compute_instances:
                info.add_metric([*lab, ""], 1.0)
            mem.add_metric(lab, float(g.profile_mib.get(gi.profile_id, 0) * MIB))
    yield from (info, mem, health)
