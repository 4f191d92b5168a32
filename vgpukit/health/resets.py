"""When vgpukit last reset each device (``/run/vgpukit/health/resets.json``, BDF -> time): a reset is a
recovery point, so the health layer counts no event from before it (an XID is a one-shot report with
no "cleared" signal; a GPU reset is what NVIDIA's catalog prescribes for many). Written by the reset
step (:mod:`vgpukit.remedy.steps`) right after the reset, read by every look (:mod:`.check`)."""

from __future__ import annotations

import json

from ..errors import VgpukitError
from ..host import Host
from ..inputs import load_json


def load(host: Host) -> dict[str, float]:
    try:
        doc = load_json(host.read_raw_opt(host.device_resets()) or "{}", "device resets record")
    except VgpukitError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): float(v) for k, v in doc.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def mark(host: Host, bdf: str, when: float) -> None:
    """Record that ``bdf`` was reset at ``when`` (seconds since the epoch)."""
    found = load(host)
    found[bdf] = when
    host.mkdir(host.device_resets().parent)
    host.write_file(host.device_resets(), json.dumps(found, indent=1, sort_keys=True) + "\n")
