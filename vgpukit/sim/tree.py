"""Low-level sysfs tree operations of the simulated kernel.

The simulator *is* the kernel of a simulated host, so it writes its own tree directly (never through
:meth:`Host.write`, which would loop back into it). Both the builder (``sim init``) and the kernel
reactions use these helpers, so a VF created at run time looks exactly like a device created at init.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from .config_space import HEADER_TYPE_OFFSET, config_space
from .files import HeldOpen, process_umask, write_fd
from .journal import Journal

RO, RW, WO = 0o444, 0o644, 0o200
STORE = "store.tmp"  # in the simulator's directory: an attribute's next content, before its rename
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_REWRITE = os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


NULL_DEVICE = os.makedev(1, 3)  # what every node of a --char-devices host is (/dev/null's numbers)
CHAR_DEVICES_MARK = "char-devices"


def char_devices(root: Path) -> bool:
    """Whether this simulated host makes real (null) character device nodes (``sim init --char-devices``)."""
    return (root / ".vgpukit-sim" / CHAR_DEVICES_MARK).exists()


@dataclass
class SimTree:
    """Paths of a simulated host rooted at ``root``, and the only way the simulator changes them.

    Every change resolves its path and refuses (:class:`~vgpukit.errors.InvalidInput`, naming the
    path) one that leads outside the root, e.g. through a planted symlink; with a ``journal`` (a
    reaction in flight) it records the path's state before changing it.

    Resolving a path costs an ``lstat`` per component, so directories already found to be real
    (no symlink on the way) are remembered for this instance's life; removing a directory forgets them.
    """

    root: Path
    journal: Journal | None = None
    real_dirs: set[str] = field(default_factory=set, repr=False)
    resolved: bool = False  # ``root`` is already its real path (the simulated kernel resolves it once)
    umask: int | None = None  # the process's, read at the first file created (the kernel keeps it)
    char_nodes: bool | None = None  # :func:`char_devices`, looked up at the first device node
    links: dict[str, str] = field(default_factory=dict, repr=False)  # link -> real path, for this tree's life
    held: HeldOpen | None = field(default=None, repr=False)  # set: new files are closed by it, together
    headers: dict[str, int] = field(default_factory=dict, repr=False)  # bdf -> header type, of what it created

    def __post_init__(self) -> None:
        if not self.resolved:
            self.root = Path(os.path.realpath(self.root))
        self.real_dirs.add(str(self.root))

    # ------------------------------------------------------------------ changes
    def inside(self, path: Path, follow: bool, is_dir: bool = False) -> str:
        """The real path to change: ``path`` resolved (``follow``; ``is_dir``: a directory, remembered
        as real once seen) or its resolved parent + name."""
        if follow:
            real = self._realpath(str(path), is_parent=is_dir)
        else:
            real = os.path.join(self._realpath(str(path.parent), is_parent=True), path.name)
        return self._check(real, path)

    def is_dir(self, path: Path) -> bool:
        """``os.path.isdir``, answered from the directories already found real."""
        return self._realpath(str(path), is_parent=True) in self.real_dirs

    def _realpath(self, path: str, depth: int = 0, is_parent: bool = False) -> str:
        """``os.path.realpath``, with a link inside the root followed by its ``readlink`` (not by
        resolving its target from ``/``), a directory known to be real not looked at again, and a
        link already followed by this tree (one write) not read again."""
        if path in self.real_dirs:
            return path
        known = self.links.get(path)
        if known is not None:
            return known
        parent, name = os.path.split(path)
        if not name or name in (".", "..") or parent == path or not parent.startswith(str(self.root)) or depth > 40:
            return os.path.realpath(path)
        real_parent = self._realpath(parent, depth, is_parent=True)
        if real_parent != parent:
            return self._realpath(os.path.join(real_parent, name), depth + 1, is_parent)
        try:
            target = os.readlink(path)
        except FileNotFoundError:
            return path
        except OSError as exc:  # not a link
            if exc.errno != errno.EINVAL:
                raise
            if is_parent and stat.S_ISDIR(os.lstat(path).st_mode):
                self.real_dirs.add(path)
            return path
        rest = target.lstrip("./") if not target.startswith("/") else ".."
        if ".." in rest.split("/"):
            return os.path.realpath(path)  # ".." after a name that may be a link: the OS resolves it
        real = self._realpath(os.path.normpath(os.path.join(parent, target)), depth + 1, is_parent)
        self.links[path] = real
        return real

    def resolve(self, path: Path) -> str:
        """``path``'s real path (``os.path.realpath``, with what this tree already resolved)."""
        return self._realpath(str(path))

    def _check(self, real: str, path: Path) -> str:
        if not real.startswith(str(self.root) + os.sep):
            raise InvalidInput(
                f"simulated kernel: refusing to change {path}: it leads outside the simulated host {self.root}",
                path=str(path),
            )
        return real

    def _entry(self, path: Path) -> str:
        """``path``'s real parent (created if missing) + its name, refused unless inside the root."""
        parent = self.inside(path.parent, follow=True, is_dir=True)
        if parent not in self.real_dirs:
            self.mkdir(path.parent)
        return self._check(os.path.join(parent, path.name), path)

    def _fresh(self, real: str) -> bool:
        """Whether ``real`` is in a directory this reaction created: nothing there to log or look at first."""
        return self.journal is not None and self.journal.is_fresh(real)

    def _before(self, real: str) -> dict[str, Any] | None:
        """Log ``real``'s state before a change; what was logged (None: no journal, or a fresh path)."""
        return self.journal.before(real) if self.journal is not None else None

    def _create(self, real: str, data: bytes, mode: int) -> bool:
        """A new file at ``real`` holding ``data`` with ``mode`` (given at creation: ``fchmod`` only
        where the umask would take bits away); False if something is there already."""
        try:
            fd = os.open(real, _CREATE, mode)
        except FileExistsError:
            return False
        if self.umask is None:
            self.umask = process_umask()
        write_fd(fd, data, mode if mode & self.umask else None, self.held)
        return True

    def mkdir(self, path: Path) -> None:
        """``mkdir -p`` inside the root."""
        if self.journal is not None:  # a directory this reaction knows to be new: made, nothing looked at
            real = self.inside(path, follow=False)
            if self.journal.is_fresh(real):
                with contextlib.suppress(FileExistsError, FileNotFoundError):
                    os.mkdir(real)
                    self.real_dirs.add(real)
                    self.journal.created_dir(real)
                    return
        real = self.inside(path, follow=True, is_dir=True)
        if real in self.real_dirs:
            return
        missing = []
        while not os.path.isdir(real):
            missing.append(real)
            real = os.path.dirname(real)
        for d in reversed(missing):
            self._before(d)
            os.mkdir(d)
            self.real_dirs.add(d)
            if self.journal is not None:
                self.journal.created_dir(d)

    def write_attr(self, path: Path, value: object, mode: int | None = RO) -> None:
        """Write an attribute's content; ``mode`` None keeps an existing file's (a new one gets RO)."""
        real = self._entry(path)
        data = f"{value}\n".encode()
        new_mode = RO if mode is None else mode  # a file this write creates
        if self._fresh(real) and self._create(real, data, new_mode):
            return  # else written before in this reaction: the usual way
        was = self._before(real)
        if (was["kind"] == "link") if was is not None else os.path.islink(real):
            real = self.inside(path, follow=True)
            was = self._before(real)
        if was is not None and was["kind"] == "absent" and self._create(real, data, new_mode):
            return
        old = was.get("mode") if was is not None else None
        try:
            fd = os.open(real, _REWRITE)
        except FileNotFoundError:
            if self._create(real, data, new_mode):
                return
            fd = os.open(real, _REWRITE)
        except PermissionError:  # a read-only attribute, when not root
            old = stat.S_IMODE(os.stat(real).st_mode)
            os.chmod(real, 0o644)
            fd = os.open(real, _REWRITE)
            mode = old if mode is None else mode
            old = None
        write_fd(fd, data, None if mode is None or mode == old else mode)

    def set_attr(self, path: Path, value: object) -> None:
        """Change an attribute's content, keeping its mode."""
        self.write_attr(path, value, None)

    def store(self, path: Path, value: object) -> None:
        """:meth:`set_attr` as a reaction's one and only change: the new content, in a file made in
        the simulator's directory, replaces the old in one ``rename`` (a killed process leaves the
        before or the after state), so nothing is logged; no change may follow (the journal refuses)."""
        journal = self.journal
        real = self.inside(path, follow=False)
        try:
            st = os.lstat(real) if journal is not None and journal.fd is None else None
        except FileNotFoundError:
            st = None
        if journal is None or st is None or not stat.S_ISREG(st.st_mode):
            self.set_attr(path, value)  # no journal (the builder), changes logged already, or no file
            return
        tmp = str(journal.path.with_name(STORE))
        data, mode = f"{value}\n".encode(), stat.S_IMODE(st.st_mode)
        with contextlib.suppress(FileNotFoundError):
            if not self._create(tmp, data, mode):
                os.unlink(tmp)  # left by a killed process
                self._create(tmp, data, mode)
        try:
            os.rename(tmp, real)
        except OSError:  # another file system, or the simulator's directory gone
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self.set_attr(path, value)
            return
        journal.sealed = True

    def link(self, path: Path, target: Path) -> None:
        """A relative symlink ``path`` -> ``target`` (as sysfs makes them)."""
        real = self._entry(path)
        rel = os.path.relpath(target, os.path.dirname(real))
        if self._fresh(real):
            with contextlib.suppress(FileExistsError):
                os.symlink(rel, real)
                return
        was = self._before(real)
        if (was is None or was["kind"] != "absent") and os.path.lexists(real):
            os.unlink(real)
            self.links.clear()
        os.symlink(rel, real)

    def unlink(self, path: Path) -> None:
        real = self.inside(path, follow=False)
        if os.path.lexists(real):
            self._before(real)
            os.unlink(real)
            self.links.clear()

    def remove_tree(self, d: Path) -> None:
        """Remove a device directory with its attributes and links (never following links)."""
        real = self.inside(d, follow=True)
        for top, dirs, files in os.walk(real, topdown=False):
            links = [n for n in dirs if os.path.islink(os.path.join(top, n))]
            for name in files + links:
                self._before(os.path.join(top, name))
                os.unlink(os.path.join(top, name))
            for name in dirs:
                if name not in links:
                    self._before(os.path.join(top, name))
                    os.rmdir(os.path.join(top, name))
        self._before(real)
        os.rmdir(real)
        self.real_dirs.clear()
        self.real_dirs.add(str(self.root))
        self.links.clear()

    def make_devnode(self, path: Path, major: int, minor: int) -> None:
        """A simulated device node: a plain file naming the numbers it stands for.

        Never a real character device of those numbers: on a GPU host, 195:0 *is* the real
        /dev/nvidia0, and nothing done on a simulated host may reach real hardware. A host made with
        ``sim init --char-devices`` (root only) has real character nodes instead, all with the numbers
        of /dev/null (1:3), so that a container engine can create them in a container (docs/cdi.md).
        """
        real = self._entry(path)
        if self.journal is None and os.path.lexists(real):
            return
        if self.journal is not None and not self._fresh(real) and (self._before(real) or {})["kind"] != "absent":
            return  # there already (logged, unchanged)
        if self.char_nodes is None:
            self.char_nodes = char_devices(self.root)
        if not self.char_nodes:  # made only if absent (a fresh path may be there)
            self._create(real, f"simulated character device {major}:{minor}\n".encode(), RW)
            return
        with contextlib.suppress(FileExistsError):
            os.mknod(real, stat.S_IFCHR | 0o666, NULL_DEVICE)
            os.chmod(real, 0o666)

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
        return Path(self._realpath(str(self.device_link(bdf))))

    def driver_dir(self, driver: str) -> Path:
        return self.bus_pci / "drivers" / driver

    def group_dir(self, group: int) -> Path:
        return self.sys / "kernel" / "iommu_groups" / str(group)

    def devnode(self, *parts: str) -> Path:
        return self.root.joinpath("dev", *parts)

    # ------------------------------------------------------------------ devices
    def add_pci_device(
        self, parent_dir: Path, bdf: str, spec: dict[str, Any], numa: int | None, cpulist: str | None, group: int
    ) -> Path:
        """Create a PCI function directory with its attributes and bus/group links."""
        d = parent_dir / bdf
        self.mkdir(d)
        vendor, device = spec["ids"].split(":")
        self.write_attr(d / "vendor", f"0x{vendor}")
        self.write_attr(d / "device", f"0x{device}")
        sub = spec.get("subsystem", spec["ids"]).split(":")
        self.write_attr(d / "subsystem_vendor", f"0x{sub[0]}")
        self.write_attr(d / "subsystem_device", f"0x{sub[1]}")
        self.write_attr(d / "class", spec["class"])
        config = config_space(spec)
        self._create(self._entry(d / "config"), config, RO)  # binary; in a new directory
        self.headers[bdf] = config[HEADER_TYPE_OFFSET] & 0x7F
        self.write_attr(d / "numa_node", -1 if numa is None else numa)
        if cpulist is not None:
            self.write_attr(d / "local_cpulist", cpulist)
        link_spec = spec.get("link")
        if link_spec:
            self.write_attr(d / "current_link_speed", link_spec[0])
            self.write_attr(d / "current_link_width", link_spec[1])
            self.write_attr(d / "max_link_speed", link_spec[2] if len(link_spec) > 2 else link_spec[0])
            self.write_attr(d / "max_link_width", link_spec[3] if len(link_spec) > 3 else link_spec[1])
        if str(spec["class"]).startswith("0x0300"):  # a VGA controller: the kernel's boot_vga flag
            self.write_attr(d / "boot_vga", 1 if spec.get("boot_vga") else 0)
        self.write_attr(d / "driver_override", "(null)", RW)
        self.write_attr(d / "enable", 1, RW)
        self.link(d / "subsystem", self.bus_pci)
        self.link(self.device_link(bdf), d)
        self.join_group(bdf, d, group)
        return d

    def join_group(self, bdf: str, d: Path, group: int) -> None:
        gdir = self.group_dir(group)
        self.mkdir(gdir)
        self.mkdir(gdir / "devices")
        self.write_attr(gdir / "type", "DMA-FQ")
        self.link(d / "iommu_group", gdir)
        self.link(gdir / "devices" / bdf, d)

    def leave_group(self, name: str, d: Path) -> None:
        """Take a device out of its IOMMU group; an empty group disappears with its /dev/vfio node."""
        group = os.path.basename(os.readlink(d / "iommu_group"))
        gdir = self.group_dir(int(group))
        self.unlink(gdir / "devices" / name)
        if not any((gdir / "devices").iterdir()):
            self.remove_tree(gdir)
            self.unlink(self.devnode("vfio", group))

    def remove_pci_device(self, bdf: str) -> None:
        self.headers.pop(bdf, None)
        d = self.device_dir(bdf)
        drv = os.readlink(d / "driver") if os.path.lexists(d / "driver") else None
        if drv:
            self.unlink(self.driver_dir(os.path.basename(drv)) / bdf)
        self.leave_group(bdf, d)
        self.unlink(self.device_link(bdf))
        self.remove_tree(d)

    # ------------------------------------------------------------------ drivers
    def add_driver(self, name: str) -> None:
        d = self.driver_dir(name)
        self.mkdir(d)
        for attr in ("bind", "unbind", "new_id", "remove_id"):
            if not (d / attr).exists():
                self.write_attr(d / attr, "", WO)

    def bound_driver(self, bdf: str) -> str | None:
        try:
            return os.path.basename(os.readlink(self.device_dir(bdf) / "driver"))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def bind(self, bdf: str, driver: str, rdma: str | None = None) -> None:
        """Bind; ``rdma``: the RDMA device this driver registers for it (``infiniband/mlx5_0``)."""
        d = self.device_dir(bdf)
        group = os.path.basename(os.readlink(d / "iommu_group")) if driver == "vfio-pci" else None
        node = None if group is None else self.devnode("vfio", group)
        self.log_before([d / "driver", self.driver_dir(driver) / bdf] + ([] if node is None else [node]))
        self.link(d / "driver", self.driver_dir(driver))
        self.link(self.driver_dir(driver) / bdf, d)
        if rdma is not None:
            self.write_attr(d / "infiniband" / rdma / "node_type", "1: CA")
        if node is not None:
            self.make_devnode(node, 243, int(str(group)))

    def unbind(self, bdf: str) -> None:
        drv = self.bound_driver(bdf)
        if drv is None:
            return
        d = self.device_dir(bdf)
        self.unlink(d / "driver")
        self.unlink(self.driver_dir(drv) / bdf)
        if os.path.isdir(d / "infiniband"):  # the driver's RDMA devices go with it
            self.remove_tree(d / "infiniband")
        if drv == "vfio-pci":
            group = os.path.basename(os.readlink(d / "iommu_group"))
            members = (self.group_dir(int(group)) / "devices").iterdir()
            if not any(self.bound_driver(m.name) == "vfio-pci" for m in members):
                self.unlink(self.devnode("vfio", group))

    def log_before(self, paths: list[Path]) -> None:
        """Log the state of the entries at ``paths`` (parents resolved) before changing them, in one append."""
        if self.journal is not None:
            self.journal.before_all([self.inside(p, follow=False) for p in paths])

    def expect_new(self, paths: list[Path]) -> None:
        """Log, in one append, the paths of ``paths`` that do not exist (each directory listed once):
        the reaction creates them next, with nothing more to look at or log. One that exists is left
        to be logged as it is changed."""
        if self.journal is None:
            return
        by_dir: dict[str, list[str]] = {}
        for p in paths:
            by_dir.setdefault(self.inside(p.parent, follow=True, is_dir=True), []).append(p.name)
        new = []
        for d, names in by_dir.items():
            try:
                there = set(os.listdir(d))
            except FileNotFoundError:
                there = set()
            new += [self._check(os.path.join(d, n), Path(d, n)) for n in names if n not in there]
        self.journal.absent(new)

    def all_bdfs(self) -> list[str]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(os.listdir(self.bus_pci / "devices"))
        return []
