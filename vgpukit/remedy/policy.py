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

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ..declared import convert
from ..engine import Step
from ..engine.files import PutFile
from ..errors import InvalidInput, VgpukitError
from ..host import Host
from ..inputs import load_yaml_located, where_in

WHAT = ("remediate", "drain", "quarantine", "none")
ACTIONS = ("reset", "drain", "reboot", "replace")
DEFAULT_START = {"reset": "remediate", "drain": "drain", "reboot": "drain", "replace": "drain"}
MAX_BYTES = 64 * 1024

# ---- the declaration of the section (the host document's schema, host.json, is generated from it)
Start = Literal["remediate", "drain", "quarantine", "none"]
Escalate = Literal["drain", "quarantine", "none"]  # a reset does not cure what needs a reboot or a new part
Uri = Annotated[str, Meta(min_length=1, max_length=1024)]


class StartDoc(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """What a device's action starts."""

    reset: Start = "remediate"
    drain: Start = "drain"
    reboot: Escalate = "drain"
    replace: Escalate = "drain"


class RateDoc(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    runs: Annotated[int, Meta(ge=0, le=1000)]
    hours: Annotated[float, Meta(ge=0.01, le=8760)]


class RemediationDoc(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="kebab"):
    """The remediation policy (docs/health.md, Remediation): apply writes it to /etc/vgpukit/remediation.yaml
    for the node agent or 'vgpukit remediate --auto'."""

    start: StartDoc = StartDoc()
    vms: Literal["migrate", "managedsave", "shutdown", "fail"] = "shutdown"
    to: Annotated[Uri, Meta(description="the destination libvirt URI of vms: migrate")] | UnsetType = UNSET
    connect: Annotated[Uri, Meta(description="the libvirt the VMs are defined in")] = "qemu:///system"
    timeout: Annotated[float, Meta(ge=0, le=86400)] = 300.0
    force: bool = False
    tenants: Literal["wait", "stop"] = "wait"
    retries: Annotated[int, Meta(ge=0, le=10)] = 1
    per_device: RateDoc = RateDoc(3, 24.0)
    per_host: RateDoc = RateDoc(6, 1.0)
    interval: Annotated[float, Meta(ge=1, le=86400)] = 30.0


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


def from_dict(doc: Any) -> Policy:
    """A policy from its document (the host config's section, or the file apply wrote), checked by its
    declaration (:class:`RemediationDoc`); refused with one line naming the key, never quoting the value."""
    got: RemediationDoc = convert(doc, RemediationDoc, "remediation")
    if got.vms == "migrate" and got.to is UNSET:
        raise InvalidInput("remediation: vms migrate needs to (the destination libvirt URI)")
    return Policy(
        {a: getattr(got.start, a) for a in ACTIONS},
        got.vms,
        None if got.to is UNSET else got.to,
        got.connect,
        float(got.timeout),
        got.force,
        got.tenants,
        got.retries,
        Rate(got.per_device.runs, float(got.per_device.hours)),
        Rate(got.per_host.runs, float(got.per_host.hours)),
        float(got.interval),
    )


def path(host: Host) -> Any:
    return host.config_dir("remediation.yaml")


def load(host: Host) -> Policy | None:
    """The policy apply installed (``/etc/vgpukit/remediation.yaml``); None without one."""
    text = host.read_doc(path(host), "remediation policy", MAX_BYTES, missing_ok=True)
    if text is None:
        return None
    return from_text(text, host.display(path(host)))


def from_text(text: str, where: str) -> Policy:
    """A policy file's text; a refusal is one line at the place of the value at fault
    (``FILE:LINE:COLUMN: remediation: $.retries: ...``); a key written twice is refused."""
    doc, places = load_yaml_located(text, where, unique=True)
    try:
        return from_dict(doc)
    except InvalidInput as err:
        raise InvalidInput(f"{places.describe(where, where_in(err))}: {err}") from None


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
