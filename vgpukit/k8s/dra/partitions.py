"""Partitionable devices (Kubernetes ``DRAPartitionableDevices``, KEP-4815): each GPU that offers MIG slices
published with its shared counters and one made-on-demand device per MIG (profile, placement) it could
still hold; a GPU whose MIG mode changes without a reset (Hopper and newer) also as the whole GPU,
consuming every counter, so that the scheduler hands out the GPU or slices, never both.

A *part* per GPU: its counter set and the devices consuming it; :mod:`.pool` lays the parts out as the
API server's release wants them (counter sets beside their devices in 1.34, in slices of their own from
1.35).

The counter set (named like the GPU's device, ``gpu-0000-07-00-0``) holds:

==================  ========================================================================
``memory-slice-N``  1 per memory slot (8 on A100/H100): a placement consumes the slots it
                    occupies, so the scheduler never allocates two overlapping placements
``compute-slices``  the compute slices of the GPU (7); a placement consumes its profile's
``multiprocessors`` the SMs the largest layout holds; a placement consumes its profile's
``memory``          bytes, likewise
``media-engines``   1, where a ``+me`` profile exists (one GPU instance holds the media engines)
==================  ========================================================================

Only placements next to the GPU's existing instances that no claim made are published (an instance an
operator made stays a static ``mig-<uuid>`` device); the slices claims made keep their devices, and the
counters keep the scheduler from allocating what overlaps them. The static devices of slices made for
claims are not published (they belong to their claim). Which GPUs offer what:

* MIG mode on: the placements next to the instances no claim made; the whole GPU too where MIG mode was
  turned on for claims (:mod:`.ondemand`'s record) and every instance is a claim's;
* MIG mode off, a model that changes it without a reset: the whole GPU (the static view's device, moved
  here) and every placement;
* MIG mode off, a model that needs a reset (Ampere): nothing here (the whole GPU stays static), and a
  note saying why, logged once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...engine.env import Env
from ...errors import VgpukitError
from ...logs import logger
from ...mig import layout, planner
from ...node.dra_names import device_name
from ...node.inventory import Device
from ...nvml import GiProfile, Nvml, NvmlGpu
from ...nvml.errors import NvmlGpuLost
from ...pci import PciDevice
from . import ondemand_vgpu, slices
from .attributes import standard
from .devices import DraDevice
from .ondemand import Made, all_made, catalog, placements

log = logger("vgpukit.k8s.dra")
MIB = 1024 * 1024


def _s(value: str) -> dict[str, Any]:
    return {"string": value}


def _v(n: int) -> dict[str, str]:
    return {"value": str(n)}


def counters(profiles: list[GiProfile]) -> dict[str, dict[str, str]]:
    """The GPU's counter set: one per memory slot, compute slices, SMs, memory, media engines."""
    out = {f"memory-slice-{k}": _v(1) for k in range(planner.memory_slots(profiles))}
    out["compute-slices"] = _v(planner.most_in_a_layout(profiles, "slices"))
    out["multiprocessors"] = _v(planner.most_in_a_layout(profiles, "sms"))
    out["memory"] = _v(planner.most_in_a_layout(profiles, "memory_mib") * MIB)
    if any(p.media for p in profiles):
        out["media-engines"] = _v(1)
    return out


def consumption(profile: GiProfile, start: int) -> dict[str, dict[str, str]]:
    """What a GPU instance of ``profile`` at ``start`` takes of its GPU's counters."""
    out = {f"memory-slice-{k}": _v(1) for k in range(start, start + profile.size)}
    out["compute-slices"] = _v(profile.slices)
    out["multiprocessors"] = _v(profile.sms)
    out["memory"] = _v(profile.memory_mib * MIB)
    if profile.media:
        out["media-engines"] = _v(1)
    return out


