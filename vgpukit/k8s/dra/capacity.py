"""Devices shared by capacity (Kubernetes consumable capacity, KEP-5075): what is published.

A whole GPU or an existing MIG slice the operator names (``--share-by-capacity gpu,mig`` or device names)
is published as a **shared device**, ``shared-<name>`` (``shared-gpu-0000-03-00-0``), with
``allowMultipleAllocations: true`` and two capacities the scheduler splits between claims:

================  ===============================  =========================================================
capacity          value                            request policy (default; valid range min..max, step)
================  ===============================  =========================================================
``memory``        the device's memory, bytes        a quarter of it; 256 MiB .. all of it, step 256 MiB
``computeShare``  100 (percent of the device time)  25; 2 .. 100, step 1 (2 = 100 / 64: the QoS daemon's
                                                    tenants per device, so the scheduler never places more)
================  ===============================  =========================================================

Names without a domain are the driver's (``gpu.vgpukit.io/memory``). Its attributes are the device's, with
``kind`` ``shared-gpu`` / ``shared-mig`` (so the exclusive DeviceClasses, ``kind == "gpu"``, never pick it)
and ``multiprocessors`` as an attribute (a capacity without a request policy would be consumed whole by
every claim). At prepare each share becomes a QoS tenant and a CUDA memory cap (:mod:`.shares`).

**Exclusive or shared, never both.** A device with ``allowMultipleAllocations`` goes to every claim that
fits, so a device is published either as itself (exclusive) or as its shared device, not both: the
operator's choice, except while claims hold it -- a device prepared for an exclusive claim stays exclusive,
one with shares prepared stays shared (and is offered neither way while the cluster cannot take its shared
form), until they are unprepared. Counters (KEP-4815) could let the scheduler choose per claim, but the
allocator's accounting of a multi-allocatable device's counters was wrong until 2026 (docs/kubernetes.md):
a GPU shared by capacity offers no MIG slices made on demand either.
A device a process holds open stays published in its shared form (its users are its tenants).

**Where the cluster serves it** (gate ``DRAConsumableCapacity``: alpha 1.34-1.35, beta and on from 1.36):
an API server with the gate off drops ``allowMultipleAllocations`` and the request policies from what it
stores; the plugin finds that out by a dry run before its first write (:mod:`.cluster`), and by reading
back what was stored (:func:`dropped`), and then publishes the exclusive view. A shared device also needs
the CUDA interception library (its memory cap is the enforcement): without it the device is published
exclusively.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import msgspec

from ...errors import InvalidInput, VgpukitError
from ...inputs import k8s_quantity
from ...logs import logger
from ...qos.model import MAX_TENANTS
from .devices import DraDevice

if TYPE_CHECKING:
    from ...engine.env import Env
    from ...host import Host

log = logger("vgpukit.k8s.dra")
MIB = 1 << 20
MEMORY, SHARE = "memory", "computeShare"
MEMORY_STEP = 256 * MIB
SHARE_DEFAULT = 25
SHARE_MIN = -(-100 // MAX_TENANTS)  # 2: at most 50 shares of a device, within the QoS daemon's 64 tenants
PREFIX = "shared-"
SHAREABLE = ("gpu", "mig")
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# a whole GPU's DRA name (its PCI address) or an existing MIG slice's (its UUID: MIG-<uuid>, or the old
# MIG-GPU-<uuid>/<gi>/<ci>), as .devices.device_name writes them
_NAME = re.compile(rf"gpu-[0-9a-f]{{4,8}}-[0-9a-f]{{2}}-[0-9a-f]{{2}}-[0-7]|mig-(?:gpu-)?{_UUID}(?:-[0-9]+-[0-9]+)?")


def shared_name(name: str) -> str:
    return PREFIX + name


def base_name(name: str) -> str | None:
    """The device a shared device shares (``shared-gpu-0000-03-00-0`` -> ``gpu-0000-03-00-0``), else None."""
    return name[len(PREFIX) :] if name.startswith(PREFIX) else None


class Choice(msgspec.Struct, frozen=True):
    """The devices the operator wants shared by capacity: kinds (``gpu``, ``mig``) and device names."""

    kinds: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()

    def wants(self, dev: DraDevice) -> bool:
        return dev.kind in SHAREABLE and (dev.kind in self.kinds or dev.name in self.names)

    def __bool__(self) -> bool:
        return bool(self.kinds or self.names)


def choice(text: str) -> Choice:
    """``off``, or a comma-separated list of ``gpu``, ``mig`` and DRA device names (``gpu-0000-03-00-0``,
    ``mig-<uuid>``); anything else is refused in one line."""
    if text == "off":
        return Choice()
    kinds, names = set(), set()
    for token in text.split(","):
        if token in SHAREABLE:
            kinds.add(token)
        elif _NAME.fullmatch(token):
            names.add(token)
        else:
            raise InvalidInput(
                f"{token[:70]!r} is not gpu, mig or a GPU's or MIG slice's device name: give off, or gpu, mig and "
                "device names (gpu-0000-03-00-0, mig-<uuid>) separated by commas"
            )
    return Choice(frozenset(kinds), frozenset(names))


# ----------------------------------------------------------------------------- Kubernetes quantities
def quantity(text: Any, what: str) -> Fraction:
    """A non-negative Kubernetes quantity (``4Gi``, ``4294967296``, ``25``, ``1.5k``, ``2e3``) as a number:
    the one reader of Kubernetes quantities (:func:`vgpukit.inputs.k8s_quantity`)."""
    value = k8s_quantity(text, what) if isinstance(text, str) and not text.startswith(("-", "+")) else None
    if value is None:
        raise InvalidInput(f"{what} must be a Kubernetes quantity")
    return value


def canonical(n: int) -> str:
    """A non-negative integer as the API server writes it back (DecimalSI: ``2000`` is ``2k``), so what
    the plugin publishes reads back the same."""
    for i, suffix in reversed(list(enumerate("kMGTPE", 1))):
        if n and n % 1000**i == 0:
            return f"{n // 1000**i}{suffix}"
    return str(n)


def _range(value: int, minimum: int, step: int, default: int) -> dict[str, Any]:
    top = minimum + (value - minimum) // step * step  # on a step from min (the API server's rule)
    limits = {"min": canonical(minimum), "max": canonical(top), "step": canonical(step)}
    return {"value": canonical(value), "requestPolicy": {"default": canonical(default), "validRange": limits}}


def capacities(memory: int) -> dict[str, Any] | None:
    """The shared device's capacities, None when its memory is too small to share (under two steps)."""
    if memory < 2 * MEMORY_STEP:
        return None
    quarter = max(MEMORY_STEP, memory // 4 // MEMORY_STEP * MEMORY_STEP)
    return {MEMORY: _range(memory, MEMORY_STEP, MEMORY_STEP, quarter), SHARE: _range(100, SHARE_MIN, 1, SHARE_DEFAULT)}


def shared_entry(entry: dict[str, Any], memory: int) -> dict[str, Any] | None:
    """The shared form of a device's slice entry (its taints kept), None when it cannot be shared."""
    caps = capacities(memory)
    name = shared_name(entry["name"])
    if caps is None or len(name) > 63:
        return None
    attrs = dict(entry["attributes"])
    attrs["kind"] = {"string": PREFIX + attrs["kind"]["string"]}
    sms = (entry.get("capacity") or {}).get("multiprocessors")
    if sms is not None:
        attrs["multiprocessors"] = {"int": int(sms["value"])}
    if attrs["kind"]["string"] == "shared-gpu":  # what the device plugin's gpu-share hands out (KEP-5004)
        attrs["devicePluginResource"] = {"string": "vgpukit.io/gpu-share"}
    out: dict[str, Any] = {"name": name, "attributes": attrs, "allowMultipleAllocations": True, "capacity": caps}
    if entry.get("taints"):
        out["taints"] = entry["taints"]
    return out


def dropped(wanted: Iterable[dict[str, Any]], stored: dict[str, Any]) -> bool:
    """Whether the API server stored a shared device without ``allowMultipleAllocations`` or its request
    policies (its ``DRAConsumableCapacity`` gate is off: it drops the fields it does not serve)."""
    kept = {d.get("name"): d for d in (stored.get("spec") or {}).get("devices") or [] if isinstance(d, dict)}
    for d in wanted:
        if not d.get("allowMultipleAllocations"):
            continue
        got = kept.get(d["name"]) or {}
        policies = [c.get("requestPolicy") for c in (got.get("capacity") or {}).values() if isinstance(c, dict)]
        if not got.get("allowMultipleAllocations") or not all(policies):
            return True
    return False


def holds(host: Host, but: str = "") -> tuple[set[str], set[str]]:
    """(devices claims hold exclusively, devices claims hold shares of), from every claim record (prepared
    or preparing) but claim ``but``'s."""
    from ...node.claimed import record_docs

    exclusive: set[str] = set()
    shared: set[str] = set()
    for uid, doc in record_docs(host):
        if uid == but:
            continue
        results = doc.get("results")
        for r in results if isinstance(results, list) else []:
            name = r.get("device") if isinstance(r, dict) else None
            if isinstance(name, str):
                base = base_name(name)
                (exclusive if base is None else shared).add(base or name)
    return exclusive, shared


def memory_of(env: Env, dev: DraDevice, entry: dict[str, Any]) -> int | None:
    """The device's memory, bytes: a whole GPU's as NVML reports it (used + free), else its slice entry's."""
    if dev.kind == "gpu" and env.nvml is not None:
        try:
            index = env.nvml.index_of(dev.device.topo_bdf)
            t = env.nvml.telemetry(index) if index is not None else None
            if t is not None and t.fb_used_mib is not None and t.fb_free_mib is not None:
                return (t.fb_used_mib + t.fb_free_mib) * MIB
        except VgpukitError:
            pass
    value = ((entry.get("capacity") or {}).get(MEMORY) or {}).get("value")
    try:
        return int(quantity(value, "memory")) if value is not None else None
    except InvalidInput:
        return None


@dataclass
class Offer:
    """The plugin's state of sharing by capacity: the operator's choice, whether the cluster serves it,
    what was published last (the health stream's names), the reasons already logged."""

    choice: Choice = field(default_factory=Choice)
    served: bool = True  # False once the API server dropped the fields (or its version says so)
    published: frozenset[str] = frozenset()
    said: set[str] = field(default_factory=set)
    memory: dict[str, int] = field(default_factory=dict)  # the last memory known of each device (a lost GPU's)

    def once(self, message: str) -> None:
        if message not in self.said:
            self.said.add(message)
            log.warning("%s", message)


def arrange(
    offer: Offer,
    env: Env,
    devices: dict[str, DraDevice],
    entries: list[dict[str, Any]],
    parts: dict[str, dict[str, Any]],
    make: Callable[[DraDevice], dict[str, Any] | None],
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The slice's entries and parts with each device in its mode (module docstring): a shared device
    replaces its exclusive entry. ``make``: a device's entry (tainted where unusable; None: left out)."""
    exclusive, shared = holds(env.host)
    if not offer.choice and not shared:
        offer.published = frozenset()
        return entries, parts
    from ...cdi_settings import Settings, host_path, load_settings

    library = (load_settings(env.host) or Settings()).cuda_library
    has_library = env.host.is_file(host_path(env.host, library))
    for name in sorted(offer.choice.names - set(devices)):  # named, but no such device here (yet)
        offer.once(f"{name}: not shared by capacity: no such device on this node")
    drop: set[str] = set()
    out: list[dict[str, Any]] = []
    for name, dev in sorted(devices.items()):
        if dev.kind not in SHAREABLE or name in exclusive or not (name in shared or offer.choice.wants(dev)):
            continue
        entry = make(dev)
        memory = (memory_of(env, dev, entry) if entry is not None else None) or offer.memory.get(name)
        if memory is not None:  # a GPU that fell off the bus keeps its shared form (and its taint)
            offer.memory[name] = memory
        made = shared_entry(entry, memory) if entry is not None and memory is not None else None
        why = "" if offer.served else "the API server does not serve consumable capacity (DRAConsumableCapacity)"
        why = why or ("" if has_library else f"the CUDA interception library {library} is missing")
        why = why or ("" if made is not None or entry is None else "its memory is unknown or too small")
        if why:
            offer.once(f"{name}: not shared by capacity: {why}")
            if name in shared:  # shares are held: not offered exclusively meanwhile
                drop.add(name)
            continue
        drop.add(name)
        if made is not None:
            out.append(made)
    gpus = {n for n in drop if n.startswith("gpu-")}
    kept = {k: v for k, v in parts.items() if not any(k == g or k.startswith(g + "-") for g in gpus)}
    offer.published = frozenset(e["name"] for e in out)
    return [e for e in entries if e["name"] not in drop] + out, kept


def with_shared(offered: dict[str, DraDevice], names: Iterable[str]) -> dict[str, DraDevice]:
    """``offered`` with the shared devices among ``names`` (a claim's), each standing for its device."""
    out = dict(offered)
    for name in names:
        base = base_name(name)
        if base is not None and base in offered and offered[base].kind in SHAREABLE:
            dev = offered[base]
            out[name] = DraDevice(name, dev.kind, dev.device, dev.resource, dev.host_driver)
    return out


def qos_key(dev: DraDevice) -> str:
    """The QoS daemon's key of a device: a GPU's UUID (its CDI name's), a MIG slice's UUID."""
    cdi = (dev.device.cdi_name or "").partition("=")[2]
    if dev.kind == "gpu" and cdi.startswith("GPU-"):
        return cdi
    return dev.device.id
