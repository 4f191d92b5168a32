"""Simulated NVML: a stateful model of the driver, persisted in ``<sim>/.vgpukit-sim/nvml.json``.

It plays what the public mocks do not: profile ids vs enums, placements per profile,
INSUFFICIENT_RESOURCES when a GPU instance does not fit or its placement is taken, max counts, the
single media-engine set of ``+me`` profiles, mode changes pending until reset on Ampere (immediate on
Hopper+: the profile's ``mig_mode_without_reset``, the simulator's own fact), IN_USE for destroys/resets
while clients hold the GPU, driver-assigned GI/CI ids, ``MIG-``
UUIDs and the ``nvidia-caps`` device nodes (``/dev/nvidia-caps/nvidia-cap<minor>`` and
``/proc/driver/nvidia-caps/mig-minors`` inside the sim root).

Every call takes an flock on ``nvml.lock`` so concurrent commands see a consistent driver. The
simulated driver also carries *clients* (processes holding a GPU or a MIG device) and injectable
*faults* (``add_fault(sim_dir, "CreateGpuInstance", "UNKNOWN", nth=3)``): both are features of the
simulated host, set with the module functions at the bottom.
"""

from __future__ import annotations

import os
import uuid as uuidlib
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NotFound
from ..host import Host
from ..nvml import table as tables
from ..nvml.errors import (
    CODES_BY_NAME,
    IN_USE,
    INSUFFICIENT_RESOURCES,
    INVALID_ARGUMENT,
    NOT_FOUND,
    NOT_SUPPORTED,
    nvml_error,
)
from ..nvml.model import (
    CiProfile,
    ComputeInstance,
    GiProfile,
    GpuIndex,
    GpuInstance,
    GpuLinks,
    NvLink,
    NvmlGpu,
    NvmlProcess,
)
from .crash import KillAt
from .nvml_events import SimHealth
from .nvml_state import (
    _LINK,
    STATE_DIR,
    STATE_FILE,
    Store,
    _check_fault,
    _dir_stamp,
    _find_gi,
    _fits,
    _gi_id,
    _gi_profile,
    _gi_record,
    _gpu,
    _holders,
    _locked,
    _mask,
    _mig_on,
    _model,
    _names,
    _shape_ok,
    _used_mask,
    ci_minor,
    gi_minor,
    mig_minors_text,
    minor_gpu,
)
from .state import corrupt

_MIG_NS = uuidlib.UUID("6b1f8f0e-3c52-4a35-9d0b-6d4b1f0c7a11")
FAULT_CALLS = (
    "SetMigMode",
    "ResetGpu",
    "CreateGpuInstance",
    "DestroyGpuInstance",
    "CreateComputeInstance",
    "DestroyComputeInstance",
)


