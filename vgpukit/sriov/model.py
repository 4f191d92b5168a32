"""SR-IOV physical functions and their VFs as plain records, read through the host door."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import Unsupported
from ..holders import OpenFiles
from ..host import DRIVER, DRIVER_OVERRIDE, IOMMU_GROUP, SRIOV_AUTOPROBE, Host
from ..naming import aliases
from ..pci import PciDevice, Scan, read_device, virtfns_listed
from .binding import parse_record, record_path, remembered
from .usage import User, pci_users


class Bound(msgspec.Struct, frozen=True):
    """A device after a step moved it: its driver as the step read it back; its ``driver_override`` and
    bind record text (None: none) as the step read or wrote them (unset: the step does not know)."""

    driver: str | None
    override: str | msgspec.UnsetType | None = msgspec.UNSET
    record: str | msgspec.UnsetType | None = msgspec.UNSET


@dataclass
class Known:
    """What the SR-IOV steps of one run observed, as the run left it
    (:func:`vgpukit.sriov.steps.observed` reads it from the run's outcome), so the command's report
    (:func:`read_pf` with ``known``) does not read it again."""

    drivers: dict[str, str | None] = field(default_factory=dict)  # a device's driver as read back
    overrides: dict[str, str | None] = field(default_factory=dict)  # driver_override as read or written
    records: dict[str, str | None] = field(default_factory=dict)  # bind record text (None: none)
    attrs: dict[str, str | None] = field(default_factory=dict)  # an attribute (path as seen) as set

    def forget_devices(self) -> None:
        """VFs appeared or went away: what is known of devices' drivers, overrides and records is stale."""
        self.drivers.clear()
        self.overrides.clear()
        self.records.clear()

    def forget_device(self, bdf: str) -> None:
        for known in (self.drivers, self.overrides, self.records):
            known.pop(bdf, None)


class VfInfo(msgspec.Struct, frozen=True):
    index: int
    bdf: str
    driver: str | None
    driver_override: str | None
    iommu_group: int | None
    users: tuple[User, ...] = ()
    original_driver: str | None = None  # remembered by vgpukit bind

    @property
    def in_use(self) -> bool:
        return bool(self.users)

    def to_dict(self) -> dict[str, Any]:  # a reshape: adds in_use before users
        return {
            "index": self.index,
            "bdf": self.bdf,
            "driver": self.driver,
            "driver_override": self.driver_override,
            "iommu_group": self.iommu_group,
            "in_use": self.in_use,
            "users": msgspec.to_builtins(self.users),
            "original_driver": self.original_driver,
        }


class PfInfo(msgspec.Struct, frozen=True):
    bdf: str
    alias: str | None
    ids: str
    name: str
    driver: str | None
    total_vfs: int
    num_vfs: int
    vf_device: str | None
    autoprobe: bool
    offset: int | None
    stride: int | None
    vfs: tuple[VfInfo, ...] = msgspec.field(default=())  # the VFs there (their functions in sysfs)
    missing: int = 0  # VFs configured (num_vfs) but not there: a PF reset took them away

    def to_dict(self) -> dict[str, Any]:  # a reshape: missing is shown as missing_vfs, after autoprobe
        return {
            "bdf": self.bdf,
            "alias": self.alias,
            "ids": self.ids,
            "name": self.name,
            "driver": self.driver,
            "total_vfs": self.total_vfs,
            "num_vfs": self.num_vfs,
            "vf_device": self.vf_device,
            "autoprobe": self.autoprobe,
            "missing_vfs": self.missing,
            "vfs": [v.to_dict() for v in self.vfs],
        }


def require_sriov(dev: PciDevice, name: str) -> None:
    if dev.sriov is None:
        what = f"{name} ({dev.bdf})" if name != dev.bdf else dev.bdf
        if dev.is_vf:
            raise Unsupported(f"{what} is a virtual function; SR-IOV is configured on its PF {dev.physfn}")
        raise Unsupported(f"{what} has no SR-IOV capability ({dev.name})", device=dev.bdf)


def _read_vf(host: Host, index: int, bdf: str, files: OpenFiles, records: set[str], known: Known | None) -> VfInfo:
    """What ``sriov list`` shows of a VF: one directory listing, then only what is there (not what
    ``known`` has: what the command's steps observed)."""
    d = host.pci_device(bdf)
    base = f"{d}/"
    entries = set(host.listdir(d))
    group = host.link_name(base + IOMMU_GROUP) if IOMMU_GROUP in entries else None
    if known is not None and bdf in known.overrides:  # as a step read or wrote it
        override = known.overrides[bdf]
    else:
        override = host.read_opt(base + DRIVER_OVERRIDE) if DRIVER_OVERRIDE in entries else None
    if known is not None and bdf in known.records:  # the record as a step read or wrote it: its text, or None
        text = known.records[bdf]
        rec = parse_record(host, bdf, text) if text is not None else None
    else:
        rec = remembered(host, bdf) if f"{bdf}.json" in records else None
    iommu_group = int(group) if group and group.isdigit() else None
    if known is not None and bdf in known.drivers:  # as a step read it back
        driver = known.drivers[bdf]
    else:
        driver = host.link_name(base + DRIVER) if DRIVER in entries else None
    return VfInfo(
        index=index,
        bdf=bdf,
        driver=driver,
        driver_override=None if override in (None, "", "(null)") else override,
        iommu_group=iommu_group,
        users=tuple(pci_users(host, bdf, iommu_group, files, entries)),
        original_driver=rec.driver if rec else None,
    )


def read_pf(
    host: Host,
    bdf: str,
    files: OpenFiles,
    alias: str | None = None,
    name: str | None = None,
    scan: Scan | None = None,
    known: Known | None = None,
    before: PciDevice | None = None,
) -> PfInfo:
    """The PF and its VFs. After a change: ``known``, what the command's steps observed, and
    ``before``, the PF as the command read it first (what the change did not touch is not read again:
    its VFs are listed afresh, where they are is known from its offset and stride)."""
    if before is not None and before.sriov is not None:
        dev = _after(host, before, known)
    else:
        dev = scan.device(bdf) if scan is not None else read_device(host, bdf)
    require_sriov(dev, name or bdf)
    assert dev.sriov is not None
    records = set(host.listdir(record_path(host, bdf).parent)) if dev.sriov.vfs else set()
    there = [(i, vf) for i, vf in enumerate(dev.sriov.vfs) if _there(host, vf, scan, before)]
    vfs = [_read_vf(host, i, vf, files, records, known) for i, vf in there]
    s = dev.sriov
    return PfInfo(
        bdf=bdf,
        alias=alias,
        ids=dev.ids,
        name=dev.name,
        driver=dev.driver,
        total_vfs=s.total_vfs,
        num_vfs=s.num_vfs,
        vf_device=s.vf_device,
        autoprobe=s.autoprobe,
        offset=s.offset,
        stride=s.stride,
        vfs=tuple(vfs),
        missing=max(0, s.num_vfs - len(vfs)),
    )


def _there(host: Host, vf: str, scan: Scan | None, before: PciDevice | None) -> bool:
    """Whether VF ``vf`` (its PF lists its ``virtfnN`` link) is there: its function in sysfs. The
    kernel removes a PF's link only when it disables SR-IOV; a VF that went away otherwise may leave
    it behind (docs/sriov.md, "VFs configured but missing")."""
    if before is not None:  # read after this command's own steps made them (and verified them)
        return True
    return scan.exists(vf) if scan is not None else host.exists(host.pci_device(vf))


def _after(host: Host, before: PciDevice, known: Known | None) -> PciDevice:
    """``before`` with its VFs as the PF lists them now and its autoprobe as the command left it."""
    s = before.sriov
    assert s is not None
    base = f"{host.pci_device(before.bdf)}/"
    vfs = tuple(virtfns_listed(host, before.bdf, base, host.listdir(base), s.offset, s.stride))
    path = host.display(host.pci_device(before.bdf, SRIOV_AUTOPROBE))
    left = known.attrs.get(path) if known is not None else None  # as the sriov steps left it
    autoprobe = s.autoprobe if left is None else left == "1"
    return msgspec.structs.replace(
        before, sriov=msgspec.structs.replace(s, num_vfs=len(vfs), vfs=vfs, autoprobe=autoprobe)
    )


def list_pfs(host: Host, files: OpenFiles, scan: Scan) -> list[PfInfo]:
    names = aliases(scan)
    return [read_pf(host, d.bdf, files, names.get(d.bdf), scan=scan) for d in scan.physical() if d.sriov is not None]
