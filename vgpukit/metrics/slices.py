"""Who holds each device handed out whole (VF, mdev, vGPU, MIG device): the inventory's view."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .devices import FieldTable
from .snapshot import Snapshot


def holder_name(held: str) -> str:
    """The VM (or process) name of a holder as the inventory describes it (``NAME (pid N)``)."""
    return held.rsplit(" (pid ", 1)[0]


def slice_families(snap: Snapshot, table: FieldTable) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    info = GaugeMetricFamily(
        "vgpukit_slice_held",
        "1 while the device is held open (by a VM or a container), 0 while free.",
        labels=["kind", "id", "resource", "parent", "vm", "pod", "namespace", "claim", "Hostname"],
    )
    for s in snap.slices:
        vm = ",".join(sorted({holder_name(h) for h in s.holders}))
        # namespace and claim: the prepared DRA ResourceClaim's record; pod stays empty: a claim may be
        # shared by several pods and the kubelet's prepare names none (docs/metrics.md)
        labels = [s.kind, s.id, s.resource, s.parent, vm, "", s.namespace, s.claim, snap.hostname]
        info.add_metric(labels, 1.0 if s.holders else 0.0)
    yield info
