"""What the Kubernetes doors withhold or mark Unhealthy, of the health layer's look: its unusable devices,
the VFs of an unusable PF (a PF's fault takes its VFs with it, as the one exclusion predicate says), the
MIG devices' UUIDs, the quarantined devices (docs/health.md, "Remediation"). Read by the commands' look
(:func:`.cli_health.health`) and the watch's ``sick`` view (:mod:`.watched`) alike."""

from __future__ import annotations

from ..health.model import DeviceHealth
from ..host import Host


def unusable(host: Host, devices: list[DeviceHealth]) -> dict[str, str]:
    """Of the health layer's ``devices``: the unusable ones, the VFs of an unusable PF, the MIG devices'
    UUIDs, the quarantined devices (a quarantine's reason first)."""
    from .. import quarantine as qr
    from ..health import fact

    sick = _with_vfs(host, fact.unusable(devices))
    return {**sick, **fact.unusable_slices(devices), **qr.reasons(host)}


def _with_vfs(host: Host, sick: dict[str, str]) -> dict[str, str]:
    """``sick`` and the VFs of each PF in it (by its ``virtfnN`` links): ``carved from PF: why``."""
    out = dict(sick)
    for bdf, why in sick.items():
        entries = host.listdir(host.pci_device(bdf)) if host.is_dir(host.pci_device(bdf)) else []
        for name in entries:
            vf = host.link_name(host.pci_device(bdf, name)) if name.startswith("virtfn") else None
            if vf:
                out.setdefault(vf, f"carved from {bdf}: {why}")
    return out
