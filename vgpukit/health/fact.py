"""The health layer's answer as a fact other areas read (labels, the device plugin, planners).

The health layer plans nothing itself: the per-area planners read :func:`unusable_now` and refuse
(``sriov.planner.plan_enable``, ``mig.migparted.build_plans``, ``mig.layout.plan_gpu``)."""

from __future__ import annotations

from ..host import Host
from ..nvml.model import Nvml
from ..pci import Scan
from . import check, xid
from .log import Keeper
from .model import STATES, DeviceHealth


def current(
    host: Host, nvml: Nvml | None, *, save: bool = True, scan: Scan | None = None, keeper: Keeper | None = None
) -> list[DeviceHealth]:
    """Every watched device's health now (the record updated, when ``save``, as ``vgpukit health`` does).
    ``scan``: the caller's PCI snapshot (what it read is not read again); ``keeper``: a long-running
    caller's (the device plugin's), which keeps the record in memory while the file cannot be written."""
    keeper = keeper or Keeper()
    record = keeper.load(host)
    found = check.look(host, nvml, xid.builtin(), record, scan=scan)
    if save:
        keeper.save(host, record)  # a failed write never stops the answer (said once: Keeper)
    return found.devices


def unusable(devices: list[DeviceHealth], ignore: tuple[str, ...] = ()) -> dict[str, str]:
    """BDF -> why, of the unusable devices; ``ignore``: kinds that do not count here (re-creating
    the VFs a PF reset took away is the repair of ``vfs-missing``, not a change to refuse)."""
    return {
        d.bdf: "; ".join(d.reasons)
        for d in devices
        if any(sev == "unusable" and kind not in ignore for kind, sev in d.causes)
    }


def unusable_slices(devices: list[DeviceHealth]) -> dict[str, str]:
    """MIG device UUID -> why, of the MIG slices unusable by events of their own (a slice of an unusable
    GPU is in :func:`unusable` by its GPU's BDF)."""
    return {uuid: "; ".join(s.reasons) for d in devices for s in d.slices if s.state == "unusable" for uuid in s.mig}


def unusable_now(
    host: Host, nvml: Nvml | None, ignore: tuple[str, ...] = (), scan: Scan | None = None
) -> dict[str, str]:
    """What the planners read: BDF -> why, of the devices unusable now (the record is not saved)."""
    return unusable(current(host, nvml, save=False, scan=scan), ignore)


def worst(devices: list[DeviceHealth]) -> str:
    return max((d.state for d in devices), key=STATES.index, default="healthy")
