"""SR-IOV physical functions and their VFs as plain records, read through the host door."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import Unsupported
from ..holders import OpenFiles
from ..host import DRIVER, DRIVER_OVERRIDE, IOMMU_GROUP, Host
from ..naming import aliases
from ..pci import PciDevice, Scan, read_device, virtfns_listed
from .binding import parse_record, record_path, remembered
from .usage import User, pci_users

SEEN_KEY = "sriov"  # where a command's :class:`SriovSeen` lives in ``env.seen``


@dataclass
class SriovSeen:
    """What the sriov steps of one command read or wrote, so that neither a later step nor the report
    (:func:`read_pf` with ``seen``) reads it again. Owned by the steps: each fills what it read or
    wrote (none reads it from a front end); it lives in ``env.seen`` under :data:`SEEN_KEY`, which the
    engine clears before each inverse, so undo and recovery start from nothing known."""

    drivers: dict[str, str | None] = field(default_factory=dict)  # a device's driver as a verify() read it
    overrides: dict[str, str | None] = field(default_factory=dict)  # driver_override as read or written
    records: dict[str, str | None] = field(default_factory=dict)  # bind record text (None: none)
    present: dict[str, bool] = field(default_factory=dict)  # the device's directory, as an inverse saw it
    autoprobe: dict[str, int | None] = field(default_factory=dict)  # a PF's sriov_drivers_autoprobe
    numvfs: dict[str, int] = field(default_factory=dict)  # a PF's sriov_numvfs
    loaded: set[str] = field(default_factory=set)  # drivers found loaded (checked once per command)
    inverses: dict[str, object] = field(default_factory=dict)  # bdf -> the put-back step its inverse read

    @classmethod
    def of(cls, seen: MutableMapping[str, object]) -> SriovSeen:
        """The command's snapshot in ``seen`` (``env.seen``), made empty the first time."""
        mine = seen.get(SEEN_KEY)
        if not isinstance(mine, SriovSeen):
            mine = seen[SEEN_KEY] = cls()
        return mine

    @staticmethod
    def find(seen: Mapping[str, object]) -> SriovSeen | None:
        """The command's snapshot, if its steps made one (for a report: nothing is created)."""
        mine = seen.get(SEEN_KEY)
        return mine if isinstance(mine, SriovSeen) else None

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


def _read_vf(host: Host, index: int, bdf: str, files: OpenFiles, records: set[str], seen: SriovSeen | None) -> VfInfo:
    """What ``sriov list`` shows of a VF: one directory listing, then only what is there (not what
    ``seen`` has: what the command's steps just read or wrote)."""
    d = host.pci_device(bdf)
    base = f"{d}/"
    entries = set(host.listdir(d))
    group = host.link_name(base + IOMMU_GROUP) if IOMMU_GROUP in entries else None
    if seen is not None and bdf in seen.overrides:  # as a step read or wrote it
        override = seen.overrides[bdf]
    else:
        override = host.read_opt(base + DRIVER_OVERRIDE) if DRIVER_OVERRIDE in entries else None
    if seen is not None and bdf in seen.records:  # the record as a step read or wrote it: its text, or None
        text = seen.records[bdf]
        rec = parse_record(host, bdf, text) if text is not None else None
    else:
        rec = remembered(host, bdf) if f"{bdf}.json" in records else None
    iommu_group = int(group) if group and group.isdigit() else None
    if seen is not None and bdf in seen.drivers:  # as a step's verify() read it
        driver = seen.drivers[bdf]
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
    seen: SriovSeen | None = None,
    before: PciDevice | None = None,
) -> PfInfo:
    """The PF and its VFs. After a change: ``seen``, what the command's steps read and wrote, and
    ``before``, the PF as the command read it first (what the change did not touch is not read again:
    its VFs are listed afresh, where they are is known from its offset and stride)."""
    if before is not None and before.sriov is not None:
        dev = _after(host, before, seen)
    else:
        dev = scan.device(bdf) if scan is not None else read_device(host, bdf)
    require_sriov(dev, name or bdf)
    assert dev.sriov is not None
    records = set(host.listdir(record_path(host, bdf).parent)) if dev.sriov.vfs else set()
    there = [(i, vf) for i, vf in enumerate(dev.sriov.vfs) if _there(host, vf, scan, before)]
    vfs = [_read_vf(host, i, vf, files, records, seen) for i, vf in there]
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


def _after(host: Host, before: PciDevice, seen: SriovSeen | None) -> PciDevice:
    """``before`` with its VFs as the PF lists them now and its autoprobe as the command left it."""
    s = before.sriov
    assert s is not None
    base = f"{host.pci_device(before.bdf)}/"
    vfs = tuple(virtfns_listed(host, before.bdf, base, host.listdir(base), s.offset, s.stride))
    known = seen.autoprobe.get(before.bdf) if seen is not None else None  # as the sriov steps left it
    autoprobe = s.autoprobe if known is None else known
    return msgspec.structs.replace(
        before, sriov=msgspec.structs.replace(s, num_vfs=len(vfs), vfs=vfs, autoprobe=bool(autoprobe))
    )


def list_pfs(host: Host, files: OpenFiles, scan: Scan) -> list[PfInfo]:
    names = aliases(scan)
    return [read_pf(host, d.bdf, files, names.get(d.bdf), scan=scan) for d in scan.physical() if d.sriov is not None]
