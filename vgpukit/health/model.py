"""The health model: events and findings in, a state and an action per device out (pure rules).

A *finding* is a condition true now (the GPU is lost, an uncorrected ECC count, the device left
sysfs, VFs configured but missing); an *event* is something that happened (an XID, an ECC error,
AER errors counted, an IOMMU group that changed). Both are classified the same way; a device's
state is the worst severity among its findings and its events of the last ``window`` seconds (an
XID is a one-shot report with no "cleared" signal: the window is how it stops counting), leaving
out the events from before the device last recovered (a lasting finding went away: the GPU
answers again after a reset, its uncorrected ECC count is back to 0, the device is back in sysfs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .xid import ACTIONS, SEVERITIES, XidTable

STATES = ("healthy", "degraded", "unusable")
EXIT_BY_STATE = {"healthy": 0, "degraded": 1, "unusable": 4}
DEFAULT_WINDOW = 600.0  # seconds an event counts toward its device's state

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
    "vfs-missing": ("unusable", "reset", "VFs configured but missing (a PF reset took them away)"),
    "iommu-group-changed": ("degraded", "drain", "its IOMMU group changed since recorded"),
    "aer-fatal": ("unusable", "reset", "PCIe AER fatal errors counted"),
    "aer-nonfatal": ("degraded", "drain", "PCIe AER non-fatal errors counted"),
    "aer-correctable": ("info", "none", "PCIe AER correctable errors counted"),
}


@dataclass(frozen=True)
class HealthEvent:
    time: float  # seconds since the epoch
    device: str  # gpuN, or the PCI address
    bdf: str
    kind: str  # "xid" or a key of KINDS
    data: int  # the XID; the count for AER; the new group for iommu-group-changed; the NVML code for error
    severity: str
    action: str
    meaning: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        what = f"XID {self.data}" if self.kind == "xid" else self.kind
        return f"{self.device} ({self.bdf}): {what}: {self.meaning} [{self.severity}, action {self.action}]"


@dataclass(frozen=True)
class DeviceHealth:
    device: str  # gpuN, or the PCI address (a VF, a vfio device)
    bdf: str
    kind: str  # gpu | vf | pci
    state: str  # healthy | degraded | unusable
    action: str
    reasons: tuple[str, ...]
    events: tuple[HealthEvent, ...]  # its recent events, oldest first
    causes: tuple[tuple[str, str], ...] = ()  # (kind, severity) of what counts against it (not in --json)

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "bdf": self.bdf,
            "kind": self.kind,
            "state": self.state,
            "action": self.action,
            "reasons": list(self.reasons),
            "events": [e.as_dict() for e in self.events],
        }


def classify(kind: str, data: int, table: XidTable) -> tuple[str, str, str]:
    """(severity, action, meaning) of an event or finding."""
    if kind == "xid":
        c = table.classify(data)
        return c.severity, c.action, c.meaning
    return KINDS.get(kind, ("degraded", "none", f"unknown event {kind}"))


def event(time: float, device: str, bdf: str, kind: str, data: int, table: XidTable) -> HealthEvent:
    severity, action, meaning = classify(kind, data, table)
    return HealthEvent(time, device, bdf, kind, data, severity, action, meaning)


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
        if now - e.time <= window:
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


def exit_code(devices: list[DeviceHealth]) -> int:
    """0 all healthy, 1 one degraded, 4 one unusable (the worst wins)."""
    return max((EXIT_BY_STATE[d.state] for d in devices), default=0)