def initial_state(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The simulated driver's state for a new sim host.

    ``gpus``: one dict per physical GPU in PCI bus order with ``bdf``, ``uuid``, ``name`` (NVML
    product name, e.g. ``NVIDIA A100-SXM4-40GB``), ``model`` (profile-table key of
    vgpukit/data/mig/profiles.json, optional when ``name`` is a known product) and ``mig_capable``.
    """
    out = []
    for g in gpus:
        entry = {**g, "mig_current": False, "mig_pending": False, "gis": [], "clients": [], "generation": 0}
        if g.get("mig_capable"):
            m = tables.model(g.get("model"), g.get("name"))
            entry["model"] = m.key
            if entry.get("pci_device_id") is None and m.pci_device_ids:
                entry["pci_device_id"] = f"0x{m.pci_device_ids[0]:08X}"
        out.append(entry)
    return {"version": 1, "gpus": out, "faults": [], "next_pid": 4000}


CRASH_ENV = "VGPUKIT_SIM_CRASH_AT_NVML_CALL"


class SimNvml(SimHealth, GpuIndex):
    """The facade over the simulated driver of the sim host in ``sim_dir``."""

    def __init__(self, sim_dir: Path) -> None:
        self.sim_dir = Path(sim_dir)
        self.path = self.sim_dir / STATE_DIR / STATE_FILE
        self.host = Host(self.sim_dir)  # the simulated driver writes its device nodes into the sim root
        # Crash testing: the process kills itself (SIGKILL) just before its Nth state-changing driver
        # call, as a kill -9 between two NVML calls would on a real host.
        self.changes = KillAt(os.environ.get(CRASH_ENV, ""))
        self.store = Store(self.sim_dir)
        # /dev/nvidia-caps by GPU, with the directory's stamp and the driver state it was listed under
        self.caps: tuple[dict[int, set[int]], tuple[int, int], dict[str, Any]] | None = None
        self.busy: tuple[dict[str, Any], set[int]] | None = None  # the state read, its GPUs with instances
        self.minors_ok = False  # mig-minors found or written
        self.char: bool | None = None  # the host makes real device nodes (sim init --char-devices)

    def close(self) -> None:
        """Release the driver's lock file (a later call opens it again)."""
        self.store.close()

    def _read(self) -> Any:
        return self.store.locked(write=False)

    def _write(self, gpu: int) -> Any:
        self.changes.tick()
        return self.store.locked(write=True, gpu=gpu)

    # ------------------------------------------------------------------ devices and mode
    def gpus(self) -> list[NvmlGpu]:
        if not self.path.exists():
            return []
        out = []
        with self._read() as state:
            for i, g in enumerate(state["gpus"]):
                pci_id = g.get("pci_device_id")
                out.append(  # a lost GPU: listed with what the driver knew of it, marked (docs/simulator.md)
                    NvmlGpu(
                        i,
                        g["bdf"],
                        g["uuid"],
                        g["name"],
                        bool(g.get("mig_capable")),
                        bool(g.get("mig_current")),
                        bool(g.get("mig_pending")),
                        int(pci_id, 16) if isinstance(pci_id, str) else pci_id,
                        lost=bool(g.get("lost")),
                    )
                )
        return out

    def mig_mode(self, gpu: int) -> tuple[bool, bool]:
        with self._read() as state:
            g = _gpu(state, gpu)
            _model(g)
            return bool(g["mig_current"]), bool(g["mig_pending"])

    def set_mig_mode(self, gpu: int, enabled: bool) -> bool:
        with self._write(gpu) as state:
            g = _gpu(state, gpu)
            _model(g)
            _check_fault(state, "SetMigMode", gpu)
            if not enabled and g["gis"]:
                raise nvml_error(IN_USE, f"GPU {g['bdf']} still has GPU instances", device=g["bdf"])
            g["mig_pending"] = enabled
            if g["mig_current"] == enabled:
                return True
            # the simulator's own fact, from the profile's GPU model: Hopper and newer apply a mode change at
            # once, Ampere (and a GPU the profile does not say of) keeps it pending until a reset
            if not g.get("mig_mode_without_reset") or g["clients"]:
                return False  # activation status RESET_REQUIRED / IN_USE: pending
            g["mig_current"] = enabled
            return True

    def reset_gpu(self, gpu: int) -> None:
        with self._write(gpu) as state:
            g = _gpu(state, gpu)
            _check_fault(state, "ResetGpu", gpu)
            if g["clients"]:
                raise nvml_error(IN_USE, f"GPU {g['bdf']} is held by {_names(g['clients'])}", device=g["bdf"])
            g["mig_current"] = g["mig_pending"]
            g["gis"] = []  # GPU instances do not survive a reset
            self._sync_caps(state, gpu)

    # ------------------------------------------------------------------ GPU instances
    def gi_profiles(self, gpu: int) -> list[GiProfile]:
        with self._read() as state:
            return list(_model(_gpu(state, gpu)).profiles)

    def remaining_capacity(self, gpu: int, profile_id: int) -> int:
        with self._read() as state:
            g = _gpu(state, gpu)
            m = _mig_on(g)
            p = _gi_profile(m, g, profile_id)
            # placements of one profile are aligned and disjoint-or-nested: greedy counting is exact
            count, used = 0, _used_mask(g)
            existing = sum(1 for gi in g["gis"] if gi["profile_id"] == p.id)
            media_used = any((o := m.profile(gi["profile_id"])) is not None and o.media for gi in g["gis"])
            for s in p.starts:
                if not used & _mask(s, p.size):
                    used |= _mask(s, p.size)
                    count += 1
            limit = p.max_count - existing
            if p.media:
                limit = min(limit, 0 if media_used else 1)
            return max(0, min(count, limit))

    def gpu_instances(self, gpu: int) -> list[GpuInstance]:
        with self._read() as state:
            g = _gpu(state, gpu)
            _mig_on(g)
            return [_gi_record(gi) for gi in sorted(g["gis"], key=lambda x: x["id"])]

    def create_gpu_instance(self, gpu: int, profile_id: int, start: int | None = None) -> GpuInstance:
        with self._write(gpu) as state:
            g = _gpu(state, gpu)
            m = _mig_on(g)
            p = _gi_profile(m, g, profile_id)
            if start is not None and start not in p.starts:
                raise nvml_error(INVALID_ARGUMENT, f"placement start {start} is not valid for profile {p.name}")
            _check_fault(state, "CreateGpuInstance", gpu)
            if start is None:
                # the driver's own choice: the highest free start (why request order matters)
                start = next((s for s in sorted(p.starts, reverse=True) if _fits(g, m, p, s)), None)
                if start is None:
                    raise nvml_error(INSUFFICIENT_RESOURCES, f"no room for a {p.name} GPU instance on {g['bdf']}")
            elif not _fits(g, m, p, start):
                raise nvml_error(
                    INSUFFICIENT_RESOURCES, f"placement {start}:{p.size} for {p.name} is not available on {g['bdf']}"
                )
            gi = {"id": _gi_id(m, start, p.size), "profile_id": p.id, "start": start, "size": p.size, "cis": []}
            g["gis"].append(gi)
            self._sync_caps(state, gpu)
            return _gi_record(gi)

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        with self._write(gpu) as state:
            g = _gpu(state, gpu)
            _mig_on(g)
            gi = _find_gi(g, gi_id)
            _check_fault(state, "DestroyGpuInstance", gpu)
            holders = _holders(g, gi_id)
            if gi["cis"] or holders:
                why = f"held by {_names(holders)}" if holders else f"has {len(gi['cis'])} compute instance(s)"
                raise nvml_error(IN_USE, f"GPU instance {gi_id} on {g['bdf']} {why}", device=g["bdf"])
            g["gis"].remove(gi)
            self._sync_caps(state, gpu)

    # ------------------------------------------------------------------ compute instances
    def _gi_profile(self, g: dict[str, Any], gi: dict[str, Any]) -> GiProfile:
        p = _model(g).profile(gi["profile_id"])
        assert p is not None
        return p

    def ci_profiles(self, gpu: int, gi_id: int) -> list[CiProfile]:
        with self._read() as state:
            g = _gpu(state, gpu)
            _mig_on(g)
            return tables.ci_profiles(self._gi_profile(g, _find_gi(g, gi_id)))

    def create_compute_instance(self, gpu: int, gi_id: int, profile: int, start: int | None = None) -> ComputeInstance:
        with self._write(gpu) as state:
            g = _gpu(state, gpu)
            _mig_on(g)
            gi = _find_gi(g, gi_id)
            cp = next((c for c in tables.ci_profiles(self._gi_profile(g, gi)) if c.enum == profile), None)
            if cp is None:
                raise nvml_error(NOT_SUPPORTED, f"compute instance profile {profile} is not supported in GI {gi_id}")
            if start is not None and start not in cp.starts:
                raise nvml_error(INVALID_ARGUMENT, f"placement start {start} is not valid for {cp.name}")
            _check_fault(state, "CreateComputeInstance", gpu)
            used = 0
            for c in gi["cis"]:
                used |= _mask(c["start"], c["slices"])
            same = sum(1 for c in gi["cis"] if c["profile"] == profile)
            starts = [start] if start is not None else list(cp.starts)
            start = next((s for s in starts if not used & _mask(s, cp.slices)), None)
            if start is None or same >= cp.max_count:
                raise nvml_error(INSUFFICIENT_RESOURCES, f"no room for a {cp.name} compute instance in GI {gi_id}")
            ids = {c["id"] for c in gi["cis"]}
            ci_id = next(i for i in range(8) if i not in ids)
            g["generation"] = g.get("generation", 0) + 1
            mig_uuid = "MIG-" + str(uuidlib.uuid5(_MIG_NS, f"{g['uuid']}/{gi_id}/{ci_id}/{g['generation']}"))
            ci = {"id": ci_id, "profile": profile, "slices": cp.slices, "start": start, "uuid": mig_uuid}
            gi["cis"].append(ci)
            self._sync_caps(state, gpu)
            return ComputeInstance(ci_id, gi_id, profile, cp.slices, start, mig_uuid)

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        with self._write(gpu) as state:
            g = _gpu(state, gpu)
            _mig_on(g)
            gi = _find_gi(g, gi_id)
            ci = next((c for c in gi["cis"] if c["id"] == ci_id), None)
            if ci is None:
                raise nvml_error(NOT_FOUND, f"no compute instance {ci_id} in GI {gi_id} on {g['bdf']}")
            _check_fault(state, "DestroyComputeInstance", gpu)
            holders = [c for c in g["clients"] if c.get("gi") == gi_id and c.get("ci") in (None, ci_id)]
            if holders:
                raise nvml_error(IN_USE, f"compute instance {ci_id} of GI {gi_id} is held by {_names(holders)}")
            gi["cis"].remove(ci)
            self._sync_caps(state, gpu)

    def processes(self, gpu: int) -> list[NvmlProcess]:
        with self._read() as state:
            g = _gpu(state, gpu)
            return [NvmlProcess(c["pid"], c["name"], c.get("gi"), c.get("ci")) for c in g["clients"]]

    # ------------------------------------------------------------------ NVLink and NUMA
    def gpu_links(self) -> dict[int, GpuLinks]:
        """The simulated board's wiring (each GPU's ``nvlinks``: the profile's ``nvlink:``) and the
        ``numa_id`` of GPUs whose memory is a NUMA node."""
        out = {}
        with self._read() as state:
            for i, g in enumerate(state["gpus"]):
                if g.get("lost"):
                    continue  # it answers nothing: left out, as the facade's real backend leaves it
                links = g.get("nvlinks") or []
                numa = g.get("numa_id")
                if not _shape_ok(links, [_LINK]) or not (numa is None or _shape_ok(numa, int)):
                    raise corrupt(self.sim_dir, self.path)
                active = tuple(NvLink(k["link"], k["remote"], k["type"]) for k in links if k["active"])
                out[i] = GpuLinks(tuple(sorted(active, key=lambda k: k.link)), numa)
        return out

    # ------------------------------------------------------------------ device nodes
    def _sync_caps(self, state: dict[str, Any], gpu: int) -> None:
        """Make /dev/nvidia-caps and mig-minors reflect GPU ``gpu``'s GPU/compute instances (the
        driver's job). Only that GPU's minors (and config/monitor) are looked at: a call changes one
        GPU, and costs the same however many GPUs the host has."""
        host = self.host
        if not self.minors_ok:  # written once, at the first instance (the minors of every GPU)
            minors_file = host.proc("driver", "nvidia-caps", "mig-minors")
            if not minors_file.exists():
                host.write_file(minors_file, mig_minors_text(len(state["gpus"])))
            self.minors_ok = True
        caps = host.dev("nvidia-caps")
        g = state["gpus"][gpu]
        want: set[int] = {1, 2} if self._any_instances(state, gpu) else set()
        for gi in g["gis"]:
            want.add(gi_minor(gpu, gi["id"]))
            want |= {ci_minor(gpu, gi["id"], c["id"]) for c in gi["cis"]}
        by_gpu = self._caps_now(caps, state)
        from .tree import NULL_DEVICE

        mine, config = by_gpu.setdefault(gpu, set()), by_gpu.setdefault(-1, set())
        have = mine | (config & {1, 2})
        for minor in sorted(want - have):
            if self._char_devices():  # sim init --char-devices: a real node, /dev/null's numbers
                host.mkdir(caps)
                os.mknod(caps / f"nvidia-cap{minor}", 0o020400, NULL_DEVICE)
            else:
                host.write_file(caps / f"nvidia-cap{minor}", "", mode=0o400)  # plain file: sim nodes carry no numbers
            (mine if minor_gpu(minor) == gpu else config).add(minor)
        for minor in sorted(have - want):
            host.remove(caps / f"nvidia-cap{minor}")
            (mine if minor_gpu(minor) == gpu else config).discard(minor)
        if want != have:
            self.caps = (by_gpu, _dir_stamp(caps), state)

    def _any_instances(self, state: dict[str, Any], gpu: int) -> bool:
        """Whether any GPU has a GPU instance (the config and monitor nodes exist then): the GPUs
        that have one, found once per state read and kept as calls change GPU ``gpu``."""
        if self.busy is None or self.busy[0] is not state:
            self.busy = (state, {i for i, g in enumerate(state["gpus"]) if g["gis"]})
        busy = self.busy[1]
        if state["gpus"][gpu]["gis"]:
            busy.add(gpu)
        else:
            busy.discard(gpu)
        return bool(busy)

    def _char_devices(self) -> bool:
        if self.char is None:
            from .tree import char_devices

            self.char = char_devices(self.host.root)  # fixed at sim init
        return self.char

    def _caps_now(self, caps: Path, state: dict[str, Any]) -> dict[int, set[int]]:
        """The minors present in ``caps`` by GPU (-1: config and monitor): listed once, then kept
        while the driver state read is the same (another process that changes the nodes saves the
        state: :class:`Store` reads it again) and the directory's stamp too."""
        now = _dir_stamp(caps)
        if self.caps is None or self.caps[1] != now or self.caps[2] is not state:
            by_gpu: dict[int, set[int]] = {}
            for name in self.host.listdir(caps):
                if name.startswith("nvidia-cap") and name[10:].isdigit():
                    minor = int(name[10:])
                    by_gpu.setdefault(minor_gpu(minor), set()).add(minor)
            self.caps = (by_gpu, now, state)
        return self.caps[0]


# ----------------------------------------------------------------------------- simulated host controls
def add_fault(sim_dir: Path, call: str, error: str = "UNKNOWN", nth: int = 1, gpu: int | None = None) -> None:
    """Make the ``nth`` next ``call`` (e.g. CreateGpuInstance) fail with NVML ``error`` (one shot)."""
    if call not in FAULT_CALLS:
        raise InvalidInput(f"unknown NVML call {call!r}", hint=f"one of {', '.join(FAULT_CALLS)}")
    if error not in CODES_BY_NAME:
        raise InvalidInput(f"unknown NVML error {error!r}", hint=f"one of {', '.join(sorted(CODES_BY_NAME))}")
    if nth < 1:
        raise InvalidInput(f"nth must be >= 1, got {nth}")
    with _locked(sim_dir, write=True) as state:
        state["faults"].append({"call": call, "code": CODES_BY_NAME[error], "error": error, "nth": nth, "gpu": gpu})


def list_faults(sim_dir: Path) -> list[dict[str, Any]]:
    with _locked(sim_dir, write=False) as state:
        return list(state["faults"])


def clear_faults(sim_dir: Path) -> None:
    with _locked(sim_dir, write=True) as state:
        state["faults"] = []


def add_client(sim_dir: Path, gpu: int, name: str, gi: int | None = None, ci: int | None = None) -> int:
    """A process holding GPU ``gpu`` (or its MIG device GI ``gi``/CI ``ci``); returns its pid."""
    with _locked(sim_dir, write=True) as state:
        g = _gpu(state, gpu)
        if gi is not None:
            _find_gi(g, gi)
        pid = int(state.get("next_pid", 4000))
        state["next_pid"] = pid + 1
        g["clients"].append({"pid": pid, "name": name, "gi": gi, "ci": ci})
        return pid


def remove_client(sim_dir: Path, pid: int) -> None:
    with _locked(sim_dir, write=True) as state:
        for g in state["gpus"]:
            for c in g["clients"]:
                if c["pid"] == pid:
                    g["clients"].remove(c)
                    return
        raise NotFound(f"no simulated client with pid {pid}", value=pid)  # inside: a failed call saves nothing
