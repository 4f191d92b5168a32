"""The host door's file I/O, on descriptors the door opened (contained) or paths it checked: how a
control-file write reaches the kernel (:class:`KernelPort`), capped reads of attributes and documents, a
directory's files read by name (:class:`DirFiles`, what :meth:`vgpukit.host.Host.files` returns), a file
mapped in place, and atomic, durable writes (a temporary renamed over, the directory fsync'd). No root,
no containment here: :mod:`.contain` decides what may be opened; this opens, reads and writes it."""

from __future__ import annotations

import errno
import mmap
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Protocol


class KernelPort(Protocol):
    """How a control-file write reaches the kernel."""

    def write(self, path: Path, data: str) -> None: ...


class RealKernel:
    """A single ``write(2)`` of the whole value, as sysfs expects."""

    def write(self, path: Path, data: str) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)


def read_capped(fd: int, limit: int) -> bytes:
    """What the open file ``fd`` holds, up to a little over ``limit`` bytes (the caller refuses more);
    closes ``fd``. A short read is the end: sysfs attributes come whole, in one read."""
    try:
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, 65536)
            chunks.append(chunk)
            size += len(chunk)
            if len(chunk) < 65536:
                break
    finally:
        os.close(fd)
    return b"".join(chunks)


class DirFiles:
    """One directory's files read by name: the directory (its real path, resolved inside the root by
    the host door) opened and listed once, each listed file opened relative to it without following
    links; a name that is a link, or too large, is read by ``checked`` (the host door's checked read
    of ``prefix`` + the name)."""

    def __init__(self, real: str, prefix: str, checked: Callable[[str], str | None], limit: int) -> None:
        self.prefix, self.checked, self.limit, self.fd = prefix, checked, limit, -1
        self.names: frozenset[str] = frozenset()
        try:
            self.fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            self.names = frozenset(os.listdir(self.fd))
        except BaseException:
            os.close(self.fd)
            raise

    def __enter__(self) -> DirFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def read(self, name: str, default: str | None = None) -> str | None:
        """The attribute's text, stripped (``default`` when not listed or unreadable)."""
        if name not in self.names:
            return default
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError as exc:
            return self.checked(self.prefix + name) if exc.errno in (errno.ELOOP, errno.ENOTDIR) else default
        try:
            data = read_capped(fd, self.limit)
        except OSError:  # a directory, an attribute the kernel refuses to read
            return default
        return data.decode(errors="replace").strip() if len(data) <= self.limit else self.checked(self.prefix + name)

    def link_name(self, name: str) -> str | None:
        """Last component of the link ``name``'s target (``driver`` -> ``vfio-pci``), or None."""
        if name not in self.names:
            return None
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError:
            return None
        return os.path.basename(target.rstrip("/")) if target else None


def read_document(fd: int, shown: str, max_bytes: int) -> str:
    """The text of the open regular file ``fd`` (closed here): ValueError naming ``shown`` when it is
    not a regular file, is larger than ``max_bytes`` or is not UTF-8."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{shown} is not a regular file")
        if st.st_size > max_bytes:
            raise ValueError(f"{shown} is larger than {max_bytes} bytes")
        data = os.read(fd, st.st_size + 1)  # one read for a regular file; more if it grew meanwhile
        while data and len(data) <= max_bytes and (more := os.read(fd, max_bytes + 1 - len(data))):
            data += more
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError(f"{shown} is larger than {max_bytes} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ValueError(f"{shown} is not UTF-8 text") from None


def map_regular(fd: int) -> mmap.mmap | None:
    """The open file ``fd`` mapped read-only when it is a non-empty regular file, else None; closes ``fd``."""
    try:
        st = os.fstat(fd)
        return mmap.mmap(fd, 0, prot=mmap.PROT_READ) if stat.S_ISREG(st.st_mode) and st.st_size else None
    finally:
        os.close(fd)


class TempNames:
    """Names of one command's temporaries: a random tag drawn once, then a counter."""

    def __init__(self) -> None:
        self.tag = ""
        self.n = 0

    def __call__(self, path: Path) -> Path:
        if not self.tag:
            self.tag = os.urandom(5).hex()
        self.n += 1
        return path.parent / f".{path.name}.{self.tag}{self.n:x}"


def write_atomic(path: Path, text: str, mode: int, names: TempNames) -> None:
    """Create or replace the regular file ``path`` atomically and durably: a temporary ``.NAME.xxxx``
    beside it (created exclusively, never through a link), written, chmod'ed and fsync'd, renamed over
    ``path``, then the directory fsync'd. The directory is made only when it is missing."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in range(100):
        tmp = names(path)
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            if attempt == 99:
                raise
    else:
        fd = os.open(tmp, flags, 0o600)
    try:
        try:
            data = memoryview(text.encode())
            while data:
                data = data[os.write(fd, data) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
