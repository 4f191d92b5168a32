"""A small real file tree shaped like sysfs, for attach tests that need exact control of a host."""

from __future__ import annotations

import os
from pathlib import Path


class FakeHost:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.sys = root / "sys"
        for d in ("bus/pci/devices", "bus/pci/drivers", "bus/mdev/devices", "kernel/iommu_groups", "devices"):
            (self.sys / d).mkdir(parents=True, exist_ok=True)

    def _link(self, link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(target, link.parent))

    def group(self, n: int) -> Path:
        g = self.sys / "kernel" / "iommu_groups" / str(n)
        (g / "devices").mkdir(parents=True, exist_ok=True)
        return g

    def pci(
        self,
        bdf: str,
        *,
        cls: int = 0x030200,
        vendor: str = "0x10de",
        device: str = "0x20b0",
        driver: str | None = None,
        numa: int = 0,
        group: int | None = None,
        physfn: str | None = None,
        files: dict[str, str] | None = None,
    ) -> Path:
        bridge = self.sys / "devices" / "pci0000:3a"
        d = bridge / bdf
        d.mkdir(parents=True, exist_ok=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
        (d / "class").write_text(f"0x{cls:06x}\n")
        (d / "numa_node").write_text(f"{numa}\n")
        for name, text in (files or {}).items():
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            (d / name).write_text(text + "\n")
        self._link(self.sys / "bus" / "pci" / "devices" / bdf, d)
        if driver:
            drv = self.sys / "bus" / "pci" / "drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            self._link(d / "driver", drv)
        if group is not None:
            g = self.group(group)
            self._link(d / "iommu_group", g)
            self._link(g / "devices" / bdf, d)
        if physfn:
            self._link(d / "physfn", bridge / physfn)
        return d

    def mdev(self, uuid: str, parent: str, mdev_type: str, group: int) -> Path:
        pdir = self.sys / "devices" / "pci0000:3a" / parent
        tdir = pdir / "mdev_supported_types" / mdev_type
        tdir.mkdir(parents=True, exist_ok=True)
        d = pdir / uuid
        d.mkdir(parents=True, exist_ok=True)
        self._link(d / "mdev_type", tdir)
        g = self.group(group)
        self._link(d / "iommu_group", g)
        self._link(self.sys / "bus" / "mdev" / "devices" / uuid, d)
        return d

    def node(self, n: int, cpulist: str, free_2m: int = 0) -> None:
        d = self.sys / "devices" / "system" / "node" / f"node{n}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(cpulist + "\n")
        hp = d / "hugepages" / "hugepages-2048kB"
        hp.mkdir(parents=True, exist_ok=True)
        (hp / "free_hugepages").write_text(f"{free_2m}\n")

    def file(self, rel: str, text: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p
