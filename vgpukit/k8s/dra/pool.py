"""The node's pool as ResourceSlices for one API server (:mod:`.cluster`): which slice holds what, under
which name, within every limit of ``resource.k8s.io/v1`` for that release.

Input: the static devices (no counters) and the *parts* (:mod:`.partitions`): per GPU, its counter
sets and the devices consuming them. Output, by slice name (``<node>-gpu.vgpukit.io``, the base):

==========  =====================================================================================
all         the static devices: ``<base>``, ``<base>-1``, ... (128 a slice; 64 once a device has a
            taint or a list-type attribute)
combined    (1.34) one slice per part, ``<base>-<part>``: its counter sets and its devices, for 1.34
            resolves a device's counters in its own slice (what does not fit that slice is left out)
split       (1.35 and later) the counter sets of every part in counter-only slices of at most 8 sets,
            ``<base>-counters``, ``<base>-counters-1``, ...; each part's devices in ``<base>-<part>``,
            ``<base>-<part>-1``, ... (64 a slice: they consume counters)
==========  =====================================================================================

Names follow the order of the parts (their names: a GPU's PCI address) and of the devices in each, so
the same devices give the same slices whatever the run. A device over a per-device limit (attributes
and capacities, taints, counter consumptions) is left out, with a warning, rather than have the API
server refuse its slice.
"""

from __future__ import annotations

from typing import Any

from .cluster import LIST_VALUES, Limits, Server
from .devices import DRIVER

Part = dict[str, Any]  # {"sharedCounters": [...], "devices": [...]}


def slice_name(node: str, index: int = 0, part: str = "") -> str:
    """``<node>-gpu.vgpukit.io``, ``-<part>`` for a part's slice, ``-<index>`` from the second slice on."""
    return f"{node}-{DRIVER}" + (f"-{part}" if part else "") + (f"-{index}" if index else "")


def _dense(devices: list[dict[str, Any]]) -> bool:
    """Whether a slice of these devices has the lower device limit: a taint, counters or a list attribute."""
    return any(
        d.get("taints")
        or d.get("consumesCounters")
        or any(k in LIST_VALUES for a in (d.get("attributes") or {}).values() for k in a)
        for d in devices
    )


def device_problem(dev: dict[str, Any], lim: Limits) -> str:
    """Why the API server would refuse a device in a slice of these limits ("" when it would not)."""
    uses = dev.get("consumesCounters") or []
    if len(dev.get("attributes") or {}) + len(dev.get("capacity") or {}) > lim.attributes_and_capacities_per_device:
        return f"more than {lim.attributes_and_capacities_per_device} attributes and capacities"
    if len(dev.get("taints") or []) > lim.taints_per_device:
        return f"more than {lim.taints_per_device} taints"
    if len(uses) > lim.consumptions_per_device or len({u.get("counterSet") for u in uses}) < len(uses):
        return f"more than {lim.consumptions_per_device} counter consumptions, or two of one counter set"
    if any(len(u.get("counters") or {}) > lim.counters_per_consumption for u in uses):
        return f"more than {lim.counters_per_consumption} counters in one consumption"
    per_device = lim.counters_consumed_per_device
    if per_device is not None and sum(len(u.get("counters") or {}) for u in uses) > per_device:
        return f"more than {per_device} counters consumed"
    return ""


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _set_problem(sets: list[dict[str, Any]], lim: Limits) -> str:
    if any(len(s.get("counters") or {}) > lim.counters_per_set for s in sets):
        return f"a counter set of more than {lim.counters_per_set} counters"
    if lim.counters_per_slice is not None and sum(len(s.get("counters") or {}) for s in sets) > lim.counters_per_slice:
        return f"more than {lim.counters_per_slice} counters in its counter sets"
    return ""


def _fit(devices: list[dict[str, Any]], lim: Limits) -> tuple[list[dict[str, Any]], int]:
    """The devices one combined slice can hold (device and consumed-counter limits), and how many did not fit."""
    cap = lim.devices_per_slice_with_taints_counters_or_lists if _dense(devices) else lim.devices_per_slice
    out: list[dict[str, Any]] = []
    used = 0
    for d in devices:
        n = sum(len(u.get("counters") or {}) for u in d.get("consumesCounters") or [])
        budget = lim.counters_consumed_per_slice
        if len(out) == cap or (budget is not None and used + n > budget):
            break
        out.append(d)
        used += n
    return out, len(devices) - len(out)


def layout(
    node: str, static: list[dict[str, Any]], parts: dict[str, Part], server: Server
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The slices (by name, in writing order: static, counters, parts' devices) and warnings for what was
    left out to stay within the limits."""
    lim = server.limits
    warnings: list[str] = []

    def keep(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for d in devices:
            why = device_problem(d, lim)
            if why:
                warnings.append(f"device {d.get('name')} not published: {why} (Kubernetes {server.version})")
            else:
                out.append(d)
        return out

    mine = keep(static)
    size = lim.devices_per_slice_with_taints_counters_or_lists if _dense(mine) else lim.devices_per_slice
    out: dict[str, dict[str, Any]] = {
        slice_name(node, i): {"devices": c} for i, c in enumerate(_chunks(mine, size) or [[]])
    }
    usable: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]] = []
    for key, part in sorted(parts.items()):
        sets = list(part.get("sharedCounters") or [])
        why = _set_problem(sets, lim)
        if why:
            warnings.append(f"{key} not published: {why} (Kubernetes {server.version})")
            continue
        usable.append((key, sets, keep(list(part.get("devices") or []))))
    if server.layout == "combined":
        for key, sets, devices in usable:
            fitted, left = _fit(devices, lim)
            if left:
                warnings.append(f"{key}: {left} devices not published: one slice of Kubernetes 1.34 holds no more")
            out[slice_name(node, part=key)] = {"sharedCounters": sets, "devices": fitted}
        return out, warnings
    all_sets = [s for _key, sets, _devices in usable for s in sets]
    for i, chunk in enumerate(_chunks(all_sets, lim.counter_sets_per_slice or len(all_sets) or 1)):
        out[slice_name(node, i, "counters")] = {"sharedCounters": chunk}
    for key, _sets, devices in usable:
        size = lim.devices_per_slice_with_taints_counters_or_lists if _dense(devices) else lim.devices_per_slice
        for i, c in enumerate(_chunks(devices, size)):
            out[slice_name(node, i, key)] = {"devices": c}
    return out, warnings