def device_entry(m: Made, counter_set: str, fn: PciDevice | None) -> dict[str, Any]:
    """A made-on-demand device: attributes as a static MIG device's (kind, migProfile, parentUUID,
    productName, pciBusID, pcieRoot, numaNode) and its placement; capacities memory and SMs."""
    attrs: dict[str, Any] = {
        "kind": _s("mig"),
        "migProfile": _s(m.profile.name),
        "parentUUID": _s(m.gpu.uuid),
        "productName": _s(m.gpu.name),
        "pciBusID": _s(m.gpu.bdf),
        "placementStart": {"int": m.start},
        "placementSize": {"int": m.profile.size},
        "onDemand": {"bool": True},
    }
    if fn is not None and fn.host_bridge:
        attrs["pcieRoot"] = _s(fn.host_bridge)
    if fn is not None and fn.numa_node is not None and fn.numa_node >= 0:
        attrs["numaNode"] = {"int": fn.numa_node}
    attrs.update(standard("mig", "", m.gpu.bdf, fn.host_bridge if fn else None, fn.numa_node if fn else None))
    return {
        "name": m.name,
        "attributes": attrs,
        "capacity": {"memory": _v(m.profile.memory_mib * MIB), "multiprocessors": _v(m.profile.sms)},
        "consumesCounters": [{"counterSet": counter_set, "counters": consumption(m.profile, m.start)}],
    }


def gpu_slice(
    nvml: Nvml, gpu: NvmlGpu, made: set[tuple[str, int, int]], fn: PciDevice | None, whole: dict[str, Any] | None
) -> dict[str, Any]:
    """One GPU's part: its counter set and the devices consuming it: ``whole`` (the whole GPU, consuming
    every counter, so that the scheduler hands out the GPU or slices, never both) and every MIG placement
    open next to the GPU instances no claim made (all of them on a GPU whose MIG mode is off)."""
    profiles = nvml.gi_profiles(gpu.index)
    by_id = {p.id: p for p in profiles}
    current = nvml.mig_mode(gpu.index)[0]
    others = [
        planner.Occupant(g.profile_id, g.start, g.size, f"GI {g.id}")
        for g in (nvml.gpu_instances(gpu.index) if current else [])
        if (gpu.bdf, g.profile_id, g.start) not in made
    ]
    open_ = {(pl.profile.id, pl.start) for pl in planner.open_placements(profiles, others)}
    open_ |= {(pid, s) for bdf, pid, s in made if bdf == gpu.bdf and pid in by_id}
    name = device_name("gpu", gpu.bdf)
    full = counters(profiles)
    devices = [{**whole, "consumesCounters": [{"counterSet": name, "counters": full}]}] if whole else []
    devices += [device_entry(m, name, fn) for m in catalog(gpu, profiles).values() if (m.profile.id, m.start) in open_]
    return {"sharedCounters": [{"name": name, "counters": full}], "devices": devices}


@dataclass
class Publication:
    """The partitionable part of the node's pool (:func:`publication`)."""

    parts: dict[str, dict[str, Any]] = field(default_factory=dict)  # by counter set name: counters and devices
    hidden: set[str] = field(default_factory=set)  # MIG UUIDs and vGPU ids made for claims: not static devices
    moved: set[str] = field(default_factory=set)  # whole GPUs published in their part, not as static devices
    notes: dict[str, str] = field(default_factory=dict)  # GPU -> why it offers less (logged once)
    warnings: dict[str, str] = field(default_factory=dict)  # GPU -> why it could not be read (logged once)
    unread: set[str] = field(default_factory=set)  # GPUs whose MIG slices could not be read (lost or failing)


