"""The one exception hierarchy of vgpukit.

Every error carries what it is about (path, device, value, errno) and an optional hint saying what
to do. The CLI maps each class to a stable exit code (see README, "Exit codes") and prints one line.
"""

from __future__ import annotations

import errno as _errno
import os
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_NOT_FOUND = 3
EXIT_BUSY = 4
EXIT_UNSUPPORTED = 5
EXIT_SKIPPED = 6  # done for everything but the devices named: unusable (health) devices, left alone or not read


class VgpukitError(Exception):
    """Base class. ``str(err)`` is the one-line message shown to users."""

    exit_code = EXIT_FAILED
    kind = "failed"

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        device: str | None = None,
        value: Any = None,
        errno: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = os.fspath(path) if path is not None else None
        self.device = device
        self.value = value
        self.errno = errno
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"error": self.kind, "message": self.message, "exit_code": self.exit_code}
        for key in ("path", "device", "hint"):
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        if self.value is not None:
            doc["value"] = self.value if isinstance(self.value, (int, float, str, bool)) else str(self.value)
        if self.errno is not None:
            doc["errno"] = _errno.errorcode.get(self.errno, str(self.errno))
        return doc


class InvalidInput(VgpukitError):
    """The request is malformed (bad BDF, UUID, profile name, count...)."""

    exit_code = EXIT_INVALID
    kind = "invalid-input"


class OutsideRoot(InvalidInput):
    """A path whose resolution (symlinks followed) leaves the host root: refused, never read or written."""

    kind = "outside-root"


class NotFound(VgpukitError):
    """A named device, file, type, instance or domain does not exist."""

    exit_code = EXIT_NOT_FOUND
    kind = "not-found"


class Busy(VgpukitError):
    """The target is in use (open by a VM, held by processes, bound elsewhere)."""

    exit_code = EXIT_BUSY
    kind = "busy"


class DeviceUnusable(VgpukitError):
    """Refused (a command about this device) or left alone (a whole-host command, which does the rest):
    the health layer finds the device unusable (docs/health.md); the reason is given. Exit 6 whichever
    door (docs/decisions.md, "One bad device")."""

    exit_code = EXIT_SKIPPED
    kind = "unusable"


class Partial(VgpukitError):
    """A whole-host command did its work for every device but those it names (unusable devices it left
    alone, devices it could not read: each marked in its output)."""

    exit_code = EXIT_SKIPPED
    kind = "partial"


class InUse(Busy):
    """Refused: the change would destroy or move a device that a VM or process uses."""

    kind = "in-use"


class Conflict(VgpukitError):
    """The request contradicts the host's current state (exists already, wrong mode...)."""

    exit_code = EXIT_BUSY
    kind = "conflict"


class NoCapacity(Conflict):
    """Not enough room: VFs, mdev instances, MIG slices."""

    kind = "no-capacity"


class Unsupported(VgpukitError):
    """The device, host or installation cannot do this (no SR-IOV, no MIG, extra not installed)."""

    exit_code = EXIT_UNSUPPORTED
    kind = "unsupported"


class HostIOError(VgpukitError):
    """A read or write of a host file failed for a reason with no better class."""

    kind = "host-io"


class StorageFault(HostIOError):
    """A file vgpukit keeps (journal, lock, records, definitions, specs, configs) could not be written:
    the file system holding it is full, over quota, read-only or failing (docs/engine.md, "Storage
    faults"). The message names the file, the hint what to free or fix."""

    kind = "storage"


class VerifyFailed(VgpukitError):
    """A change was applied but reading it back did not show the expected state."""

    kind = "verify-failed"


_ERRNO_CLASS: dict[int, type[VgpukitError]] = {
    _errno.EBUSY: Busy,
    _errno.EEXIST: Conflict,
    _errno.ENOSPC: NoCapacity,
    _errno.EUSERS: NoCapacity,
    _errno.ERANGE: InvalidInput,
    _errno.EINVAL: InvalidInput,
    _errno.ENAMETOOLONG: InvalidInput,
    _errno.ENOENT: NotFound,
    _errno.ENODEV: NotFound,
    _errno.EOPNOTSUPP: Unsupported,
    _errno.EPERM: HostIOError,
    _errno.EACCES: HostIOError,
}


def errno_name(code: int | None) -> str:
    if code is None:
        return "?"
    return _errno.errorcode.get(code, str(code))


def from_oserror(exc: OSError, *, path: str | os.PathLike[str], action: str, value: Any = None) -> VgpukitError:
    """Turn an OSError from ``action`` on ``path`` into the typed error for its errno."""
    cls = _ERRNO_CLASS.get(exc.errno or 0, HostIOError)
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    msg = f"{action} {os.fspath(path)} failed: {errno_name(exc.errno)} ({reason})"
    hint = None
    if exc.errno in (_errno.EPERM, _errno.EACCES):
        hint = "run as root"
    return cls(msg, path=path, value=value, errno=exc.errno, hint=hint)


# A storage fault: what happened to the file system holding the file, and what to free or fix there.
_STORAGE: dict[int, tuple[str, str]] = {
    _errno.ENOSPC: ("no space left on the file system holding {dir}", "free space there"),
    _errno.EDQUOT: ("the disk quota on the file system holding {dir} is used up", "free space or raise the quota"),
    _errno.EROFS: ("the file system holding {dir} is read-only", "remount it read-write"),
    _errno.EIO: ("an I/O error on the file system holding {dir}", "check the disk: dmesg, fsck"),
}
STORAGE_ERRNOS = frozenset(_STORAGE)


def storage_error(exc: OSError, *, path: str, action: str) -> VgpukitError:
    """Turn an OSError from ``action`` (``writing``, ``removing``...) on the vgpukit-kept file ``path``
    (as the user sees it) into one line naming the file and what to free or fix; errnos that say
    nothing about the file system map as :func:`from_oserror` does."""
    if exc.errno not in _STORAGE:
        return from_oserror(exc, path=path, action=action)
    what, todo = _STORAGE[exc.errno]
    where = os.path.dirname(path) or "/"
    return StorageFault(
        f"{action} {path} failed: {what.format(dir=where)} ({errno_name(exc.errno)})",
        path=path,
        errno=exc.errno,
        hint=f"{todo}, then run the command again",
    )
