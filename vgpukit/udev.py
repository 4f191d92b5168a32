"""pyudev facade: names from the udev hardware database on a real host (lazy import).

Only consulted when the host root is ``/`` (udev knows nothing of a simulated or copied tree) and
the device is missing from vgpukit's own ``pci-ids.json``.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

log = logging.getLogger("vgpukit.udev")


@cache
def _context() -> Any:
    try:
        import pyudev

        return pyudev.Context()
    except Exception as exc:  # no libudev on this host
        log.debug("udev unavailable: %s", exc)
        return None


def hwdb_name(bdf: str) -> str | None:
    ctx = _context()
    if ctx is None:
        return None
    try:
        import pyudev

        dev = pyudev.Devices.from_name(ctx, "pci", bdf)
        vendor = dev.properties.get("ID_VENDOR_FROM_DATABASE")
        model = dev.properties.get("ID_MODEL_FROM_DATABASE")
    except Exception as exc:
        log.debug("udev lookup of %s failed: %s", bdf, exc)
        return None
    if not model:
        return None
    return f"{vendor} {model}" if vendor else str(model)
