"""Containment: the host root, the one join that names a path under it (:meth:`Containment.path`) and its
inverse (:meth:`Containment.display`), where such a path really is, and refusing what leads outside.

:class:`vgpukit.host.Host` is built on this: every read, listing, link resolution, socket address and
change of the host door asks here first (docs/safety.md), and every place the door names (the kernel's,
:mod:`.kernel_paths`; vgpukit's and other programs' files, :mod:`.file_places`) is joined here.
Directories are resolved component by component inside the root and remembered for the command (one
``lstat`` per new component, a ``readlink`` only where one is a link); a file that is itself a link is
followed only by an ``O_PATH`` open whose real path is checked before anything is opened for reading.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from ..errors import InvalidInput, OutsideRoot

# This process's open files (the door resolves what an fd really opened): never under the root.
SELF_FD = "/proc/self/fd"


def real_path(path: Path | str) -> str:
    """The canonical path, as the kernel resolves it: an ``O_PATH`` open and one readlink of its
    ``/proc/self/fd`` entry, instead of an lstat per component; ``realpath`` where that cannot be."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return os.path.realpath(path)
    try:
        return os.readlink(f"{SELF_FD}/{fd}")
    except OSError:
        return os.path.realpath(path)
    finally:
        os.close(fd)


def follow_link(link: str, real_root: str, root_text: str, resolve: Callable[[str], str]) -> str:
    """A symlink's real target: its text joined to its (real) directory, then resolved by ``resolve``
    as a path under ``root_text`` (component by component, remembered: no realpath from ``/``);
    ``os.path.realpath`` when it leaves the root or has ".." after a name that may itself be a link."""
    text = os.readlink(link)
    target = os.path.normpath(os.path.join(os.path.dirname(link), text))
    if not target.startswith(real_root + "/") or ".." in text.lstrip("./").split("/"):
        return os.path.realpath(link)
    return resolve(root_text + target[len(real_root) :])


