"""Quarantined devices: a persistent host fact every door reads through the planners.

A quarantine is one file per device, ``/var/lib/vgpukit/quarantine/<bdf>.json`` (through the host
door; written and removed by engine steps, so journaled like any change): who put it there, why,
since when, and whether Kubernetes should evict the device's pods (``evict``: the DRA driver's
``NoExecute`` taint, set by ``vgpukit drain``). It survives a reboot on purpose: an operator's
"do not use this device" is not lifted by a restart; ``vgpukit release`` (or a remediation that
verified the device) ends it.

What it covers: the device itself and everything carved from it (its VFs, by their ``physfn``; its
mdevs and MIG slices, whose parent is the device). The planners refuse to plan onto a covered device
(:func:`refuse`; the config doors through :mod:`vgpukit.exclusion`), with the reason, exit 6
(``unusable``). Reads are tolerant: a record that cannot be
parsed still quarantines its device (a damaged file must not release one), with a generic reason.
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

from .errors import DeviceUnusable, VgpukitError
from .host import BDF_RE, PHYSFN, Host
from .inputs import load_json

SCHEMA = "vgpukit.quarantine/v1"
BY = ("operator", "policy", "remediate")


class Quarantine(msgspec.Struct, frozen=True):
    bdf: str
    device: str  # how it was named: gpu3, nic0, the address
    reason: str
    since: float
    by: str = "operator"  # operator | policy | remediate
    evict: bool = False  # drain asked Kubernetes to evict (DRA taint NoExecute)
    finding: str = ""  # the health finding that started it (policy), e.g. "XID 95"
    action: str = ""  # what the health layer / NVML's recovery action asks for (reset, reboot...)
    boot_id: str = ""  # the boot it was set in

    def render(self) -> str:
        doc = {"schema": SCHEMA, **msgspec.to_builtins(self)}
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"

    def why(self) -> str:
        return f"quarantined: {self.reason}" if self.reason else "quarantined"


def _text(doc: dict[str, Any], key: str, limit: int = 200) -> str:
    value = doc.get(key)
    return "".join(c if c.isprintable() else "?" for c in value)[:limit] if isinstance(value, str) else ""


def parse(bdf: str, text: str | None) -> Quarantine | None:
    """The record of ``bdf`` from its file's text; None when there is no file. A file that is not a
    record still quarantines (reason "unreadable quarantine record")."""
    if text is None:
        return None
    try:
        doc = load_json(text, "quarantine record")
    except VgpukitError:
        doc = None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        return Quarantine(bdf, bdf, "unreadable quarantine record", 0.0)
    since = doc.get("since")
    by = _text(doc, "by")
    return Quarantine(
        bdf,
        _text(doc, "device") or bdf,
        _text(doc, "reason", 500),
        float(since) if isinstance(since, int | float) and not isinstance(since, bool) else 0.0,
        by if by in BY else "operator",
        doc.get("evict") is True,
        _text(doc, "finding"),
        _text(doc, "action"),
        _text(doc, "boot_id", 64),
    )


def load(host: Host) -> dict[str, Quarantine]:
    """Every quarantined device (BDF -> its record)."""
    out: dict[str, Quarantine] = {}
    directory = host.quarantine_record()
    if not host.is_dir(directory):
        return out
    for name in sorted(host.listdir(directory)):
        bdf = name[: -len(".json")] if name.endswith(".json") and not name.startswith(".") else ""
        if not BDF_RE.match(bdf):
            continue
        q = parse(bdf, host.read_raw_opt(host.quarantine_record(bdf)))
        if q is not None:
            out[bdf] = q
    return out


def parent_of(host: Host, bdf: str) -> str | None:
    """The PF a VF was carved from (its ``physfn``), else None."""
    return host.link_name(host.pci_device(bdf, PHYSFN))


def covering(found: dict[str, Quarantine], host: Host, bdf: str) -> Quarantine | None:
    """The quarantine that covers ``bdf``: its own, else its PF's (a VF is carved from a quarantined PF)."""
    if not found:
        return None
    own = found.get(bdf)
    if own is not None:
        return own
    pf = parent_of(host, bdf)
    return found.get(pf) if pf else None


def refusal(q: Quarantine, label: str, what: str = "") -> DeviceUnusable:
    """The one refusal of a quarantined device (every planner raises this one)."""
    of = f" (carved from {q.device}, quarantined)" if what == "piece" else ""
    return DeviceUnusable(
        f"{label} is {q.why()}{of}",
        device=q.bdf,
        hint=f"release it with: vgpukit release {q.device}",
    )


def refuse(host: Host, bdf: str, label: str, found: dict[str, Quarantine] | None = None) -> None:
    """Raise the quarantine refusal when ``bdf`` (or the PF it was carved from) is quarantined."""
    found = load(host) if found is None else found
    q = covering(found, host, bdf)
    if q is not None:
        raise refusal(q, label, "piece" if q.bdf != bdf else "")


def _with_vfs(host: Host, found: dict[str, Quarantine]) -> dict[str, Quarantine]:
    """``found`` and the VFs of each quarantined PF (by its ``virtfnN`` links), each with its PF's record."""
    out = dict(found)
    for bdf, q in found.items():
        entries = host.listdir(host.pci_device(bdf)) if host.is_dir(host.pci_device(bdf)) else []
        for name in entries:
            if name.startswith("virtfn"):
                vf = host.link_name(host.pci_device(bdf, name))
                if vf:
                    out.setdefault(vf, q)
    return out


def reasons(host: Host) -> dict[str, str]:
    """BDF -> "quarantined: why", of the quarantined devices and their VFs (what the Kubernetes plugins'
    health view adds: the device plugin lists them Unhealthy, the DRA driver taints them; a MIG slice, a
    vGPU or an mdev is covered by its GPU's address)."""
    return {bdf: q.why() for bdf, q in _with_vfs(host, load(host)).items()}


def evicting(host: Host) -> dict[str, str]:
    """Of :func:`reasons`, the devices whose pods Kubernetes should evict (the DRA taint's effect
    NoExecute: ``vgpukit drain``, ``remediate`` and ``quarantine --evict`` ask for it)."""
    return {bdf: q.why() for bdf, q in _with_vfs(host, load(host)).items() if q.evict}


def boot_id(host: Host) -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), '' where /proc does not say."""
    text = host.read_opt(host.proc("sys", "kernel", "random", "boot_id"))
    return text.strip()[:64] if text else ""


def make(
    host: Host,
    bdf: str,
    device: str,
    reason: str,
    by: str = "operator",
    *,
    evict: bool = False,
    finding: str = "",
    action: str = "",
    now: float | None = None,
) -> Quarantine:
    return Quarantine(
        bdf, device, reason, time.time() if now is None else now, by, evict, finding, action, boot_id(host)
    )
