"""Storage faults of a simulated host: the file system holding a path is full, over quota, read-only
or failing (``vgpukit sim fault storage DIR ERROR``).

The simulator's own fact, kept in its bookkeeping directory (``storage-faults.json``: path -> errno
name), and played by the host door's watch (:meth:`vgpukit.sim.kernel.SimKernel.changing`) as the file
system would: a full one (ENOSPC) or one over quota (EDQUOT) refuses what takes space (writing a
file, creating one or a directory) and still lets files be removed; a read-only one (EROFS) and a
failing disk (EIO) refuse every change. The product's own code runs as on a real host: the change
fails with the errno, and whatever the product does with that is what it does on a real one.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from ..errors import InvalidInput
from .state import STORAGE_FAULTS as FILE
from .state import sim_meta_dir

ERRORS = {"ENOSPC": errno.ENOSPC, "EDQUOT": errno.EDQUOT, "EROFS": errno.EROFS, "EIO": errno.EIO}
TAKES_SPACE = frozenset({"write-file", "mkdir", "create", "append", "record", "symlink"})
KERNEL_DIRS = frozenset({"sys", "proc", "dev"})  # top-level directories of the kernel's files, not a disk's


def load(root: Path) -> dict[str, str]:
    """The faults in force: path (as the host sees it) -> errno name; empty when there are none."""
    try:
        with open(sim_meta_dir(root) / FILE) as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        raise InvalidInput(f"the simulator's {FILE} is not readable: remove it") from None
    return {str(k): str(v) for k, v in doc.items() if v in ERRORS} if isinstance(doc, dict) else {}


def _holding(faults: dict[str, str], path: str) -> str | None:
    """The fault (its directory) of the file system holding ``path``: the deepest one covering it (a fault
    set on a deeper directory is a file system of its own mounted there)."""
    covering = [p for p in faults if path == p or path.startswith(p + "/")]
    return max(covering, key=len) if covering else None


def normalize(path: str) -> str:
    """An absolute directory of the host's files, as the host sees it (``/run``, ``/etc/cdi``)."""
    parts = path.split("/")
    if not path.startswith("/") or ".." in parts:
        raise InvalidInput(f"{path}: give an absolute directory of the host's files without '..' (/run, /etc/cdi...)")
    norm = os.path.normpath(path)
    if norm == "/" or norm.split("/")[1] in KERNEL_DIRS:
        raise InvalidInput(f"{path}: name a directory of the host's files (/run, /etc/cdi...), not / or a kernel one")
    return norm


def set_fault(root: Path, path: str, error: str | None) -> dict[str, str]:
    """Make the file system holding ``path`` fail with ``error`` (None: the one holding it works again,
    whichever directory its fault was set on); the faults now."""
    norm = normalize(path)
    faults = load(root)
    if error is None:
        holding = _holding(faults, norm)
        if holding is not None:
            del faults[holding]
    else:
        faults[norm] = error
    _save(root, faults)
    return faults


def clear(root: Path) -> None:
    """Every storage fault gone (``vgpukit sim fault clear``)."""
    _save(root, {})


def _save(root: Path, faults: dict[str, str]) -> None:
    target = sim_meta_dir(root) / FILE
    if faults:
        tmp = target.with_name(f".{FILE}.tmp")
        tmp.write_text(json.dumps(faults, indent=1, sort_keys=True) + "\n")
        tmp.replace(target)
    else:
        target.unlink(missing_ok=True)


def check(faults: dict[str, str], action: str, path: str, root: Path) -> None:
    """Raise the OSError the file system holding ``path`` (as the host sees it; ``root``: the simulated
    host) gives to ``action`` (a host-door change), if any."""
    holding = _holding(faults, path)
    if holding is None:
        return
    code = ERRORS[faults[holding]]
    if code in (errno.ENOSPC, errno.EDQUOT) and (
        action not in TAKES_SPACE or (action == "create" and os.path.lexists(f"{root}{path}"))
    ):
        return  # removing a file, opening one that is there take no space
    raise OSError(code, os.strerror(code), path)
