"""SR-IOV physical functions and their VFs as plain records, read through the host door."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import Unsupported
from ..holders import OpenFiles
from ..host import Host
from ..host_layout import DRIVER, DRIVER_OVERRIDE, IOMMU_GROUP
from ..naming import aliases
from ..pci import PciDevice, Scan, read_device, virtfns_listed
from .binding import parse_record, record_path, remembered
from .usage import User, pci_users

# ``env.seen`` keys: what the sriov steps read or wrote in this command, so that neither a later step
# nor the report (read_pf with ``seen``) reads it again.


def driver_key(bdf: str) -> str:
    """``bdf``'s driver as a step's verify() read it after changing it."""
    return f"driver:{bdf}"


def override_key(bdf: str) -> str:
    """``bdf``'s driver_override as a step read or wrote it."""
    return f"override:{bdf}"


def record_key(bdf: str) -> str:
    """``bdf``'s bind record (its text, or None) as a step read or wrote it."""
    return f"record:{bdf}"


DEVICE_KEYS = (driver_key(""), override_key(""), record_key(""))  # dropped when VFs come or go


def present_key(bdf: str) -> str:
    """Whether ``bdf``'s directory was there when its step's inverse read it."""
    return f"present:{bdf}"


def autoprobe_key(pf: str) -> str:
    """The PF's sriov_drivers_autoprobe (0/1) as the command knows it."""
    return f"autoprobe:{pf}"


def numvfs_key(pf: str) -> str:
    """The PF's sriov_numvfs as the command knows it."""
    return f"numvfs:{pf}"


def loaded_key(driver: str) -> str:
    """That ``driver`` was found loaded (checked once per command)."""
    return f"loaded:{driver}"


@dataclass(frozen=True)
class VfInfo:
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "bdf": self.bdf,
            "driver": self.driver,
            "driver_override": self.driver_override,
            "iommu_group": self.iommu_group,
            "in_use": self.in_use,
            "users": [u.to_dict() for u in self.users],
            "original_driver": self.original_driver,
        }


@dataclass(frozen=True)
class PfInfo:
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
    vfs: tuple[VfInfo, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
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
            "vfs": [v.to_dict() for v in self.vfs],
        }


def require_sriov(dev: PciDevice, name: str) -> None:
    if dev.sriov is None:
        what = f"{name} ({dev.bdf})" if name != dev.bdf else dev.bdf
        if dev.is_vf:
            raise Unsupported(f"{what} is a virtual function; SR-IOV is configured on its PF {dev.physfn}")
        raise Unsupported(f"{what} has no SR-IOV capability ({dev.name})", device=dev.bdf)


def _read_vf(
    host: Host, index: int, bdf: str, files: OpenFiles, records: set[str], seen: Mapping[str, object]
) -> VfInfo:
    """What ``sriov list`` shows of a VF: one directory listing, then only what is there (its driver
    not again when ``seen`` has it: what a step's verify() just read, in ``env.seen``)."""
    d = host.pci_device(bdf)
    base = f"{d}/"
    entries = set(host.listdir(d))
    group = host.link_name(base + IOMMU_GROUP) if IOMMU_GROUP in entries else None
    if override_key(bdf) in seen:  # as a step read or wrote it
        known = seen[override_key(bdf)]
        override = known if isinstance(known, str) else None
    else:
        override = host.read_opt(base + DRIVER_OVERRIDE) if DRIVER_OVERRIDE in entries else None
    if record_key(bdf) in seen:  # the record as a step read or wrote it: its text, or None
        text = seen[record_key(bdf)]
        rec = parse_record(host, bdf, text) if isinstance(text, str) else None
    else:
        rec = remembered(host, bdf) if f"{bdf}.json" in records else None
    iommu_group = int(group) if group and group.isdigit() else None
    return VfInfo(
        index=index,
        bdf=bdf,
        driver=_driver(host, base, bdf, entries, seen),
        driver_override=None if override in (None, "", "(null)") else override,
        iommu_group=iommu_group,
        users=tuple(pci_users(host, bdf, iommu_group, files, entries)),
        original_driver=rec.driver if rec else None,
    )


def _driver(host: Host, base: str, bdf: str, entries: set[str], seen: Mapping[str, object]) -> str | None:
    key = driver_key(bdf)  # as the sriov steps note it
    if key in seen:
        known = seen[key]
        return known if isinstance(known, str) else None
    return host.link_name(base + DRIVER) if DRIVER in entries else None


def read_pf(
    host: Host,
    bdf: str,
    files: OpenFiles,
    alias: str | None = None,
    name: str | None = None,
    scan: Scan | None = None,
    seen: Mapping[str, object] | None = None,
    before: PciDevice | None = None,
) -> PfInfo:
    """The PF and its VFs. After a change: ``seen``, the ``env.seen`` of the command that made it, and
    ``before``, the PF as the command read it first (what the change did not touch is not read again:
    its VFs are listed afresh, where they are is known from its offset and stride)."""
    seen = seen or {}
    if before is not None and before.sriov is not None:
        dev = _after(host, before, seen)
    else:
        dev = scan.device(bdf) if scan is not None else read_device(host, bdf)
    require_sriov(dev, name or bdf)
    assert dev.sriov is not None
    records = set(host.listdir(record_path(host, bdf).parent)) if dev.sriov.vfs else set()
    vfs = [_read_vf(host, i, vf, files, records, seen) for i, vf in enumerate(dev.sriov.vfs)]
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
    )


def _after(host: Host, before: PciDevice, seen: Mapping[str, object]) -> PciDevice:
    """``before`` with its VFs as the PF lists them now and its autoprobe as the command left it."""
    s = before.sriov
    assert s is not None
    base = f"{host.pci_device(before.bdf)}/"
    vfs = tuple(virtfns_listed(host, before.bdf, base, host.listdir(base), s.offset, s.stride))
    autoprobe = seen.get(autoprobe_key(before.bdf), s.autoprobe)  # as the sriov steps left it
    return before.replace(sriov=s.replace(num_vfs=len(vfs), vfs=vfs, autoprobe=bool(autoprobe)))


def list_pfs(host: Host, files: OpenFiles, scan: Scan) -> list[PfInfo]:
    names = aliases(scan)
    return [read_pf(host, d.bdf, files, names.get(d.bdf), scan=scan) for d in scan.physical() if d.sriov is not None]
