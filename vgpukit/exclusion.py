"""Which devices a plan leaves alone, and why: the one predicate every planner and config door reads.

A device is excluded when it is quarantined, or carved from a quarantined device (``vgpukit
quarantine``: :mod:`vgpukit.quarantine`; its refusal names the reason and how to release it), or when
the health layer finds it unusable (:func:`vgpukit.health.fact.unusable`; a ``vfs-missing`` PF is not:
re-creating its VFs is the repair). A command about one device raises the refusal (:func:`refusal`:
error kind ``unusable``, exit 6); a config door (``apply``, ``mig apply``, the node agent, the Ansible
module) leaves the device's sections out, plans the rest and reports the refusal per device (exit 6;
docs/health.md, "One bad device"). Every reason to leave a device alone belongs here, so every door
gets it at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import DeviceUnusable
from .host import Host
from .pci import Scan

if TYPE_CHECKING:
    from .nvml import Nvml
    from .quarantine import Quarantine


LOST = "the GPU stopped answering (NVML: GPU is lost)"  # the health layer's words for it (health.model)


def refusal(label: str, bdf: str, why: str) -> DeviceUnusable:
    """The refusal of a device the health layer finds unusable (``label``: how the area names it)."""
    return DeviceUnusable(f"{label} is unusable: {why}", device=bdf, hint=f"see: vgpukit health {bdf}")


class Exclusions:
    """The devices to leave alone on this host, read once per command (lazily: a device the health
    layer does not watch costs no NVML call and no record read). ``known``: BDF -> why, given by a
    caller that read the fact already (tests, a door that has it)."""

    def __init__(
        self,
        host: Host | None,
        nvml: Callable[[], Nvml | None] | None = None,
        scan: Scan | None = None,
        known: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.nvml = nvml
        self.scan = scan
        self._why: dict[str, str] | None = dict(known) if known is not None else None
        self._quarantined: dict[str, Quarantine] | None = None

    def quarantine(self, bdf: str) -> Quarantine | None:
        """The quarantine covering ``bdf`` (its own, or its PF's), read once per command."""
        if self.host is None:
            return None
        from . import quarantine as qr  # loaded by the commands that plan (a read needs none)

        if self._quarantined is None:
            self._quarantined = qr.load(self.host)
        return qr.covering(self._quarantined, self.host, bdf)

    def why(self, bdf: str) -> str | None:
        """Why ``bdf`` is left alone (None: it is not)."""
        q = self.quarantine(bdf)
        if q is not None:
            return q.why()
        if self._why is None:
            assert self.host is not None
            scan = self.scan = self.scan or Scan(self.host)
            from .health import scope

            if not scope.is_watched(scan, bdf):  # never unusable: read nothing more for it
                return None
            from .health import fact

            nvml = self.nvml() if self.nvml is not None else None
            self._why = fact.unusable_now(self.host, nvml, ("vfs-missing",), scan)
        return self._why.get(bdf)

    def check(self, bdf: str, label: str) -> DeviceUnusable | None:
        """The refusal for ``bdf`` when it is left alone (None: plan it): a quarantine's, else the health rule's."""
        q = self.quarantine(bdf)
        if q is not None:
            from .quarantine import refusal as quarantined

            return quarantined(q, label, "piece" if q.bdf != bdf else "")
        why = self.why(bdf)
        return None if why is None else refusal(label, bdf, why)

    def check_carved(self, bdf: str, label: str) -> DeviceUnusable | None:
        """:meth:`check` of ``bdf`` and, for a VF, of the PF it is carved from (a VF of a PF the health
        layer finds unusable goes nowhere either: the PF's fault takes its VFs with it)."""
        found = self.check(bdf, label)
        if found is not None or self.host is None:
            return found
        from .quarantine import parent_of

        pf = parent_of(self.host, bdf)
        why = self.why(pf) if pf else None
        if pf is None or why is None:
            return None
        return refusal(label, pf, f"carved from {pf}: {why}")


def skipped_doc(area: str, device: str, err: DeviceUnusable) -> dict[str, Any]:
    """One entry of a config door's ``skipped`` list (``--json``)."""
    return {"area": area, "device": device, "bdf": err.device or "", "error": err.kind, "message": err.message}


def outcome(skipped: list[DeviceUnusable]) -> DeviceUnusable:
    """What a config door ends with when it left devices alone: the first refusal (and how many more)."""
    first = skipped[0]
    more = f"; and {len(skipped) - 1} more left alone" if len(skipped) > 1 else ""
    return DeviceUnusable(f"{first.message}{more}", device=first.device, hint=first.hint)
