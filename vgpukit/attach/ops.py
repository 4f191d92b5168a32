"""Attach and detach: validate, plan, apply, verify, roll back on failure.

Order: resolve every DEVICE on the host and check it (exists, IOMMU group viable) before touching
libvirt; then read the domain and every other domain (active and inactive definitions) to find
devices already assigned; the plan is what is missing; apply it device by device; read the
domain back. Each device is a :class:`~vgpukit.attach.steps.DomainDevice` step run by the change
engine: a failure part-way detaches what this run attached (a killed run: the next command), so the
domain is left unchanged.

libvirt's test driver cannot attach devices; there ``--config`` is done by editing the inactive
XML and redefining the domain (one ``defineXML`` per device).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import naming
from ..engine import Env, execute
from ..errors import Conflict, InvalidInput, NotFound
from ..host import Host
from ..libvirt.connection import Libvirt
from ..libvirt.domain import DomainXML, assignments, device_keys
from ..pci import Scan, parse_bdf
from .checks import check_iommu, check_not_console, check_not_held
from .devices import AttachTarget, resolve
from .steps import DomainDevice
from .templates import TemplateSet

if TYPE_CHECKING:
    from ..nvml import Nvml


@dataclass
class AttachOutcome:
    domain: str
    uri: str
    steps: list[DomainDevice] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def plan(self, verb: str) -> list[str]:
        return [s.describe() for s in self.steps]

    def to_dict(self) -> dict[str, object]:
        return {
            "domain": self.domain,
            "uri": self.uri,
            "devices": [
                {"device": s.label, "key": s.device, "scopes": s.scopes().split("+"), "xml": s.xml} for s in self.steps
            ],
            "unchanged": self.unchanged,
        }


def scopes_for(lv: Libvirt, name: str, live: bool, config: bool) -> tuple[bool, bool]:
    """Which definitions to change. Neither flag: the persistent config, and the live VM if it runs."""
    info = lv.domain(name)
    if not live and not config:
        return info.active, info.persistent
    if live and not info.active:
        raise Conflict(f"domain {name!r} is not running: --live needs a running domain (use --config)", value=name)
    if config and not info.persistent:
        raise Conflict(f"domain {name!r} is transient: it has no config to change (use --live)", value=name)
    return live, config


def holders(lv: Libvirt, skip: str) -> dict[str, str]:
    """device key -> name of another domain (active or inactive definition) that has it."""
    return {key: found[0].domain for key, found in assignments(lv, skip=skip).items()}


def _present(lv: Libvirt, name: str, live: bool, config: bool) -> tuple[set[str], set[str]]:
    live_keys = device_keys(lv.xml(name)) if live else set()
    cfg_keys = device_keys(lv.xml(name, inactive=True)) if config else set()
    return live_keys, cfg_keys


def _run(host: Host, lv: Libvirt, steps: list[DomainDevice], env: Env | None) -> None:
    """Apply, verify, roll back on failure: the change engine, with this command's connection."""
    env = env if env is not None else Env(host)
    env.handles[f"libvirt:{lv.uri}"] = lv
    execute(env, steps)


def targets_for(
    host: Host, names: list[str], *, nvml: Nvml | None = None, mac: str | None = None, vlan: int | None = None
) -> list[AttachTarget]:
    """Resolve and check every DEVICE on the host (no libvirt needed): the first half of attach."""
    if not names:
        raise InvalidInput("name at least one DEVICE to attach")
    if (mac is not None or vlan is not None) and len(names) > 1:
        raise InvalidInput("--mac/--vlan need exactly one DEVICE")
    scan = Scan(host)
    targets = [resolve(host, n, nvml, scan=scan) for n in names]
    seen: set[str] = set()
    for t in targets:
        if t.key in seen:
            raise InvalidInput(f"{t.label} is named twice")
        seen.add(t.key)
        check_not_console(t)
        check_iommu(host, t)
        t.element(mac=mac, vlan=vlan)  # --mac on a non-NIC is bad input now, not after connecting
    return targets