def _whole(
    env: Env, gpu: NvmlGpu, made: set[tuple[str, int, int]], static: dict[str, dict[str, Any]], facts: Any, pci: Any
) -> dict[str, Any] | None:
    """The whole-GPU device of a GPU that changes MIG mode without a reset, where it can be handed out whole:
    MIG mode off (as the static view has it), or on only for slices claims made (turned on for them)."""
    name = device_name("gpu", gpu.bdf)
    if not gpu.mig_current:
        return static.get(name)
    nvml = env.nvml
    assert nvml is not None
    if not env.host.exists(env.host.dra_mig_mode_record(gpu.bdf)):
        return None  # an operator's MIG mode: their layout stays
    if any((gpu.bdf, g.profile_id, g.start) not in made for g in nvml.gpu_instances(gpu.index)):
        return None
    dev = DraDevice(name, "gpu", Device(f"{gpu.bdf}-0", gpu.bdf, getattr(pci.get(gpu.bdf), "numa_node", None)))
    return slices.device_entry(dev, pci, facts)


def publication(
    env: Env,
    pci: dict[str, PciDevice],
    static: dict[str, dict[str, Any]] | None = None,
    facts: Any = None,
) -> Publication:
    """The partitionable part of the node's pool: a part per GPU that offers MIG slices (in MIG mode, or
    turning it on without a reset) and per GPU offering vGPUs, an unusable GPU's too (tainted or left out by
    the caller: :mod:`.lost`); the static entries (``static``, by name) of whole GPUs that go in their part
    instead; what claims made (not static devices)."""
    static = static or {}
    records = all_made(env)  # every claim's made record, read once
    names = {bdf: str(g.name) for bdf, g in (facts.gpus if facts is not None else {}).items() if g.name}
    made_vgpus = [m for m in records if m.get("kind") == "vgpu"]
    parts, hidden = ondemand_vgpu.slice_parts(env, made_vgpus, pci, names)
    out = Publication(parts, hidden)
    nvml = env.nvml
    if nvml is None:
        return out
    made = placements(records)
    for gpu in nvml.gpus():
        if not gpu.mig_capable:
            continue
        if not (gpu.mig_current or layout.toggles_without_reset(gpu)):
            out.notes[gpu.bdf] = (
                _lost(gpu)
                if gpu.lost
                else (
                    f"{gpu.bdf} ({gpu.name}): MIG mode is off and changing it needs a GPU reset, never done under a "
                    "pod: offered whole; its MIG slices once MIG mode is on (vgpukit partition or mig apply)"
                )
            )
            continue
        try:
            if gpu.mig_current:
                for gi in nvml.gpu_instances(gpu.index):
                    if (gpu.bdf, gi.profile_id, gi.start) in made:
                        hidden.update(ci.uuid for ci in gi.compute_instances)
            whole = _whole(env, gpu, made, static, facts or slices.NvmlFacts(None), pci)
            if whole is None and not gpu.mig_current:
                continue  # neither whole (a vGPU host, held) nor in MIG mode: nothing to offer here
            if whole is not None:
                out.moved.add(str(whole["name"]))
            parts[device_name("gpu", gpu.bdf)] = gpu_slice(nvml, gpu, made, pci.get(gpu.bdf), whole)
        except VgpukitError as err:  # a GPU that stopped answering: its last part is kept (.lost)
            out.unread.add(gpu.bdf)
            if gpu.lost or isinstance(err, NvmlGpuLost):  # a note, as out of MIG mode: the not-read line says it
                out.notes[gpu.bdf] = _lost(gpu, in_mig_mode=True)
            else:
                out.warnings[gpu.bdf] = f"{gpu.bdf}: MIG slices not read: {err}"
    return out


def _lost(gpu: NvmlGpu, in_mig_mode: bool = False) -> str:
    """Why a lost GPU offers no new MIG slices: NVML cannot answer for it (its MIG mode is not known, not
    off). One lost while in MIG mode keeps what it published, tainted, where the cluster has device taints."""
    named = f" ({gpu.name})" if gpu.name else ""
    why = "the GPU is lost (NVML cannot answer for it): no MIG slices offered"
    if in_mig_mode:
        why += " (those published before stay, tainted, where the cluster has device taints)"
    return f"{gpu.bdf}{named}: {why} (see: vgpukit health {gpu.bdf})"
