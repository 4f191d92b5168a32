"""ResourceSlices: the node's devices published for the scheduler (``resource.k8s.io/v1``).

One pool per node (named after the node), laid out for the API server by :mod:`.pool` (static devices
in slices of at most 128 or 64 devices: ``<node>-gpu.vgpukit.io``, ``-1``, ``-2``...; with partitionable
devices, :mod:`.partitions`, the GPUs' counter sets and the devices consuming them, as the release
wants them: :mod:`.cluster`); the pool's generation, on every slice, goes up whenever a slice changes.
A device the health layer finds unusable, or one held open by a process outside Kubernetes (a VM), is
left out, or published with a taint, until it is usable again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import VgpukitError
from ...logs import logger
from ...pci import PciDevice
from ...words import plural
from ..agent import api_error
from . import capacity, cluster, pool, wire
from .attributes import standard
from .devices import DRIVER, DraDevice
from .pool import slice_name as slice_name

if TYPE_CHECKING:
    from ...nvml import Nvml

log = logger("vgpukit.k8s.dra")
API_VERSION = "resource.k8s.io/v1"
MIB = 1024 * 1024
API_TIMEOUT = cluster.API_TIMEOUT  # seconds one API call may take (connect and read)


def _s(value: str) -> dict[str, Any]:
    return {"string": value}


class NvmlFacts:
    """What NVML says of the GPUs, read once per publish: product, UUID, memory and SMs of a whole
    GPU (its full-size GPU instance profile; its memory as NVML totals it where it does) and of each MIG
    compute instance. A GPU NVML cannot answer for (lost) is in ``unread``: :meth:`carry` takes what
    the last read knew of it."""

    def __init__(self, nvml: Nvml | None) -> None:
        self.gpus: dict[str, Any] = {}  # BDF -> NvmlGpu
        self.whole: dict[str, tuple[int, int]] = {}  # BDF -> (memory MiB, SMs)
        self.mig: dict[str, tuple[str, int, int]] = {}  # MIG UUID -> (profile, memory MiB, SMs)
        self.mig_gpu: dict[str, str] = {}  # MIG UUID -> its GPU's BDF
        self.total: dict[str, int] = {}  # BDF -> memory MiB as NVML totals it (used + free)
        self.unread: set[str] = set()  # BDFs whose facts could not be read now
        for gpu in nvml.gpus() if nvml is not None else []:
            self.gpus[gpu.bdf] = gpu
            try:
                t = nvml.telemetry(gpu.index) if nvml is not None else None
                if t is not None and t.fb_used_mib is not None and t.fb_free_mib is not None:
                    self.total[gpu.bdf] = t.fb_used_mib + t.fb_free_mib
            except VgpukitError:
                self.unread.add(gpu.bdf)
            if not gpu.mig_capable:
                continue
            try:
                profiles = {p.id: p for p in nvml.gi_profiles(gpu.index)} if nvml else {}
                if profiles:
                    full = max(profiles.values(), key=lambda p: p.size)
                    self.whole[gpu.bdf] = (full.memory_mib, full.sms)
                instances = nvml.gpu_instances(gpu.index) if nvml and gpu.mig_current else []
            except VgpukitError:
                self.unread.add(gpu.bdf)
                continue
            for gi in instances:
                prof = profiles.get(gi.profile_id)
                for ci in gi.compute_instances:
                    if prof is not None:
                        self.mig[ci.uuid] = (prof.name, prof.memory_mib, prof.sms)
                        self.mig_gpu[ci.uuid] = gpu.bdf

    def carry(self, last: NvmlFacts) -> NvmlFacts:
        """These facts, with what ``last`` knew of each GPU they could not read (a lost GPU keeps its
        attributes and capacities while its devices are published tainted)."""
        for bdf in self.unread:
            if bdf not in self.whole and bdf in last.whole:
                self.whole[bdf] = last.whole[bdf]
            if bdf not in self.total and bdf in last.total:
                self.total[bdf] = last.total[bdf]
            if bdf in last.gpus and not getattr(self.gpus.get(bdf), "uuid", ""):
                self.gpus[bdf] = last.gpus[bdf]
            for uuid, gpu in last.mig_gpu.items():
                if gpu == bdf and uuid not in self.mig:
                    self.mig[uuid], self.mig_gpu[uuid] = last.mig[uuid], bdf
        return self


def device_entry(
    dev: DraDevice, pci: dict[str, PciDevice], facts: NvmlFacts, vgpu_types: dict[str, str] | None = None
) -> dict[str, Any]:
    """One ``spec.devices[]`` entry: attributes (kind, uuid, productName, pciBusID, pcieRoot, numaNode,
    parentUUID, migProfile, vgpuType, vgpuTypeID, pf, driver) and capacities (memory, multiprocessors).
    ``vgpu_types``: the type id of each existing vGPU (by mdev UUID or VF address)."""
    d = dev.device
    attrs: dict[str, Any] = {"kind": _s(dev.kind)}
    cap: dict[str, Any] = {}
    fn = pci.get(d.topo_bdf)
    gpu = facts.gpus.get(d.topo_bdf)
    if d.numa is not None and d.numa >= 0:
        attrs["numaNode"] = {"int": d.numa}
    if fn is not None and fn.host_bridge:
        attrs["pcieRoot"] = _s(fn.host_bridge)
    if dev.kind in ("gpu", "vf"):
        attrs["pciBusID"] = _s(d.topo_bdf)
    if gpu is not None:
        attrs["productName"] = _s(gpu.name)
    if dev.kind == "gpu" and gpu is not None:
        attrs["uuid"] = _s(gpu.uuid)
        if d.topo_bdf in facts.total:  # the memory a process sees on the whole GPU, as a shared one's
            cap["memory"] = {"value": str(facts.total[d.topo_bdf] * MIB)}
        if d.topo_bdf in facts.whole:
            mem, sms = facts.whole[d.topo_bdf]
            cap.setdefault("memory", {"value": str(mem * MIB)})
            cap["multiprocessors"] = {"value": str(sms)}
    elif dev.kind == "mig":
        attrs["uuid"] = _s(d.id)
        attrs["pciBusID"] = _s(d.topo_bdf)  # its GPU's, as a slice made on demand says it
        if gpu is not None:
            attrs["parentUUID"] = _s(gpu.uuid)
        if d.id in facts.mig:
            profile, mem, sms = facts.mig[d.id]
            attrs["migProfile"] = _s(profile)
            cap = {"memory": {"value": str(mem * MIB)}, "multiprocessors": {"value": str(sms)}}
    elif dev.kind == "vf":
        own = pci.get(d.id)
        if own is not None and own.physfn:
            attrs["pf"] = _s(own.physfn)
        if own is not None and own.driver:
            attrs["driver"] = _s(own.driver)
    elif dev.kind == "mdev":
        attrs["uuid"] = _s(d.id)
        attrs["parentBusID"] = _s(d.topo_bdf)
    attrs.update(standard(dev.kind, d.id, d.topo_bdf, fn.host_bridge if fn else None, d.numa))  # KubeVirt reads these
    part = dev.resource.rpartition("/")[2]
    if part.startswith("vgpu-"):
        attrs["vgpuType"] = _s(part.removeprefix("vgpu-"))
        if d.id in (vgpu_types or {}):
            attrs["vgpuTypeID"] = _s((vgpu_types or {})[d.id])
    entry: dict[str, Any] = {"name": dev.name, "attributes": attrs}
    if cap:
        entry["capacity"] = cap
    return entry


class Entries:
    """The entries of the last publication's VFs (by device name) with what each was made of, so that a
    publication over a host of a thousand VFs makes again only those of the VFs that changed, and hands the
    others on as the same objects (the publisher's comparisons then end at once on them). A VF's entry is a
    function of its device, its PCI record (its own and its ``topo_bdf``'s), its vGPU type, why the health
    layer finds it unusable or drained, and the taint options; only VFs with no NVML facts of their own
    (a NIC's: a GPU's VF, a MIG slice, a GPU depend on NVML's) are kept. Equal to making every entry afresh
    (tests/watch/test_dra_entries.py)."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[tuple[Any, ...], dict[str, Any] | None]] = {}

    def marked(
        self,
        devices: list[DraDevice],
        make: Callable[[DraDevice], dict[str, Any] | None],
        inputs: tuple[dict[str, PciDevice], NvmlFacts, dict[str, str], dict[str, str], dict[str, str], bool, str],
    ) -> list[dict[str, Any]]:
        """``make(d)`` of every device (None left out), a VF's as last made when made of the same."""
        pci, facts, vgpu_types, sick, evict, taints, effect = inputs
        out: list[dict[str, Any]] = []
        now: dict[str, tuple[tuple[Any, ...], dict[str, Any] | None]] = {}
        for d in devices:
            dev = d.device
            if d.kind != "vf" or dev.topo_bdf in facts.gpus:
                e = make(d)
            else:
                key = (d, pci.get(dev.topo_bdf), pci.get(dev.id), vgpu_types.get(dev.id), unusable(d, sick),
                       unusable(d, evict), taints, effect)  # fmt: skip
                was = self.last.get(d.name)
                e = was[1] if was is not None and was[0] == key else make(d)
                now[d.name] = (key, e)
            if e is not None:
                out.append(e)
        self.last = now
        return out


def unusable(dev: DraDevice, sick: dict[str, str]) -> str:
    """Why the health layer finds a device unusable (a MIG slice: its own, else its GPU's); "" when usable."""
    return sick.get(dev.device.id) or sick.get(dev.device.topo_bdf) or ""


def offered(devices: dict[str, DraDevice], sick: dict[str, str], tainted: bool = False) -> list[DraDevice]:
    """The devices to publish: not held by a user outside Kubernetes, and not unusable (health layer) unless
    ``tainted``: then an unusable device is published with a taint (:func:`taint`)."""
    return [d for _, d in sorted(devices.items()) if not d.device.held_by and (tainted or not unusable(d, sick))]


TAINT_KEY = f"{DRIVER}/unhealthy"


EFFECTS = ("NoSchedule", "NoExecute")  # what --unhealthy-effect takes (the API: PreferNoSchedule is invalid)


def taint(entry: dict[str, Any], effect: str = "NoSchedule") -> dict[str, Any]:
    """The device entry with the health layer's taint (resource.k8s.io/v1 ``DeviceTaint``, feature gate
    ``DRADeviceTaints``): NoSchedule by default, so no new claim gets it and pods already running keep it;
    NoExecute (``--unhealthy-effect``; a drained device's, ``vgpukit drain``) also has Kubernetes evict the
    pods using it."""
    return {**entry, "taints": [{"key": TAINT_KEY, "value": "unusable", "effect": effect}]}


def _stored(devices: Any) -> list[Any]:
    """A stored slice's devices as this driver wrote them: the API server stamps a taint's ``timeAdded``."""
    out = []
    for d in devices or []:
        if isinstance(d, dict) and d.get("taints"):
            d = {**d, "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in d["taints"]]}
        out.append(d)
    return out


class Publisher:
    """Keeps this node's ResourceSlices equal to the devices; a failed call is tried again at the next poll.

    ``publish(entries, parts)``: the static devices and (partitionable devices, :mod:`.partitions`) the
    parts, laid out for the API server (:mod:`.pool`) that :mod:`.cluster` found before the first write
    (and again after a refused one). A refused write (400, 422) is a bug of the layout: logged with the
    server's reason, and tried again at the next poll after reading what the server serves again.
    ``counters_dropped`` tells whether the API server stored a counter set without its counters (its
    ``DRAPartitionableDevices`` gate was turned off since); ``taints_dropped`` whether it stored a tainted
    device without its taint (feature gate ``DRADeviceTaints`` off)."""

    def __init__(self, api: Any, node: str, partitionable: str = "on", server: cluster.Server | None = None) -> None:
        self.api = api  # kubernetes.client.ResourceV1Api
        self.node = node
        self.partitionable = partitionable  # --partitionable: auto reads the gate (cluster.detect)
        self.server = server  # what the API server serves (None: found out before the next write)
        self.published: Any = None  # what the API server has, as far as we know
        self.counters_dropped = False
        self.taints_dropped = False
        self.capacity_dropped = False  # a shared device stored without its consumable capacity (.capacity)
        self.features = False  # also read the taints' and consumable capacity's gates before writing
        self.said: set[str] = set()  # warnings logged once
        self.stored: dict[str, Any] | None = None  # this node's slices as stored, from our writes (None: list)
        # by slice name: (resourceVersion, slices in the pool, the part) of a write the server kept as written
        self.agreed: dict[str, tuple[Any, int, dict[str, Any]]] = {}
        self.order: wire.Order | None = None  # how the client's models order a slice's keys (read at the first write)

    def _call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """One API call; a connection that hangs gives up after API_TIMEOUT (the next poll tries again)."""
        raw = fn(*args, _preload_content=False, _request_timeout=API_TIMEOUT, **kw)
        return json.loads(raw.data) if raw.data else None

    def _write(self, doc: dict[str, Any], name: str | None = None) -> Any:
        """Create (``name`` None) or replace a slice, its body encoded without the client's models (:mod:`.wire`)."""
        if self.order is None:
            self.order = wire.Order()
        return wire.write(self.api, self.order, doc, name)

    def detected(self) -> cluster.Server:
        """What the API server serves, found out now when not known yet."""
        if self.server is None:
            self.server = cluster.detect(self.api, self.node, self.partitionable, self.features)
            log.info("%s", self.server.describe())
        return self.server

    def publish(self, entries: list[dict[str, Any]], parts: dict[str, dict[str, Any]] | None = None) -> str | None:
        """Create or update the slices (generation + 1) when the devices differ; what was done, or None."""
        wanted, warnings = pool.layout(self.node, entries, parts or {}, self.detected())
        for line in warnings:
            if line not in self.said:
                self.said.add(line)
                log.warning("%s", line)
        if wanted == self.published:
            return None
        if self.published is None:  # a start (or a publisher told to forget): what the server has is listed
            self.stored = None
        try:
            done = self._publish(wanted)
        except VgpukitError:
            raise
        except Exception as err:  # ApiException, connection errors: reported; the next poll tries again
            if getattr(err, "status", None) in (400, 422):  # refused: never expected, never a probe
                log.error(
                    "the API server refused a ResourceSlice (%s): %s; a bug: reading what it serves again",
                    getattr(err, "status", None),
                    _reason(err),
                )
                self.server = None
            raise api_error(err) from None
        self.published = wanted
        return done

    def _current(self) -> dict[str, Any]:
        """This node's slices as the API server has them (by name), listed only when not known from this
        publisher's own writes (the first time, and after a failed call)."""
        if self.stored is None:
            selector = f"spec.nodeName={self.node},spec.driver={DRIVER}"
            listing = self._call(self.api.list_resource_slice, field_selector=selector) or {}
            self.stored = {
                item["metadata"]["name"]: item
                for item in listing.get("items") or []
                if item.get("spec", {}).get("driver") == DRIVER and item.get("spec", {}).get("nodeName") == self.node
            }
        return dict(self.stored)

    def _publish(self, wanted: dict[str, dict[str, Any]]) -> str | None:
        """Write what differs. As the upstream ResourceSlice controller (k8s.io/dynamic-resource-allocation
        ``resourceslice``): when the pool keeps its slices and one slice of several changes, that one slice
        is updated at the pool's generation (one write is atomic: no consumer sees a mixed pool); otherwise
        the generation goes up and every slice is written (docs/kubernetes.md, "ResourceSlice")."""
        try:
            known = self._current()
            current = {n: known[n] for n in wanted if n in known}
            stale = sorted(n for n in known if n not in wanted)  # deleted once the wanted ones are stored
            count = len(wanted)  # every slice of the pool, counter-only ones included
            changed = [n for n in wanted if n not in current or not self._agrees(current[n], n, wanted[n], count)]
            gens = {str(c["spec"]["pool"].get("generation")) for c in current.values()}
            gen = max((int(c["spec"]["pool"].get("generation", 0)) for c in current.values()), default=0)
            if len(current) == len(wanted) and len(gens) == 1 and (not changed or (len(changed) == 1 and count > 1)):
                write = changed  # the pool's slices kept, one of several changed: written at its generation
            else:
                gen, write = gen + 1, list(wanted)
            devices = 0
            for name in write:
                part = wanted[name]
                doc = self._doc(name, part, gen, count)
                if name in current:
                    doc["metadata"]["resourceVersion"] = current[name]["metadata"].get("resourceVersion")
                    stored = self._write(doc, name)  # 409 when stale: next poll
                else:
                    stored = self._write(doc)
                self._check(part, stored)
                if self.stored is not None:
                    self.stored[name] = stored or doc
                self.agreed.pop(name, None)
                if stored is not None and _same(stored, part, count):  # kept as written: known until it changes
                    self.agreed[name] = (stored["metadata"].get("resourceVersion"), count, part)
                devices += len(part.get("devices", []))
            self._delete(stale)
        except BaseException:
            self.stored = None  # not known any more: listed before the next write
            raise
        if not write:
            return None
        extra = f" in {plural(count, 'slice')}" if count > 1 else ""
        if len(write) < count:  # one slice of several: the others as they were
            return f"published {plural(devices, 'device')} in slice {name} (generation {gen}, {count - 1} unchanged)"
        return f"published {plural(devices, 'device')}{extra} (generation {gen})"

    def _agrees(self, stored: dict[str, Any], name: str, part: dict[str, Any], count: int) -> bool:
        """Whether the stored slice ``name`` holds ``part`` (:func:`_same`): at once when it is the very
        version this publisher wrote and found kept as written, and ``part`` equals what it wrote (the
        same entry objects, :class:`Entries`: compared by identity)."""
        agreed = self.agreed.get(name)
        version = stored.get("metadata", {}).get("resourceVersion")
        if agreed is not None and version is not None and agreed[0] == version and agreed[1:] == (count, part):
            return True
        return _same(stored, part, count)

    def _check(self, part: dict[str, Any], stored: Any) -> None:
        """What the API server dropped of a slice it stored: counter sets, taints, consumable capacity."""
        if part.get("sharedCounters") and not (stored or {}).get("spec", {}).get("sharedCounters"):
            self.counters_dropped = True
        kept = {d.get("name") for d in (stored or {}).get("spec", {}).get("devices") or [] if d.get("taints")}
        if stored is not None and any("taints" in d and d["name"] not in kept for d in part.get("devices", [])):
            self.taints_dropped = True
        if stored is not None and capacity.dropped(part.get("devices", []), stored):
            self.capacity_dropped = True

    def _delete(self, names: list[str]) -> None:
        for name in names:
            self._call(self.api.delete_resource_slice, name)
            if self.stored is not None:
                self.stored.pop(name, None)

    def _doc(self, name: str, part: dict[str, Any], generation: int, count: int = 1) -> dict[str, Any]:
        return slice_doc(self.node, name, part, generation, count)


def _same(stored: dict[str, Any], part: dict[str, Any], count: int) -> bool:
    """Whether a stored slice holds ``part`` in a pool of ``count`` slices."""
    spec = stored["spec"]
    return (
        _stored(spec.get("devices")) == (part.get("devices") or [])
        and (spec.get("sharedCounters") or []) == (part.get("sharedCounters") or [])
        and spec["pool"].get("resourceSliceCount") == count
    )


def slice_doc(node: str, name: str, part: dict[str, Any], generation: int, count: int) -> dict[str, Any]:
    """The ResourceSlice object of one slice of the node's pool (``part``: its devices or counter sets)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            **part,
        },
    }


def _reason(err: Exception) -> str:
    """The API server's one-line reason for a refusal (its Status message), bounded."""
    try:
        return str(json.loads(getattr(err, "body", "") or "{}").get("message", ""))[:300]
    except (ValueError, AttributeError):
        return str(getattr(err, "reason", ""))[:300]