def attach(
    host: Host,
    lv: Libvirt,
    domain: str,
    names: list[str],
    *,
    nvml: Nvml | None = None,
    dry_run: bool = False,
    live: bool = False,
    config: bool = False,
    mac: str | None = None,
    vlan: int | None = None,
    targets: list[AttachTarget] | None = None,
    env: Env | None = None,
) -> AttachOutcome:
    """Attach ``names`` (or already checked ``targets``) to ``domain``."""
    if targets is None:
        targets = targets_for(host, names, nvml=nvml, mac=mac, vlan=vlan)
    do_live, do_config = scopes_for(lv, domain, live, config)
    taken = holders(lv, domain)
    for t in targets:
        if t.key in taken:
            raise Conflict(
                f"{t.label} is already assigned to domain {taken[t.key]!r}",
                device=t.label,
                hint=f"detach it first: vgpukit detach {taken[t.key]} {t.label}",
            )
    live_keys, cfg_keys = _present(lv, domain, do_live, do_config)
    running = device_keys(lv.xml(domain)) if lv.domain(domain).active else set()
    tpl = TemplateSet(host)
    out = AttachOutcome(domain, lv.uri)
    for t in targets:
        need_live = do_live and t.key not in live_keys
        need_cfg = do_config and t.key not in cfg_keys
        if not (need_live or need_cfg):
            out.unchanged.append(t.label)
            continue
        if t.key not in running:  # the domain's own QEMU may hold it; anyone else may not
            check_not_held(host, t)
        xml = tpl.device(t.element(mac=mac, vlan=vlan))
        out.steps.append(DomainDevice(lv.uri, domain, t.key, t.label, xml, need_live, need_cfg, True))
    if out.steps and not dry_run:
        _run(host, lv, out.steps, env)
    return out


def detach_key(host: Host, name: str, nvml: Nvml | None = None) -> tuple[str, str]:
    """(key, label) for a device to detach. A BDF or UUID no longer on the host still works."""
    text = name.strip()
    try:
        t: AttachTarget = resolve(host, text, nvml)
        return t.key, t.label
    except NotFound:
        form = naming.form_of(text)
        if form == "mdev-uuid":
            return f"mdev:{text.lower()}", text.lower()
        if form == "bdf":
            return f"pci:{parse_bdf(text)}", parse_bdf(text)
        raise


def detach_keys(host: Host, names: list[str], nvml: Nvml | None = None) -> list[tuple[str, str]]:
    if not names:
        raise InvalidInput("name at least one DEVICE to detach")
    return [detach_key(host, n, nvml) for n in names]


def detach(
    host: Host,
    lv: Libvirt,
    domain: str,
    names: list[str],
    *,
    nvml: Nvml | None = None,
    dry_run: bool = False,
    live: bool = False,
    config: bool = False,
    keys: list[tuple[str, str]] | None = None,
    env: Env | None = None,
) -> AttachOutcome:
    """Detach ``names`` (or already resolved ``keys``) from ``domain``."""
    if keys is None:
        keys = detach_keys(host, names, nvml)
    do_live, do_config = scopes_for(lv, domain, live, config)
    live_xml = DomainXML.parse(lv.xml(domain)).keyed() if do_live else {}
    cfg_xml = DomainXML.parse(lv.xml(domain, inactive=True)).keyed() if do_config else {}
    out = AttachOutcome(domain, lv.uri)
    for key, label in keys:
        in_live, in_cfg = key in live_xml, key in cfg_xml
        if not (in_live or in_cfg):
            out.unchanged.append(label)
            continue
        dev = cfg_xml[key] if in_cfg else live_xml[key]  # prefer the element without run-time additions
        out.steps.append(DomainDevice(lv.uri, domain, key, label, dev.to_xml(), in_live, in_cfg, False))
    if out.steps and not dry_run:
        _run(host, lv, out.steps, env)
    return out
