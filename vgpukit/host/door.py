"""The one door to the host: :class:`Host`.

Every path vgpukit reads or writes (/sys, /dev, /proc, /etc, /run) is derived from one root (``--root`` /
``VGPUKIT_ROOT``, default ``/``), as mdevctl does. ``Host`` is assembled from the rooms of this package,
each holding one concern (docs/engine.md, "The host door"):

* :mod:`.contain` -- the root, the one join of a path under it, and refusing what leads outside
  (reads, listings, socket addresses and link resolution confined to the root; docs/safety.md);
* :mod:`.kernel_paths` -- where the kernel lays things out (/sys, /dev, /proc);
* :mod:`.file_places` -- where vgpukit's and other programs' files live (/etc, /run, /var/lib);
* :mod:`.changes` -- the one gate every change passes through: refused outside the root, recorded,
  not made in dry-run mode, logged at debug level, an ``OSError`` turned into a typed error;
* :mod:`.fileio` -- the reads and writes themselves, on what containment opened or checked;
* :mod:`.programs` -- programs run under the root (mdevctl's callout scripts).

This module holds the reads: documents (configs, definitions, records, templates) with
:meth:`Host.read_doc` (regular), attributes with :meth:`Host.read` (capped), listings, links, nodes.
Writes to kernel control files go through a :class:`~.fileio.KernelPort`: a plain ``write(2)`` on a
real host; the simulator (``vgpukit.sim``) plugs in a port that plays the kernel's reactions.
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..errors import InvalidInput, NotFound, OutsideRoot, from_oserror
from ..inputs import MAX_DOC_BYTES, check_component
from .changes import Change, Changes, debug
from .contain import real_path
from .file_places import FilePlaces
from .fileio import DirFiles, KernelPort, RealKernel, TempNames, map_regular, read_capped, read_document
from .kernel_paths import KernelPaths
from .programs import ProgramResult, run_program

T = TypeVar("T")

MAX_ATTR_BYTES = 1024 * 1024  # a sysfs/proc attribute: 4 KiB on Linux; anything far larger is not one
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY  # never block on a FIFO


def check_name(name: str, what: str = "name") -> str:
    """Validate one user-supplied path component (a device name, a uuid, a type id)."""
    return check_component(name, what)


class Host(KernelPaths, FilePlaces, Changes):
    """Root-aware access to the host's files. Construct one per command; never a global.
    (A plain class: every command creates one, and a dataclass costs start-up time to define.)"""

    def __init__(
        self,
        root: Path = Path("/"),
        kernel: KernelPort | None = None,
        dry_run: bool = False,
        changes: list[Change] | None = None,
        watch: Callable[[Change], None] | None = None,
    ) -> None:
        self.kernel = kernel if kernel is not None else RealKernel()
        self.watch = watch  # told of every change before it is made (the simulator's crash testing)
        self.dry_run = dry_run
        self.changes = [] if changes is None else changes
        self.root = Path(os.path.abspath(root))
        self._root_text = str(self.root).rstrip("/")
        self._real_root = os.path.realpath(self.root)
        self._confined = self._real_root != "/"  # with root /, every path is inside
        self._real_dirs = {}  # directory -> where it really is (inside the root)
        self._plain = set()  # files found not to be links, in directories inside the root
        self._temps = TempNames()  # names of the temporaries write_file renames into place

    # ----------------------------------------------------------------- reads
    def _read_op(self, action: str, path: Path | str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except OSError as exc:
            raise from_oserror(exc, path=self.display(path), action=action) from exc

    def exists(self, path: Path | str) -> bool:
        """Whether ``path`` exists (a link counts, wherever it points). Contained."""
        return self._stat(path, follow=False) is not None

    def is_dir(self, path: Path | str) -> bool:
        """A directory (links followed inside the root). Contained."""
        return (st := self._stat(path)) is not None and stat.S_ISDIR(st.st_mode)

    def _read_bytes(self, path: Path | str, limit: int) -> bytes:
        data = read_capped(self._open_contained(path, _READ_FLAGS), limit)
        if len(data) > limit:
            raise InvalidInput(f"{self.display(path)}: larger than {limit} bytes", path=self.display(path))
        return data

    def _attr(self, path: Path | str) -> str:
        return self._read_bytes(path, MAX_ATTR_BYTES).decode(errors="replace").strip()

    def is_file(self, path: Path | str) -> bool:
        """A regular file (links followed inside the root), not a directory, socket or device. Contained."""
        return (st := self._stat(path)) is not None and stat.S_ISREG(st.st_mode)

    def read(self, path: Path | str) -> str:
        """Text of a file (a sysfs/proc attribute), surrounding white space stripped. Contained."""
        return self._read_op("reading", path, lambda: self._attr(path))

    def read_opt(self, path: Path | str, default: str | None = None) -> str | None:
        try:
            return self._attr(path)
        except OSError:
            return default

    def read_raw_opt(self, path: Path | str) -> str | None:
        """A whole file's text as stored (no stripping), or None when absent; contained, size-capped."""
        try:
            return self._read_bytes(path, MAX_DOC_BYTES).decode(errors="replace")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise from_oserror(exc, path=self.display(path), action="reading") from exc

    def read_bytes_opt(self, path: Path | str, limit: int) -> bytes | None:
        """At most ``limit`` bytes of a binary file, or None when it does not exist. Contained."""
        try:
            return read_capped(self._open_contained(path, _READ_FLAGS), limit)[:limit]
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise from_oserror(exc, path=self.display(path), action="reading") from exc

    def map_opt(self, path: Path | str) -> mmap.mmap | None:
        """A regular file mapped read-only, searched in place (pci.ids); None if absent or empty. Contained."""
        try:
            return map_regular(self._open_contained(path, _READ_FLAGS))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise from_oserror(exc, path=self.display(path), action="reading") from exc

    def read_int(self, path: Path | str, default: int | None = None, base: int = 0) -> int | None:
        text = self.read_opt(path)
        if text is None or text == "":
            return default
        try:
            return int(text, base)
        except ValueError:
            return default

    def read_doc(
        self,
        path: Path | str,
        what: str,
        max_bytes: int = MAX_DOC_BYTES,
        *,
        missing_ok: bool = False,
        user_file: bool = False,
    ) -> str | None:
        """A document (config, definition, record, template): a regular UTF-8 file of at most
        ``max_bytes``, inside the root. ``user_file``: a path the user named on the command line
        (``-f FILE``), read where it is -- same file rules, no containment. None when absent and
        ``missing_ok``."""
        shown = os.fspath(path) if user_file else self.display(path)
        try:
            fd = os.open(path, _READ_FLAGS) if user_file else self._open_contained(path, _READ_FLAGS)
        except FileNotFoundError as exc:
            if missing_ok:
                return None
            raise NotFound(f"{what} {shown} does not exist", path=shown, errno=exc.errno) from None
        except OSError as exc:
            raise from_oserror(exc, path=shown, action=f"reading {what}") from None
        try:
            return read_document(fd, f"{what} {shown}", max_bytes)
        except OSError as exc:
            raise from_oserror(exc, path=shown, action=f"reading {what}") from None
        except ValueError as exc:
            raise InvalidInput(str(exc), path=shown) from None

    def listdir(self, path: Path | str) -> list[str]:
        """Sorted entries of a directory; empty when it does not exist. Contained."""
        try:
            if not self._confined:
                return sorted(os.listdir(path))
            try:  # its real path (each component checked, links followed inside the root), listed by name
                real = self._real_dir(os.path.abspath(path))
            except OutsideRoot:
                raise self._outside(path) from None
            return sorted(os.listdir(real))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise from_oserror(exc, path=self.display(path), action="listing") from exc

    def files(self, path: Path | str) -> DirFiles:
        """A directory's files read by name: resolved (contained) and listed once (``with`` it)."""
        real = self._real_dir(os.path.abspath(path)) if self._confined else os.fspath(path)  # or OutsideRoot
        return self._read_op("listing", path, lambda: DirFiles(real, f"{path}/", self.read_opt, MAX_ATTR_BYTES))

    def readlink(self, path: Path | str) -> str | None:
        """A symlink's target as text (never followed here; use :meth:`resolve` to use it as a path)."""
        try:
            return os.readlink(self._where(path))
        except OSError:
            return None

    def link_name(self, path: Path | str) -> str | None:
        """Last component of a symlink's target (``driver`` -> ``vfio-pci``), or None."""
        return os.path.basename(target.rstrip("/")) if (target := self.readlink(path)) else None

    def char_device(self, path: Path | str) -> tuple[int, int] | None:
        """(major, minor) of a character device node, or None (absent, or not a real node)."""
        st = self._stat(path)
        return (os.major(st.st_rdev), os.minor(st.st_rdev)) if st is not None and stat.S_ISCHR(st.st_mode) else None

    def is_block_device(self, path: Path | str) -> bool:
        """A block device node (a disk a VM may use; links followed inside the root). Contained."""
        return (st := self._stat(path)) is not None and stat.S_ISBLK(st.st_mode)

    def resolve(self, path: Path) -> Path:
        """Canonical path, which must stay inside the root."""
        real = real_path(path)
        if self._confined and not self._inside(real):
            raise self._outside(path)
        return Path(real)

    def device_path(self, link: Path) -> str | None:
        """Text naming where a device link leads (``../../devices/pci0000:00/...``): its target, or
        under a root its real path below the root, as the reads of the device's files resolve it."""
        if not self._confined:
            return self.readlink(link)
        real = self._real_dir(os.path.abspath(link))  # refused outside
        return real[len(self._real_root) :] if real.startswith(self._real_root + "/") else "/"

    def real_directory(self, path: Path | str) -> str:
        """Where the directory ``path`` really is, resolved inside the root (refused outside): what the
        watch layer (:mod:`vgpukit.host.notify`) gives inotify."""
        whole = os.path.abspath(path)
        if not self._confined:
            return whole
        try:
            return self._real_dir(whole)
        except OutsideRoot:
            raise self._outside(path) from None

    def socket_address(self, path: Path) -> str:
        """The address to bind or connect a Unix socket at ``path``: its directory must resolve
        inside the root (a socket is created through its directory, which may be a planted link)."""
        if not self.contains(os.path.dirname(os.path.abspath(path))):
            raise self._outside(path)
        return str(path)

    def run_program(
        self, path: Path, args: list[str], stdin: str | None, timeout: float, env: dict[str, str] | None = None
    ) -> ProgramResult:
        """Run ``path`` (a hook script under the root), refused outside the root; VGPUKIT_ROOT and ``env`` set."""
        self.check_inside(path)
        debug("run %s %s", self.display(path), " ".join(args))
        return run_program([str(path), *args], stdin, {**(env or {}), "VGPUKIT_ROOT": str(self.root)}, timeout)
