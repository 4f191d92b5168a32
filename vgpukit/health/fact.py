"""The health layer's answer as a fact other areas read (labels, the device plugin, planners)."""

from __future__ import annotations

from ..host import Host
from ..nvml.model import Nvml
from . import check, xid
from . import log as record_log
from .model import STATES, DeviceHealth


def current(host: Host, nvml: Nvml | None, *, save: bool = True) -> list[DeviceHealth]:
    """Every watched device's health now (the record updated, when ``save``, as ``vgpukit health`` does)."""
    record = record_log.load(host)
    found = check.look(host, nvml, xid.builtin(), record)
    if save:
        record_log.save(host, record)
    return found.devices


def unusable(devices: list[DeviceHealth], ignore: tuple[str, ...] = ()) -> dict[str, str]:
    """BDF -> why, of the unusable devices; ``ignore``: kinds that do not count here (re-creating
    the VFs a PF reset took away is the repair of ``vfs-missing``, not a change to refuse)."""
    return {
        d.bdf: "; ".join(d.reasons)
        for d in devices
        if any(sev == "unusable" and kind not in ignore for kind, sev in d.causes)
    }


def worst(devices: list[DeviceHealth]) -> str:
    return max((d.state for d in devices), key=STATES.index, default="healthy")
