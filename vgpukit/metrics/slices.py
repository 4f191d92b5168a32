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
        labels=["kind", "id", "resource", "parent", "vm", "pod", "namespace", "Hostname"],
    )
    for s in snap.slices:
        vm = ",".join(sorted({holder_name(h) for h in s.holders}))
        # pod and namespace: no vgpukit record names them yet (empty, as dcgm-exporter leaves them
        # without a kubelet pod-resources mapping)
        info.add_metric([s.kind, s.id, s.resource, s.parent, vm, "", "", snap.hostname], 1.0 if s.holders else 0.0)
    yield info