class Containment:
    """The root's names and checks, shared by every access of the host door (attributes set by ``Host``)."""

    root: Path
    _root_text: str  # the root as given, without a trailing slash
    _real_root: str  # the root with its links resolved
    _confined: bool  # False with root /: every path is inside
    _real_dirs: dict[str, str]  # directory -> where it really is (inside the root)
    _plain: set[str]  # files found not to be links, in directories inside the root

    def path(self, *parts: str) -> Path:
        """``root/parts...``. Parts are relative; ``..`` and absolute parts are refused."""
        pieces = [self._root_text]
        for part in parts:
            text = os.fspath(part)
            if text.startswith("/") or "\0" in text:
                raise InvalidInput(f"refusing path component {text!r}", value=part)
            for piece in text.split("/"):
                if piece == "..":
                    raise InvalidInput(f"refusing path component {piece!r}", value=part)
                if piece and piece != ".":
                    pieces.append(piece)
        return Path("/".join(pieces) or "/")

    def display(self, path: Path | str) -> str:
        """The path as the user would see it on the host (root stripped)."""
        text = os.fspath(path)
        if text.startswith(self._root_text + "/") and "/." not in text and "//" not in text and text[-1] != "/":
            return text[len(self._root_text) :]  # already plain under the root: nothing to normalize
        rel = os.path.relpath(p := os.path.abspath(path), self.root)
        return "/" + rel if not rel.startswith("..") else p

    def contains(self, path: Path | str) -> bool:
        return not self._confined or self._inside(real_path(path))

    def _inside(self, real: str) -> bool:
        return real == self._real_root or real.startswith(self._real_root + "/")

    def _outside(self, path: Path | str) -> OutsideRoot:
        shown = self.display(path)
        return OutsideRoot(f"refusing {shown}: it leads outside the host root {self.root}", path=shown)

    def check_inside(self, path: Path | str) -> Path:
        """``path`` itself, refused when its resolution (symlinks followed) leaves the root."""
        if not self.contains(path):
            raise self._outside(path)
        return Path(path)

    def _check_fd(self, fd: int, path: Path | str) -> None:
        """Refuse an open file whose real path lies outside the root: one readlink, no path walk."""
        if not self._confined:
            return
        try:
            real = os.readlink(f"{SELF_FD}/{fd}")
        except OSError:  # no /proc: walk the path instead
            real = os.path.realpath(path)
        if not self._inside(real):
            raise self._outside(path)

    def _where(self, path: Path | str) -> str:
        """``path`` with its directory resolved inside the root (refused outside), its last component
        as named: what an ``lstat`` or ``readlink`` may use without following a link out."""
        whole = os.path.abspath(path)
        if not self._confined or whole == self._root_text:
            return whole
        parent, name = os.path.split(whole)
        try:
            return os.path.join(self._real_dir(parent), name)
        except OutsideRoot:
            raise self._outside(path) from None

    def _stat(self, path: Path | str, follow: bool = True) -> os.stat_result | None:
        """``stat`` (``lstat`` unless ``follow``) of ``path``, None when absent. Contained: the directory
        resolved inside the root; a final link followed only by an ``O_PATH`` open whose real path is
        then checked (nothing is opened for reading: a device node is not touched)."""
        target = self._where(path)
        try:
            st = os.lstat(target)
        except OSError:
            return None
        if not (follow and stat.S_ISLNK(st.st_mode)):
            return st
        try:
            fd = os.open(target, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return None  # a dangling link
        try:
            self._check_fd(fd, path)
            return os.fstat(fd)
        finally:
            os.close(fd)

    def _real_dir(self, directory: str, depth: int = 0) -> str:  # depth: links followed to get here
        """Where ``directory`` really is, refused outside the root. Resolved component by component and
        remembered for the command: an lstat per new component, a readlink only where one is a link."""
        real = self._real_dirs.get(directory)
        if real is not None:
            return real
        if directory == self._root_text:
            real = self._real_root
        elif depth > 40 or not directory.startswith(self._root_text + "/"):  # a link loop, or outside
            real = real_path(directory)
        else:
            parent, name = os.path.split(directory)
            real = os.path.join(self._real_dir(parent, depth), name)
            try:
                if stat.S_ISLNK(os.lstat(real).st_mode):
                    real = follow_link(real, self._real_root, self._root_text, lambda d: self._real_dir(d, depth + 1))
            except OSError:
                pass  # missing: opening it will say so
        if not self._inside(real):
            raise self._outside(directory)
        self._real_dirs[directory] = real
        return real

    def place(self, link: Path, beside: Path) -> None:
        """Take the link ``link`` (``/sys/bus/pci/devices/<vf>``) to lead to the real directory of its name
        beside where ``beside`` (its PF) leads, if there is one (not read; else read when used)."""
        if not self._confined or os.path.abspath(link) in self._real_dirs:
            return
        real = os.path.join(os.path.dirname(self._real_dir(os.path.abspath(beside))), os.path.basename(link))
        try:
            if stat.S_ISDIR(os.lstat(real).st_mode) and self._inside(real):
                self._real_dirs[os.path.abspath(link)] = real
        except OSError:
            pass

    def _open_contained(self, path: Path | str, flags: int) -> int:
        """Open the file ``path`` for reading, refused when it resolves outside the root. Each directory
        is resolved once per command, its files opened under it with ``O_NOFOLLOW``; a file that is
        itself a symlink is opened, then checked on its own (the real path of its fd)."""
        if not self._confined:
            return os.open(path, flags)
        whole = os.path.abspath(path)
        parent, name = os.path.split(whole)
        try:
            target = os.path.join(self._real_dir(parent), name)
        except OutsideRoot:
            raise self._outside(path) from None
        try:
            fd = os.open(target, flags | os.O_NOFOLLOW)
            self._plain.add(whole)  # not a link, in a directory inside: a write needs no stat
            return fd
        except OSError as exc:  # a symlink: ELOOP
            if exc.errno == errno.ENOENT:
                self._plain.add(whole)  # absent, so not a link: creating it needs no stat
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        probe = os.open(target, os.O_PATH | os.O_CLOEXEC)  # follows the link without opening what it leads to
        try:
            self._check_fd(probe, path)
            return os.open(f"{SELF_FD}/{probe}", flags)  # the checked file itself, now opened for reading
        finally:
            os.close(probe)
