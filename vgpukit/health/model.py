"""The health model: events and findings in, a state and an action per device out (pure rules).

A *finding* is a condition true now (the GPU is lost, an uncorrected ECC count, the device left
sysfs, VFs configured but missing); an *event* is something that happened (an XID, an ECC error,
AER errors counted, an IOMMU group that changed). Both are classified the same way; a device's
state is the worst severity among its findings and its events of the last ``window`` seconds (an
XID is a one-shot report with no "cleared" signal: the window is how it stops counting), leaving
out the events from before the device last recovered (a lasting finding went away: the GPU
answers again after a reset, its uncorrected ECC count is back to 0, the device is back in sysfs).

MIG slices: an XID the driver attributes to a GPU instance (``gi``) whose action is ``none`` or
``restart-app`` (what runs in the slice is at fault: :data:`SLICE_ACTIONS`) counts against that slice
only; any other XID (a reset, a drain, a reboot: 48, 79...) and every other event count against the
GPU, and so against all its slices. A slice's state is the worst of its GPU's and its own.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec.structs import replace

from ..words import plural
from .xid import ACTIONS, SEVERITIES, XidTable

STATES = ("healthy", "degraded", "unusable")
EXIT_BY_STATE = {"healthy": 0, "degraded": 1, "unusable": 4}
DEFAULT_WINDOW = 600.0  # seconds an event counts toward its device's state
SLICE_ACTIONS = ("none", "restart-app")  # an XID in a GPU instance with one of these: that slice's alone

# kind -> (severity, action, meaning) of everything but XIDs (those are vgpukit/data/xid.yaml)
KINDS: dict[str, tuple[str, str, str]] = {
    "ecc-single": ("info", "none", "corrected (single-bit) ECC error"),
    "ecc-double": ("unusable", "reset", "uncorrected (double-bit) ECC error"),
    "ecc-uncorrected": ("unusable", "reset", "uncorrected ECC errors counted since the last reset"),
    "lost": ("unusable", "reboot", "the GPU stopped answering (NVML: GPU is lost)"),
    "error": ("degraded", "none", "NVML failed on this GPU"),
    "clock": ("info", "none", "clocks changed (throttling)"),
    "power-source": ("info", "none", "power source changed"),
    "pci-gone": ("unusable", "reboot", "the device left sysfs"),
    "vfs-missing": ("degraded", "recreate-vfs", "VFs configured but missing (a PF reset took them away)"),
    "vf-missing": ("unusable", "recreate-vfs", "gone with its PF's other VFs (configured but missing)"),
    "vfs-removed": ("info", "none", "VFs removed on purpose (SR-IOV disabled or the VF count changed)"),
    "iommu-group-changed": ("degraded", "drain", "its IOMMU group changed since recorded"),
    "aer-fatal": ("unusable", "reset", "PCIe AER fatal errors counted"),
    "aer-nonfatal": ("degraded", "drain", "PCIe AER non-fatal errors counted"),
    "aer-correctable": ("info", "none", "PCIe AER correctable errors counted"),
}


VF_COUNTS = ("vfs-missing", "vfs-removed")  # events of a PF whose data is how many of its VFs went


class HealthEvent(msgspec.Struct, frozen=True, omit_defaults=True):  # gi left out when -1 (none)
    time: float  # seconds since the epoch
    device: str  # gpuN, or the PCI address
    bdf: str
    kind: str  # "xid" or a key of KINDS
    # the XID; the count for AER; the new group for iommu-group-changed; the NVML code for error; how many
    # VFs went for vfs-missing and vfs-removed (an event of their PF)
    data: int
    severity: str
    action: str
    meaning: str
    gi: int = -1  # the GPU instance (MIG slice) the driver attributed it to; -1: none

    def line(self) -> str:
        what = f"XID {self.data}" if self.kind == "xid" else self.kind
        if self.kind in VF_COUNTS:  # one event for a PF's VFs that went: how many
            what += f" ({plural(self.data, 'VF')})"
        where = f"{self.device} GI {self.gi}" if self.gi >= 0 else self.device
        return f"{where} ({self.bdf}): {what}: {self.meaning} [{self.severity}, action {self.action}]"

    @property
    def slice_scoped(self) -> bool:
        """Counts against its MIG slice only (docs/health.md, "MIG slices")."""
        return self.kind == "xid" and self.gi >= 0 and self.action in SLICE_ACTIONS


class SliceHealth(msgspec.Struct, frozen=True):
    """A MIG slice (GPU instance ``gi``) of a GPU with events of its own: the worst of the GPU's state
    and its own events. ``mig``: the MIG device UUIDs of its compute instances (empty if unknown)."""

    gi: int
    state: str
    action: str
    reasons: tuple[str, ...]
    mig: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:  # a reshape: mig is not shown
        return {"gi": self.gi, "state": self.state, "action": self.action, "reasons": list(self.reasons)}


class DeviceHealth(msgspec.Struct, frozen=True):
    device: str  # gpuN, or the PCI address (a VF, a vfio device)
    bdf: str
    kind: str  # gpu | vf | pci
    state: str  # healthy | degraded | unusable
    action: str
    reasons: tuple[str, ...]
    events: tuple[HealthEvent, ...]  # its recent events, oldest first
    causes: tuple[tuple[str, str], ...] = ()  # (kind, severity) of what counts against it (not in --json)
    slices: tuple[SliceHealth, ...] = ()  # its MIG slices with events of their own
    repair: str = ""  # the command that repairs it, where vgpukit has one (missing VFs: sriov enable)

    def as_dict(self) -> dict[str, Any]:  # a reshape: reasons and events as lists, slices and repair only when any
        d: dict[str, Any] = {
            "device": self.device,
            "bdf": self.bdf,
            "kind": self.kind,
            "state": self.state,
            "action": self.action,
            "reasons": list(self.reasons),
            "events": msgspec.to_builtins(self.events),
        }
        if self.slices:
            d["slices"] = [s.as_dict() for s in self.slices]
        if self.repair:
            d["repair"] = self.repair
        return d

    def slice_state(self, gi: int) -> str:
        """The state of its MIG slice ``gi`` (its GPU's, when the slice has no events of its own)."""
        return next((s.state for s in self.slices if s.gi == gi), self.state)


def classify(kind: str, data: int, table: XidTable) -> tuple[str, str, str]:
    """(severity, action, meaning) of an event or finding."""
    if kind == "xid":
        c = table.classify(data)
        return c.severity, c.action, c.meaning
    return KINDS.get(kind, ("degraded", "none", f"unknown event {kind}"))


def event(time: float, device: str, bdf: str, kind: str, data: int, table: XidTable, gi: int = -1) -> HealthEvent:
    severity, action, meaning = classify(kind, data, table)
    return HealthEvent(time, device, bdf, kind, data, severity, action, meaning, gi)


def _rank(severity: str, action: str) -> tuple[int, int]:
    return SEVERITIES.index(severity), ACTIONS.index(action)


def summarize(
    device: str,
    bdf: str,
    kind: str,
    findings: list[tuple[str, int]],
    events: list[HealthEvent],
    table: XidTable,
    now: float,
    window: float = DEFAULT_WINDOW,
    counted: list[HealthEvent] | None = None,
) -> DeviceHealth:
    """The device's health from what is true now (``findings``: (kind, data)) and its events:
    those of ``counted`` (default: all; the events since the device last recovered) newer than
    ``window`` seconds count toward the state."""
    weighed = [classify(f_kind, f_data, table) for f_kind, f_data in findings]
    kinds = [f_kind for f_kind, _ in findings]
    for e in events if counted is None else counted:
        if now - e.time <= window and not e.slice_scoped:  # a slice's own: summarize_slices
            what = f"XID {e.data}: {e.meaning}" if e.kind == "xid" else e.meaning
            weighed.append((e.severity, e.action, what))
            kinds.append(e.kind)
    causes = tuple(dict.fromkeys((k, c[0]) for k, c in zip(kinds, weighed, strict=True) if c[0] != "info"))
    bad = [c for c in weighed if c[0] != "info"]
    if not bad:
        return DeviceHealth(device, bdf, kind, "healthy", "none", (), tuple(events))
    worst = max(bad, key=lambda c: _rank(c[0], c[1]))
    reasons = tuple(dict.fromkeys(c[2] for c in sorted(bad, key=lambda c: _rank(c[0], c[1]), reverse=True)))
    state = "unusable" if worst[0] == "unusable" else "degraded"
    return DeviceHealth(device, bdf, kind, state, worst[1], reasons, tuple(events), causes)


def summarize_slices(
    gpu: DeviceHealth, counted: list[HealthEvent], now: float, window: float, mig: dict[int, tuple[str, ...]]
) -> DeviceHealth:
    """``gpu`` with its slices that have events of their own (of ``counted``, newer than ``window``);
    ``mig``: GPU instance -> its MIG device UUIDs."""
    own: dict[int, list[HealthEvent]] = {}
    for e in counted:
        if e.slice_scoped and now - e.time <= window:
            own.setdefault(e.gi, []).append(e)
    slices = []
    for gi, evs in sorted(own.items()):
        weighed = [(e.severity, e.action, f"XID {e.data}: {e.meaning}") for e in evs]
        if gpu.state != "healthy":
            weighed.append((gpu.state, gpu.action, f"its GPU is {gpu.state}"))
        bad = [c for c in weighed if c[0] != "info"]
        if not bad:
            slices.append(SliceHealth(gi, "healthy", "none", (), mig.get(gi, ())))
            continue
        worst = max(bad, key=lambda c: _rank(c[0], c[1]))
        reasons = tuple(dict.fromkeys(c[2] for c in sorted(bad, key=lambda c: _rank(c[0], c[1]), reverse=True)))
        state = "unusable" if worst[0] == "unusable" else "degraded"
        slices.append(SliceHealth(gi, state, worst[1], reasons, mig.get(gi, ())))
    return replace(gpu, slices=tuple(slices)) if slices else gpu


def exit_code(devices: list[DeviceHealth]) -> int:
    """0 all healthy, 1 one degraded, 4 one unusable (the worst wins)."""
    return max((EXIT_BY_STATE[s] for d in devices for s in (d.state, *(x.state for x in d.slices))), default=0)
