"""The attach planner: every rule of giving host devices to a libvirt domain and taking them back.

Typed request in (:class:`Attach`, :class:`Detach`), the :class:`~vgpukit.attach.steps.DomainDevice`
steps (an :class:`AttachOutcome`) or a typed refusal out; nothing here executes (``attach.ops.run``
hands the steps to the change engine) or prints. The rules, in the order they are checked:

1. on the host, before libvirt is asked (:func:`targets`): at least one device, each named once;
   ``--mac``/``--vlan`` with exactly one NIC; not the console display device still on a host driver
   (``busy``, exit 4); an IOMMU group, and one VFIO can take as a whole: every other member on
   vfio-pci, a PCI bridge or no driver (:mod:`vgpukit.iommu`; ``conflict``, exit 4);
2. in libvirt (:func:`plan_attach`): ``--live`` needs a running domain, ``--config`` a persistent one; a
   device already assigned to another domain (running or defined) is refused (``conflict``, exit 4);
   what the domain already has is left alone;
3. for each device that goes to the domain: no process outside it holds the device's group
   (``busy``, exit 4).

``render hostdev`` / ``render domain`` check rule 1 too, and say it as a warning (a definition may be
rendered for later).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from .. import iommu, naming
from ..errors import Busy, Conflict, InvalidInput, NotFound
from ..holders import OpenFiles
from ..host import Host
from ..libvirt.domain import DomainXML, assignments, device_keys
from ..pci import Scan, parse_bdf
from .devices import AttachTarget, resolve
from .steps import DomainDevice
from .templates import TemplateSet

if TYPE_CHECKING:
    from ..libvirt.connection import Libvirt
    from ..nvml import Nvml


def check_iommu(host: Host, target: AttachTarget) -> None:
    """Conflict unless the target's IOMMU group can be handed to VFIO as a whole (see :mod:`vgpukit.iommu`)."""
    if target.iommu_group is None:
        what = "mdev" if target.kind == "mdev" else "device"
        raise Conflict(
            f"{what} {target.label} has no IOMMU group",
            device=target.label,
            hint="enable the IOMMU (intel_iommu=on / amd_iommu=on) and load vfio",
        )
    if target.kind == "mdev":
        return  # an mdev's group holds only itself
    for b in iommu.blockers(host, target.iommu_group, {target.bdf} if target.bdf else set()):
        raise Conflict(
            f"IOMMU group {target.iommu_group} of {target.label} is not viable: {b.bdf} is bound to {b.driver}",
            device=target.label,
            hint=f"bind {b.bdf} to vfio-pci (vgpukit bind {b.bdf} --driver vfio-pci) or unbind it",
        )


def check_not_console(target: AttachTarget) -> None:
    """Busy for the console display device (boot_vga) still on a host driver: a managed hostdev makes
    libvirt take it from its driver when the VM starts. Moving it first (``bind --force``) is the
    deliberate act that lets it go to a VM."""
    if target.console and not (target.driver and "vfio" in target.driver):
        raise Busy(
            f"cannot give {target.label} to a VM: it is the console display device (boot_vga)",
            device=target.label,
            hint=f"if the console is not needed: vgpukit bind {target.label} --driver vfio-pci --force",
        )


def check_not_held(host: Host, target: AttachTarget) -> None:
    """Busy when a process outside libvirt's view (a stray QEMU, a container) holds the device's group."""
    if target.iommu_group is None:
        return
    held = [h.describe() for h in OpenFiles(host).group(target.iommu_group)]
    if held:
        raise Busy(
            f"{target.label} is in use: /dev/vfio/{target.iommu_group} is held by {', '.join(held)}",
            device=target.label,
            hint="stop that process (or the VM / container using it) first",
        )


def check_not_quarantined(host: Host, found: list[AttachTarget]) -> None:
    """The quarantine rule: no device (nor an mdev or VF carved from one) goes to a VM while quarantined."""
    from .. import quarantine as qr
    from ..host import BDF_RE

    quarantined = qr.load(host)
    if not quarantined:
        return
    for t in found:
        bdf = t.bdf if t.kind == "pci" else t.parent
        if bdf and BDF_RE.match(bdf):
            qr.refuse(host, bdf, t.label, quarantined)


# ----------------------------------------------------------------------------- requests, outcome
class Attach(msgspec.Struct, frozen=True):
    domain: str
    names: tuple[str, ...]
    live: bool = False
    config: bool = False
    mac: str | None = None
    vlan: int | None = None


class Detach(msgspec.Struct, frozen=True):
    domain: str
    names: tuple[str, ...]
    live: bool = False
    config: bool = False


class AttachOutcome(msgspec.Struct):
    domain: str
    uri: str
    steps: list[DomainDevice] = msgspec.field(default_factory=list)
    unchanged: list[str] = msgspec.field(default_factory=list)

    def plan(self, verb: str) -> list[str]:
        return [s.describe() for s in self.steps]

    def to_dict(self) -> dict[str, object]:  # a reshape: the steps shown as devices (label, key, scopes, xml)
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
    check_not_quarantined(host, targets)
    return targets


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


def targets(host: Host, req: Attach, nvml: Nvml | None = None) -> list[AttachTarget]:
    """Rule 1: the request's devices on the host, checked (no libvirt needed)."""
    return targets_for(host, list(req.names), nvml=nvml, mac=req.mac, vlan=req.vlan)


def plan_attach(host: Host, lv: Libvirt, req: Attach, found: list[AttachTarget]) -> AttachOutcome:
    """Rules 2 and 3: the steps that give ``found`` (:func:`targets` of ``req``) to ``req.domain``."""
    domain = req.domain
    do_live, do_config = scopes_for(lv, domain, req.live, req.config)
    taken = holders(lv, domain)
    for t in found:
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
    for t in found:
        need_live = do_live and t.key not in live_keys
        need_cfg = do_config and t.key not in cfg_keys
        if not (need_live or need_cfg):
            out.unchanged.append(t.label)
            continue
        if t.key not in running:  # the domain's own QEMU may hold it; anyone else may not
            check_not_held(host, t)
        xml = tpl.device(t.element(mac=req.mac, vlan=req.vlan))
        out.steps.append(DomainDevice(lv.uri, domain, t.key, t.label, xml, need_live, need_cfg, True))
    return out


def plan_detach(lv: Libvirt, req: Detach, keys: list[tuple[str, str]]) -> AttachOutcome:
    """The steps that take ``keys`` (:func:`detach_keys` of ``req``) from ``req.domain``; what it does not
    have is left alone."""
    domain = req.domain
    do_live, do_config = scopes_for(lv, domain, req.live, req.config)
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
    return out
