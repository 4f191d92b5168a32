"""The DRA plugin's driver: what the kubelet services share -- the node's publication (static devices, the
partitionable parts, devices shared by capacity, an unusable GPU's tainted: :mod:`.lost`), prepare and
unprepare of claims (:mod:`.claims`), the health report -- reading the host afresh for each."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from ...engine import session
from ...engine.env import Env
from ...errors import VgpukitError
from ...logs import logger
from ...node.inventory import Inventory, carry_unread
from ...watch.model import HostModel
from ..dra_v1 import api_pb2 as dra
from ..drahealth_v1 import api_pb2 as hl
from . import capacity, claims, extended, lost, metadata, ondemand_vgpu, partitions, slices
from .devices import DraDevice, dra_devices, pci_functions

log = logger("vgpukit.k8s.dra")
ClaimReader = Callable[[str, str, str], dict[str, Any]]  # namespace, name, uid -> the ResourceClaim


class Collect(Protocol):
    """The node's inventory now; ``only``: just these PCI functions (with their PFs) read of the bus."""

    def __call__(self, only: frozenset[str] | None = None) -> Inventory: ...


Opener = Callable[[], tuple[Env, Collect, Callable[[], None]]]


class Driver:
    """What the services share: the host (opened afresh per call), the node's pool, one request at a time."""

    def __init__(
        self,
        node: str,
        open_host: Opener,
        read_claim: ClaimReader,
        health: Callable[[], dict[str, str]],
        partitionable: str = "off",
        taints: str = "off",
        unhealthy_effect: str = "NoSchedule",
        share: capacity.Choice | None = None,
        device_metadata: bool = False,
    ):
        self.pool = node
        self.partitionable = partitionable  # auto | on | off: publish made-on-demand MIG slices (.partitions)
        # auto: as the API server serves them, once the publisher has found out (None until then)
        self.counters_ok: bool | None = None if partitionable == "auto" else partitionable == "on"  # on: until
        # the API server is found dropping them (then the static view, an error logged)
        self.taints = taints  # auto | on | off: publish unusable devices with a taint rather than leave them out
        self.taints_ok = taints != "off"  # auto: until the API server drops the taints
        self.unhealthy_effect = unhealthy_effect  # NoSchedule | NoExecute: the taint of an unusable device
        self.capacity = capacity.Offer(share or capacity.Choice())  # devices shared by capacity (.capacity)
        self.device_metadata = device_metadata  # write each prepared request's metadata file (KEP-5304)
        self.open_host = open_host
        self.read_claim = read_claim
        self.health = health
        self.evicting: Callable[[], dict[str, str]] = dict  # devices whose taint evicts (NoExecute): drained
        self.lock = threading.Lock()
        self.registered: bool | None = None
        self.registration_error = ""
        self.last = (Inventory(), slices.NvmlFacts(None))  # the last good read (a lost GPU fails a read)
        self.vgpu_types: dict[str, str] = {}  # each existing vGPU's type id (vgpuTypeID), as last read
        self.said: dict[str, str] = {}  # per GPU, the note on what it offers last logged
        self.warned: set[str] = set()  # errors about the cluster logged once
        self.told: dict[str, set[str]] = {}  # the read failures logged, by reader (once each, while they last)
        self.kept = lost.Kept()  # the parts last published: a lost GPU's are published again, tainted
        self.hidden: set[str] = set()  # what claims made, as last known (a lost GPU's cannot be listed)
        self.rings: set[Callable[[], None]] = set()  # the streams' wake-ups (:meth:`listen`)
        self.model: HostModel | None = None  # the watch's (vgpukit.watch): its views instead of a read per call
        self.entries = slices.Entries()  # the VFs' entries of the last publication, made again only where changed

    def version(self) -> int:
        """The watch's model's version: taken before a read, handed to :meth:`wait_change` after it."""
        return self.model.version if self.model is not None else 0

    def wait_change(
        self, stop: threading.Event, timeout: float, since: int, active: Callable[[], bool] = lambda: True
    ) -> None:
        """Until the watch's model differs from version ``since`` (at once when it changed while the caller
        read and published; without a model: ``timeout`` seconds), ``stop`` is set, ``active`` turns False
        or ``timeout`` passed; whoever sets ``stop`` or ends a stream calls :meth:`nudge`."""
        if self.model is None:
            stop.wait(timeout)
            return
        self.model.wait(since, timeout, until=lambda: stop.is_set() or not active())

    def nudge(self) -> None:
        """Wake every :meth:`wait_change` (and every stream :meth:`listen` ing) to look at its stop and stream again."""
        if self.model is not None:
            self.model.nudge()
        for ring in list(self.rings):
            ring()

    def listen(self, ring: Callable[[], None]) -> None:
        """Call ``ring`` (from the watch's thread, any thread) whenever the model changes or :meth:`nudge`."""
        self.rings.add(ring)
        if self.model is not None:
            self.model.listeners.add(ring)

    def unlisten(self, ring: Callable[[], None]) -> None:
        self.rings.discard(ring)
        if self.model is not None:
            self.model.listeners.discard(ring)

    def _once(self, reader: str, now: set[str]) -> None:
        """Log each read failure once while it lasts (a lost GPU fails the same read at every poll)."""
        for line in sorted(now - self.told.get(reader, set())):
            log.warning("%s", line)
        self.told[reader] = now

    def read(self) -> tuple[Inventory, slices.NvmlFacts]:
        """The inventory and NVML's facts now; where a read fails (a GPU fell off the bus), the last good one
        (NVML's facts of a GPU it cannot answer for: the last known); with the watch's model, its views."""
        if self.model is not None:  # kept current by the watch (views of ..watched: held, facts, vgpu_types)
            inv, facts = self.model.get("held"), self.model.get("facts")
            self.vgpu_types = self.model.get("vgpu_types") or self.vgpu_types
            last_inv, last_facts = self.last
            self.last = (
                carry_unread(last_inv, inv) if inv else last_inv,
                facts.carry(last_facts) if facts else last_facts,
            )
            return self.last
        env, collect, close = self.open_host()
        inv, facts = self.last
        failed: set[str] = set()
        try:
            try:  # a lost GPU's devices are kept from the last read (tainted or left out by health)
                inv = carry_unread(inv, collect())
            except VgpukitError as err:
                failed.add(f"reading the host failed (devices unchanged): {err}")
            try:
                facts = slices.NvmlFacts(env.nvml).carry(facts)
            except VgpukitError as err:
                failed.add(f"reading NVML failed (facts unchanged): {err}")
            try:
                self.vgpu_types = ondemand_vgpu.existing_types(env)
            except VgpukitError as err:
                failed.add(f"reading the vGPUs failed (types unchanged): {err}")
        finally:
            close()
        self._once("read", failed)
        self.last = (inv, facts)
        return inv, facts

    def devices(self) -> dict[str, DraDevice]:
        return dra_devices(self.read()[0])

    def slice_entries(self) -> list[dict[str, Any]]:
        """The ResourceSlice's devices now (:mod:`.slices`): usable static devices with their attributes."""
        return self.publication()[0]

    def publication(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """The node's static devices and, where partitionable devices are published, one part per GPU that
        offers MIG slices or vGPUs made on demand (:mod:`.partitions`: its counter set, the devices consuming
        it, the whole GPU among them where MIG mode changes without a reset); the static devices of what
        claims made, and the whole GPUs in a part, are left out of the static ones; each device exclusive or
        shared by capacity (:mod:`.capacity`: a GPU shared so offers no part). An unusable GPU's devices are
        tainted (or left out), a lost one's as last published, and the devices claims hold on it too
        (:mod:`.lost`)."""
        sick = self.health()
        evict = self.evicting() if self.taints_ok else {}  # drained (vgpukit drain): their pods are evicted
        inv, facts = self.read()
        effect = self.unhealthy_effect

        def entry(d: DraDevice) -> dict[str, Any] | None:
            if slices.unusable(d, sick) and not self.taints_ok:
                return None
            e = slices.device_entry(d, inv.pci, facts, self.vgpu_types)
            own = "NoExecute" if slices.unusable(d, evict) else effect
            return slices.taint(e, own) if slices.unusable(d, sick) else e

        every = dra_devices(inv)
        marked = self.entries.marked(
            slices.offered(every, sick, self.taints_ok),
            lambda d: extended.annotate([e], every)[0] if (e := entry(d)) is not None else None,  # KEP-5004 names
            (inv.pci, facts, self.vgpu_types, sick, evict, self.taints_ok, effect),
        )
        found = partitions.Publication()
        if self.counters_ok:
            env, _collect, close = self.open_host()
            try:
                found = partitions.publication(env, inv.pci, {e["name"]: e for e in marked}, facts)
            except VgpukitError as err:
                found.warnings[""] = f"reading the MIG slices failed (not published): {err}"
            finally:
                close()
            for bdf, note in found.notes.items():
                if self.said.get(bdf) != note:
                    self.said[bdf] = note
                    log.info("%s", note)
        ids = {d.device.id for d in every.values()}
        found.hidden |= self.hidden & ids if found.warnings or found.unread else set()  # a GPU not read: its claims
        self.hidden = found.hidden
        self._once("parts", set(found.warnings.values()))
        devices = {n: d for n, d in every.items() if d.device.id not in found.hidden}
        marked = [e for e in marked if e["name"] in devices and e["name"] not in found.moved]
        env, _collect, close = self.open_host()
        try:  # each device exclusive or shared by capacity (.capacity)
            try:
                entries, parts = capacity.arrange(self.capacity, env, devices, marked, found.parts, entry)
            except VgpukitError as err:
                log.warning("reading the claims shared by capacity failed (published exclusively): %s", err)
                entries, parts = marked, found.parts
            parts = lost.mark(parts, sick, self.taints_ok, effect)
            parts = self.kept.carry(parts, sick, self.taints_ok, effect) if self.counters_ok else parts
            in_parts = {str(d["name"]) for p in parts.values() for d in p.get("devices") or []}
            entries = [e for e in entries if e["name"] not in in_parts]  # a lost GPU's part keeps its whole GPU
            if self.taints_ok:
                published = {str(e["name"]) for e in entries} | in_parts
                entries += lost.claimed_entries(env, published, sick, effect)
        finally:
            close()
        return entries, parts

    def prepare(self, claim: dra.Claim) -> dra.NodePrepareResourceResponse:
        with self.lock:
            env, collect, close = self.open_host()
            try:
                done = claims.recorded(env, claim.uid)
                if done is None:
                    doc = self.read_claim(claim.namespace, claim.name, claim.uid)
                    results = claims.results_of(doc, self.pool)
                    ref = {"namespace": claim.namespace, "name": claim.name, **metadata.pod_claim(doc)}
                    with session(env):  # the host lock: an interrupted change repaired before the inventory
                        # the inventory of the claim's devices only: its cost follows the claim, not the host
                        names = [capacity.base_name(r.device) or r.device for r in results]
                        offered = capacity.with_shared(
                            dra_devices(collect(only=pci_functions(names))), [r.device for r in results]
                        )
                        done = claims.prepare(env, claim.uid, ref, results, offered, self.device_metadata)
            except VgpukitError as err:
                return dra.NodePrepareResourceResponse(error=str(err)[:1000])
            finally:
                close()
        devices = [
            dra.Device(request_names=p.request_names, pool_name=p.pool, device_name=p.device, cdi_device_ids=p.cdi_ids)
            for p in done
        ]
        for d, p in zip(devices, done, strict=True):
            if p.share_id:  # a share of a device shared by capacity: the allocation's shareID (.shares)
                d.share_id = p.share_id
        return dra.NodePrepareResourceResponse(devices=devices)

    def unprepare(self, claim: dra.Claim) -> dra.NodeUnprepareResourceResponse:
        with self.lock:
            env, _collect, close = self.open_host()
            try:
                claims.unprepare(env, claim.uid)  # under the host lock, an interrupted change repaired first
            except VgpukitError as err:
                return dra.NodeUnprepareResourceResponse(error=str(err)[:1000])
            finally:
                close()
        return dra.NodeUnprepareResourceResponse()

    def health_report(self) -> list[tuple[str, int, str]]:
        """(device, status, message) of every device (and of each made on demand for a claim): UNHEALTHY where
        the health layer finds its PCI function (a MIG slice's, a vGPU's: its GPU's) unusable."""
        try:
            sick = self.health()
        except VgpukitError as err:
            return [(name, hl.UNKNOWN, f"health check failed: {err}"[:1024]) for name in self.devices()]
        why = {name: slices.unusable(dev, sick) for name, dev in self.devices().items()}  # a MIG slice: own, GPU's
        env, _collect, close = self.open_host()
        try:  # what claims hold: made on demand (by its GPU), or on a GPU not read any more (a lost one's)
            held = lost.claimed(env)
        finally:
            close()
        for name, h in held.items():
            if name not in why and h["function"]:
                why[name] = sick.get(h["function"], "")
        for name in self.capacity.published:  # a shared device: its device's health
            why[name] = why.get(capacity.base_name(name) or name, "")
        out: list[tuple[str, int, str]] = []
        for name, reason in sorted(why.items()):
            out.append((name, hl.UNHEALTHY, reason[:1024]) if reason else (name, hl.HEALTHY, ""))
        return out
