"""Low-level sysfs tree operations of the simulated kernel.

The simulator *is* the kernel of a simulated host, so it writes its own tree directly (never through
:meth:`Host.write`, which would loop back into it). Both the builder (``sim init``) and the kernel
reactions use these helpers, so a VF created at run time looks exactly like a device created at init.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OutsideRoot

RO, RW, WO = 0o444, 0o644, 0o200


def write_attr(path: Path, value: object, mode: int = RO) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        os.chmod(path, 0o644)
    path.write_text(f"{value}\n")
    os.chmod(path, mode)


def set_attr(path: Path, value: object) -> None:
    """Change an attribute's content, keeping its mode."""
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else RO
    write_attr(path, value, mode)


def link(path: Path, target: Path) -> None:
    """A relative symlink ``path`` -> ``target`` (as sysfs makes them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(os.path.relpath(target, path.parent), path)


def unlink(path: Path) -> None:
    if os.path.lexists(path):
        os.unlink(path)


def remove_tree(d: Path) -> None:
    """Remove a device directory with its attributes and links (never following links)."""
    for child in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if child.is_symlink() or child.is_file():
            child.unlink()
        elif child.is_dir():
            child.rmdir()
    d.rmdir()


def is_writable(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o222)


def make_devnode(path: Path, major: int, minor: int) -> None:
    """A simulated device node: a plain file naming the numbers it stands for.

    Never a real character device: on a GPU host, 195:0 *is* the real /dev/nvidia0, and nothing
    done on a simulated host may reach real hardware.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(path):
        path.write_text(f"simulated character device {major}:{minor}\n")


@dataclass
class SimTree:
    """Paths of a simulated host rooted at ``root``."""

    root: Path

    def inside(self, path: Path) -> Path:
        """``path`` when its resolution stays in the simulated host; a planted link out is refused,
        so no reaction ever creates, changes or removes anything outside the sim root."""
        real = os.path.realpath(path)
        base = os.path.realpath(self.root)
        if real != base and not real.startswith(base + "/"):
            shown = "/" + os.path.relpath(os.path.abspath(path), self.root)
            raise OutsideRoot(f"simulated host: refusing {shown}: it leads outside {self.root}", path=shown)
        return path

    @property
    def sys(self) -> Path:
        return self.root / "sys"

    @property
    def bus_pci(self) -> Path:
        return self.sys / "bus" / "pci"

    def device_link(self, bdf: str) -> Path:
        return self.bus_pci / "devices" / bdf

    def device_dir(self, bdf: str) -> Path:
        """Real directory of a PCI device (following the bus link)."""
        return self.inside(Path(os.path.realpath(self.device_link(bdf))))

    def driver_dir(self, driver: str) -> Path:
        return self.inside(self.bus_pci / "drivers" / driver)

    def group_dir(self, group: int) -> Path:
        return self.inside(self.sys / "kernel" / "iommu_groups" / str(group))

    def devnode(self, *parts: str) -> Path:
        path = self.root.joinpath("dev", *parts)
        self.inside(path.parent)
        return path

    # ------------------------------------------------------------------ devices
    def add_pci_device(
        self, parent_dir: Path, bdf: str, spec: dict[str, Any], numa: int | None, cpulist: str | None, group: int
    ) -> Path:
        """Create a PCI function directory with its attributes and bus/group links."""
        d = self.inside(parent_dir / bdf)
        d.mkdir(parents=True, exist_ok=True)
        vendor, device = spec["ids"].split(":")
        write_attr(d / "vendor", f"0x{vendor}")
        write_attr(d / "device", f"0x{device}")
        sub = spec.get("subsystem", spec["ids"]).split(":")
        write_attr(d / "subsystem_vendor", f"0x{sub[0]}")
        write_attr(d / "subsystem_device", f"0x{sub[1]}")
        write_attr(d / "class", spec["class"])
        write_attr(d / "numa_node", -1 if numa is None else numa)
        if cpulist is not None:
            write_attr(d / "local_cpulist", cpulist)
        link_spec = spec.get("link")
        if link_spec:
            write_attr(d / "current_link_speed", link_spec[0])
            write_attr(d / "current_link_width", link_spec[1])
            write_attr(d / "max_link_speed", link_spec[2] if len(link_spec) > 2 else link_spec[0])
            write_attr(d / "max_link_width", link_spec[3] if len(link_spec) > 3 else link_spec[1])
        write_attr(d / "driver_override", "(null)", RW)
        write_attr(d / "enable", 1, RW)
        link(d / "subsystem", self.bus_pci)
        link(self.device_link(bdf), d)
        self.join_group(bdf, d, group)
        return d

    def join_group(self, bdf: str, d: Path, group: int) -> None:
        gdir = self.group_dir(group)
        (gdir / "devices").mkdir(parents=True, exist_ok=True)
        write_attr(gdir / "type", "DMA-FQ")
        link(d / "iommu_group", gdir)
        link(gdir / "devices" / bdf, d)

    def leave_group(self, name: str, d: Path) -> None:
        """Take a device out of its IOMMU group; an empty group disappears with its /dev/vfio node."""
        group = os.path.basename(os.readlink(d / "iommu_group"))
        gdir = self.group_dir(int(group))
        unlink(gdir / "devices" / name)
        if not any((gdir / "devices").iterdir()):
            for child in gdir.rglob("*"):
                if child.is_file() or child.is_symlink():
                    child.unlink()
            (gdir / "devices").rmdir()
            gdir.rmdir()
            unlink(self.devnode("vfio", group))

    def remove_pci_device(self, bdf: str) -> None:
        d = self.device_dir(bdf)
        drv = os.readlink(d / "driver") if os.path.lexists(d / "driver") else None
        if drv:
            unlink(self.driver_dir(os.path.basename(drv)) / bdf)
        self.leave_group(bdf, d)
        unlink(self.device_link(bdf))
        remove_tree(d)

    # ------------------------------------------------------------------ drivers
    def add_driver(self, name: str) -> None:
        d = self.driver_dir(name)
        d.mkdir(parents=True, exist_ok=True)
        for attr in ("bind", "unbind", "new_id", "remove_id"):
            if not (d / attr).exists():
                write_attr(d / attr, "", WO)

    def bound_driver(self, bdf: str) -> str | None:
        target = self.device_dir(bdf) / "driver"
        return os.path.basename(os.readlink(target)) if os.path.lexists(target) else None

    def bind(self, bdf: str, driver: str) -> None:
        d = self.device_dir(bdf)
        link(d / "driver", self.driver_dir(driver))
        link(self.driver_dir(driver) / bdf, d)
        if driver == "vfio-pci":
            group = os.path.basename(os.readlink(d / "iommu_group"))
            make_devnode(self.devnode("vfio", group), 243, int(group))

    def unbind(self, bdf: str) -> None:
        drv = self.bound_driver(bdf)
        if drv is None:
            return
        d = self.device_dir(bdf)
        unlink(d / "driver")
        unlink(self.driver_dir(drv) / bdf)
        if drv == "vfio-pci":
            group = os.path.basename(os.readlink(d / "iommu_group"))
            members = (self.group_dir(int(group)) / "devices").iterdir()
            if not any(self.bound_driver(m.name) == "vfio-pci" for m in members):
                unlink(self.devnode("vfio", group))

    def all_bdfs(self) -> list[str]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(os.listdir(self.bus_pci / "devices"))
        return []
