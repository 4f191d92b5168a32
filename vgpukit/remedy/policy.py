"""The remediation policy: which findings start what, how VMs are drained, how often it may act.

It is a section of the host config (``vgpukit.host/v1``, ``configs.NAME.remediation``): ``apply`` (and
so Ansible and the node agent) writes it to ``/etc/vgpukit/remediation.yaml`` (a journaled file step,
like the QoS config), which the long-running runner reads (:mod:`.auto`: the node agent, or
``vgpukit remediate --auto``). Keys (all optional; the defaults below)::

    remediation:
      start:                 # what a device's action starts: remediate | drain | quarantine | none
        reset: remediate     #   (the action: NVML's recovery action where the driver has one, else the
        drain: drain         #    health layer's, from the XID catalog)
        reboot: drain        # a reboot or a replacement is never done: the device is quarantined and
        replace: drain       # drained and the escalation is an event and a metric
      vms: shutdown          # migrate | managedsave | shutdown | fail
      to: qemu+ssh://other/system   # the destination of --vms migrate
      connect: qemu:///system
      timeout: 300           # seconds for VMs to stop and holders to go
      force: false           # destroy a VM that ignores the shutdown
      tenants: wait          # QoS tenants' processes: wait for them to end, or stop them (SIGTERM)
      retries: 1             # a failed remediation of one device is tried again this many times
      per-device: {runs: 3, hours: 24}   # at most 3 runs on one device in 24 hours
      per-host: {runs: 6, hours: 1}      # at most 6 runs on the host in an hour
      interval: 30           # seconds between two looks (the runner)
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..engine import Step
from ..engine.files import PutFile
from ..errors import InvalidInput, VgpukitError
from ..host import Host
from ..inputs import load_yaml

WHAT = ("remediate", "drain", "quarantine", "none")
ACTIONS = ("reset", "drain", "reboot", "replace")
DEFAULT_START = {"reset": "remediate", "drain": "drain", "reboot": "drain", "replace": "drain"}
MAX_BYTES = 64 * 1024


class Rate(msgspec.Struct, frozen=True):
    runs: int
    hours: float


class Policy(msgspec.Struct, frozen=True):
    start: dict[str, str] = msgspec.field(default_factory=lambda: dict(DEFAULT_START))
    vms: str = "shutdown"
    to: str | None = None
    connect: str = "qemu:///system"
    timeout: float = 300.0
    force: bool = False
    tenants: str = "wait"
    retries: int = 1
    per_device: Rate = Rate(3, 24.0)
    per_host: Rate = Rate(6, 1.0)
    interval: float = 30.0

    def what(self, action: str) -> str:
        """What a device needing ``action`` gets (an action the policy does not name: nothing)."""
        return self.start.get(action, "none")

    def to_dict(self) -> dict[str, Any]:  # a reshape: the policy file's words (per-device, per-host)
        doc: dict[str, Any] = {
            "start": dict(self.start),
            "vms": self.vms,
            "connect": self.connect,
            "timeout": self.timeout,
            "force": self.force,
            "tenants": self.tenants,
            "retries": self.retries,
            "per-device": {"runs": self.per_device.runs, "hours": self.per_device.hours},
            "per-host": {"runs": self.per_host.runs, "hours": self.per_host.hours},
            "interval": self.interval,
        }
        if self.to:
            doc["to"] = self.to
        return doc


def _num(doc: dict[str, Any], key: str, lo: float, hi: float, default: float, integer: bool = False) -> Any:
    value = doc.get(key, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not lo <= value <= hi:
        raise InvalidInput(f"remediation: {key} must be {'an integer' if integer else 'a number'} {lo:g}..{hi:g}")
    return value


def _rate(doc: dict[str, Any], key: str, default: Rate) -> Rate:
    raw = doc.get(key)
    if raw is None:
        return default
    if not isinstance(raw, dict) or set(raw) - {"runs", "hours"}:
        raise InvalidInput(f"remediation: {key} takes runs and hours")
    return Rate(_num(raw, "runs", 0, 1000, default.runs, True), _num(raw, "hours", 0.01, 8760, default.hours))


def from_dict(doc: Any) -> Policy:
    """A policy from its document (the host config's section, or the file apply wrote); refused with one
    line naming the key, never quoting the value."""
    if not isinstance(doc, dict):
        raise InvalidInput("remediation must be a mapping")
    known = {"start", "vms", "to", "connect", "timeout", "force", "tenants", "retries", "per-device", "per-host",
             "interval"}  # fmt: skip
    if set(doc) - known:
        raise InvalidInput(f"remediation: unknown key (allowed: {', '.join(sorted(known))})")
    start = dict(DEFAULT_START)
    raw = doc.get("start", {})
    if not isinstance(raw, dict) or set(raw) - set(ACTIONS):
        raise InvalidInput(f"remediation: start takes {', '.join(ACTIONS)}")
    for action, what in raw.items():
        if what not in WHAT:
            raise InvalidInput(f"remediation: start.{action} must be one of {', '.join(WHAT)}")
        if action in ("reboot", "replace") and what == "remediate":
            raise InvalidInput(f"remediation: start.{action} cannot be remediate: a reset does not cure it (drain)")
        start[action] = what
    vms = doc.get("vms", "shutdown")
    if vms not in ("migrate", "managedsave", "shutdown", "fail"):
        raise InvalidInput("remediation: vms must be one of migrate, managedsave, shutdown, fail")
    for key in ("to", "connect"):
        if key in doc and (not isinstance(doc[key], str) or not doc[key] or len(doc[key]) > 1024):
            raise InvalidInput(f"remediation: {key} must be a libvirt URI")
    if vms == "migrate" and not doc.get("to"):
        raise InvalidInput("remediation: vms migrate needs to (the destination libvirt URI)")
    force = doc.get("force", False)
    if not isinstance(force, bool):
        raise InvalidInput("remediation: force must be true or false")
    tenants = doc.get("tenants", "wait")
    if tenants not in ("wait", "stop"):
        raise InvalidInput("remediation: tenants must be wait or stop")
    return Policy(
        start,
        vms,
        doc.get("to"),
        doc.get("connect", "qemu:///system"),
        float(_num(doc, "timeout", 0, 86400, 300.0)),
        force,
        tenants,
        _num(doc, "retries", 0, 10, 1, True),
        _rate(doc, "per-device", Rate(3, 24.0)),
        _rate(doc, "per-host", Rate(6, 1.0)),
        float(_num(doc, "interval", 1, 86400, 30.0)),
    )


def path(host: Host) -> Any:
    return host.config_dir("remediation.yaml")


def load(host: Host) -> Policy | None:
    """The policy apply installed (``/etc/vgpukit/remediation.yaml``); None without one."""
    text = host.read_doc(path(host), "remediation policy", MAX_BYTES, missing_ok=True)
    if text is None:
        return None
    return from_dict(load_yaml(text, host.display(path(host))))


def plan_config(host: Host, doc: Any) -> list[Step]:
    """The step that installs the policy ``doc`` (none when the file already says the same)."""
    import yaml

    want = from_dict(doc)
    try:
        have = load(host)
    except VgpukitError:  # a damaged file is replaced
        have = None
    if have == want:
        return []
    shown = host.display(path(host))
    text = yaml.safe_dump(want.to_dict(), sort_keys=False)
    return [PutFile(shown, text, 0o644, what=f"write the remediation policy {shown}")]
