"""How a systemd unit starts this vgpukit (``mig service --install``, ``units install``): one rule."""

from __future__ import annotations

import os
import shutil
import sys


def entry_point(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """The command that runs this vgpukit, absolute: the installed ``vgpukit`` script running now,
    else the one on ``PATH``, else this interpreter with ``-m vgpukit``. Paths are made absolute,
    not resolved: a virtual environment's ``python`` is a link to the system's, which would not
    find vgpukit."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else argv0 or ""
    if os.path.basename(argv0) == "vgpukit" and os.path.isfile(argv0) and os.access(argv0, os.X_OK):
        return [os.path.abspath(argv0)]
    found = shutil.which("vgpukit")
    if found:
        return [os.path.abspath(found)]
    return [os.path.abspath(executable or sys.executable), "-m", "vgpukit"]
