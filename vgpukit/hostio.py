"""Low-level pieces of the host door: how a control-file write reaches the kernel, canonical paths
without a per-component walk, durable renames. Used only by :mod:`vgpukit.host` (and the journal)."""

from __future__ import annotations

import errno
import mmap
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import msgspec

from .errors import VgpukitError, from_oserror, storage_error
from .host_layout import SELF_FD


def _debug(msg: str, *args: object) -> None:
    """The host door's debug logging, loaded when a change or a program run needs it (mdevctl's reads
    load no logging)."""
    import logging

    logging.getLogger("vgpukit.host").debug(msg, *args)


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


def _real_path(path: Path | str) -> str:
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


class Change(msgspec.Struct, frozen=True):
    """One change to the host, as recorded in dry-run mode and in the change log."""

    action: str  # write | write-file | remove | mkdir | symlink
    path: str
    value: str | None = None

    def describe(self) -> str:
        if self.action == "write":
            return f"write {self.value!r} > {self.path}"
        if self.action == "write-file":
            return f"write file {self.path}"
        return f"{self.action} {self.path}" + (f" -> {self.value}" if self.value else "")


# How an error line says each change of a file (kernel control-file writes keep their own words).
VERBS = {
    "write-file": "writing",
    "remove": "removing",
    "mkdir": "creating the directory",
    "create": "opening",
    "append": "writing",
    "record": "writing",
}


def change_error(exc: OSError, shown: Change) -> VgpukitError:
    """The typed error of a failed change: a kernel control file's errno is the kernel's answer (ENOSPC:
    no capacity); a file's names the file and what to free or fix on a full or read-only file system."""
    if shown.action == "write":
        return from_oserror(exc, path=shown.path, action=f"write {shown.value!r} to", value=shown.value)
    return storage_error(exc, path=shown.path, action=VERBS.get(shown.action, shown.action))


class ProgramResult(msgspec.Struct, frozen=True):
    """What a program run through the host door did: exit code (None when a signal ended it or it
    could not be started or timed out), its output (capped), and why it did not run when it did not."""

    rc: int | None
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # "not executable", "timed out after N s"... ("" when it ran to an exit)


MAX_PROGRAM_OUTPUT = 1024 * 1024


def run_program(
    argv: list[str], stdin: str | None, env: dict[str, str], timeout: float, cwd: str = "/"
) -> ProgramResult:
    """Run ``argv`` (no shell), ``stdin`` written then closed (an empty, closed stdin when None)."""
    import subprocess  # only commands that run programs pay for it

    try:
        proc = subprocess.run(
            argv,
            input=(stdin or "").encode(),
            capture_output=True,
            env={**os.environ, **env},
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ProgramResult(None, error=f"timed out after {timeout:g} s")
    except OSError as exc:
        return ProgramResult(None, error=os.strerror(exc.errno) if exc.errno else str(exc))
    out = proc.stdout[:MAX_PROGRAM_OUTPUT].decode(errors="replace")
    err = proc.stderr[:MAX_PROGRAM_OUTPUT].decode(errors="replace")
    return ProgramResult(proc.returncode if proc.returncode >= 0 else None, out, err)


def follow_link(link: str, real_root: str, root_text: str, resolve: Callable[[str], str]) -> str:
    """A symlink's real target: its text joined to its (real) directory, then resolved by ``resolve``
    as a path under ``root_text`` (component by component, remembered: no realpath from ``/``);
    ``os.path.realpath`` when it leaves the root or has ".." after a name that may itself be a link."""
    text = os.readlink(link)
    target = os.path.normpath(os.path.join(os.path.dirname(link), text))
    if not target.startswith(real_root + "/") or ".." in text.lstrip("./").split("/"):
        return os.path.realpath(link)
    return resolve(root_text + target[len(real_root) :])
