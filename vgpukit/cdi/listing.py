"""``vgpukit cdi list``: the CDI device names container engines resolve on this host.

Engines read every ``*.yaml``/``*.json`` spec in ``/etc/cdi`` then ``/var/run/cdi`` (a device in the
later directory wins); each device is requested as ``<kind>=<name>``. vgpukit lists what is there
(every vendor's specs, as an engine would), and, when spec generation is enabled, which of its own
spec files no longer match the host (``stale``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..host import Host
from ..inputs import load_yaml
from .planner import DIRS, SPEC_STEM, derived_plans, load_settings

if TYPE_CHECKING:
    from ..nvml import Nvml


def listing(host: Host, nvml: Callable[[], Nvml | None]) -> dict[str, Any]:
    settings = load_settings(host)
    dirs = list(DIRS)
    if settings is not None and settings.dir not in dirs:
        dirs.append(settings.dir)
    devices: list[dict[str, str]] = []
    problems: list[str] = []
    for d in dirs:
        base = host.path(*d.strip("/").split("/"))
        for name in host.listdir(base):
            if not name.endswith((".yaml", ".yml", ".json")):
                continue
            shown = f"{d}/{name}"
            try:
                doc = load_yaml(host.read_doc(base / name, "CDI spec") or "", shown)
            except InvalidInput as err:
                problems.append(f"{shown}: {err.message}")
                continue
            kind = doc.get("kind") if isinstance(doc, dict) else None
            entries = doc.get("devices") if isinstance(doc, dict) else None
            if not isinstance(kind, str) or not isinstance(entries, list):
                problems.append(f"{shown}: not a CDI spec (kind, devices)")
                continue
            for dev in entries:
                if isinstance(dev, dict) and isinstance(dev.get("name"), str):
                    devices.append({"name": f"{kind}={dev['name']}", "kind": kind, "file": shown})
    stale: list[str] = []
    if settings is not None:
        stale = [p.path for p in derived_plans(host, settings, nvml) if p.action != "keep"]
    return {
        "enabled": settings is not None,
        "dir": settings.dir if settings else None,
        "devices": devices,
        "stale": stale,
        "problems": problems,
        "spec_stem": SPEC_STEM,
    }
