"""Made-on-demand MIG slices: a DRA device for every (profile, placement) of a GPU in MIG mode, created at
prepare and destroyed at unprepare.

The device name says where: ``gpu-0000-07-00-0-mig-3g-20gb-4`` is a 3g.20gb GPU instance at memory slot 4
of the GPU at 0000:07:00.0. The placement is the scheduler's (it chose that device); the MIG area's
planner (:func:`vgpukit.mig.layout.plan_gi_at`) plans the GPU instance and its full-size compute
instance there, or refuses (slots taken, MIG mode off), and the change engine runs the steps. On a GPU
whose model changes MIG mode without a reset, the first slice's steps turn MIG mode on (recorded:
:meth:`vgpukit.host.Host.dra_mig_mode_record`) and the last slice's unprepare turns it off.

Crash safety: the claim's *made record* (:meth:`vgpukit.host.Host.dra_made_record`: GPU,
profile, placement) is written in the same journaled engine run as the GPU instance, before it; a
kill -9 during that run is rolled back whole by the next command's recovery. Once the run is
committed the record names the slice, so the next prepare of the claim finds it (and keeps it) and
its unprepare destroys exactly it, whatever happened in between (the plugin restarted, the claim's
CDI spec not written yet).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ...engine import execute
from ...engine.env import Env
from ...engine.files import PutFile
from ...engine.step import Step
from ...errors import Busy, Conflict, HostIOError
from ...logs import logger
from ...mig import layout
from ...mig.steps import SetMode, find_gi
from ...node.dra_names import device_name
from ...node.inventory import PREFIX, Device
from ...nvml import GiProfile, Nvml, NvmlGpu
from . import ondemand_vgpu
from .devices import DraDevice

log = logger("vgpukit.k8s.dra")


class Made(msgspec.Struct, frozen=True):
    """A made-on-demand device: a GPU instance of ``profile`` at ``start`` on the GPU at ``bdf``."""

    name: str
    gpu: NvmlGpu
    profile: GiProfile
    start: int


def catalog(gpu: NvmlGpu, profiles: list[GiProfile]) -> dict[str, Made]:
    """Every (profile, placement) of the GPU's profiles, by DRA device name. Two profiles whose names
    read the same as a DNS label (``+me``, ``-me``) carry their profile id too."""

    def part(p: GiProfile) -> str:
        return p.name.lower().replace("+", "-").replace(".", "-")

    seen: dict[str, int] = {}
    for p in profiles:
        seen[part(p)] = seen.get(part(p), 0) + 1
    out: dict[str, Made] = {}
    for p in profiles:
        label = part(p) if seen[part(p)] == 1 else f"{part(p)}-p{p.id}"
        for s in p.starts:
            name = device_name("gpu", f"{gpu.bdf}-mig-{label}-{s}")
            out[name] = Made(name, gpu, p, s)
    return out


def mig_gpus(nvml: Nvml) -> list[NvmlGpu]:
    """The GPUs made-on-demand slices are offered on: MIG-capable and in MIG mode now, or a model that turns
    MIG mode on without a GPU reset (Hopper and newer: :func:`vgpukit.mig.layout.toggles_without_reset`).
    Turning it on where that needs a reset (Ampere) is never done at a pod's start."""
    return [g for g in nvml.gpus() if g.mig_capable and (g.mig_current or layout.toggles_without_reset(g))]


def lookup(nvml: Nvml, names: list[str]) -> dict[str, Made]:
    """The made-on-demand devices among ``names`` (a name of no such GPU is not one)."""
    want = {n for n in names if "-mig-" in n}
    out: dict[str, Made] = {}
    for gpu in mig_gpus(nvml) if want else []:
        if not any(n.startswith(device_name("gpu", gpu.bdf) + "-") for n in want):
            continue
        table = catalog(gpu, nvml.gi_profiles(gpu.index))
        out.update({n: table[n] for n in want if n in table})
    return out


def read_made(env: Env, uid: str) -> list[dict[str, Any]] | None:
    """What was made for a claim, None without a record: MIG slices (``kind`` ``mig``: GPU, profile id and
    name, start, size, device) and vGPUs (``kind`` ``vgpu``: GPU, interface, type, id, device)."""
    path = env.host.dra_made_record(uid)
    text = env.host.read_raw_opt(path)
    if not isinstance(text, str):
        return None
    try:
        made = [m for m in json.loads(text)["made"] if isinstance(m, dict)]
        for m in made:
            if m.get("kind", "mig") == "mig":
                str(m["device"]), str(m["gpu"]), int(m["profileId"]), int(m["start"])
            else:
                str(m["device"]), str(m["gpu"]), str(m["id"]), str(m["type"])
        return made
    except (ValueError, KeyError, TypeError):  # not quoted: file content stays out of messages
        raise HostIOError(f"the made record of claim {uid} is unreadable: {env.host.display(path)}") from None


def all_made(env: Env) -> list[dict[str, Any]]:
    """What was made for every claim on this node (an unreadable record is logged and skipped)."""
    out: list[dict[str, Any]] = []
    for name in env.host.listdir(env.host.dra_made_record()):
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            out += read_made(env, name.removesuffix(".json")) or []
        except (HostIOError, ValueError) as err:
            log.warning("%s", err)
    return out


def placements(made: list[dict[str, Any]]) -> set[tuple[str, int, int]]:
    """(GPU BDF, profile id, start) of every MIG slice among made-record entries (:func:`read_made`,
    :func:`all_made`)."""
    return {(str(m["gpu"]), int(m["profileId"]), int(m["start"])) for m in made if m.get("kind", "mig") == "mig"}


def _entry(m: Made) -> dict[str, Any]:
    return {
        "kind": "mig",
        "device": m.name,
        "gpu": m.gpu.bdf,
        "profileId": m.profile.id,
        "profile": m.profile.name,
        "start": m.start,
        "size": m.profile.size,
    }


def _mode_record(env: Env, bdf: str, uid: str | None) -> PutFile:
    """The record that MIG mode is on for claims (:meth:`vgpukit.host.Host.dra_mig_mode_record`),
    written with the first slice that turns it on, removed (``uid`` None) when it is turned off again."""
    path = env.host.display(env.host.dra_mig_mode_record(bdf))
    if uid is None:
        return PutFile(path, None, what=f"forget that MIG mode was turned on for claims on {bdf}")
    text = json.dumps({"gpu": bdf, "claim": uid}) + "\n"
    return PutFile(path, text, 0o600, what=f"record that MIG mode is turned on for claims on {bdf}")


def _mig_steps(
    env: Env, uid: str, wanted: dict[str, Made], ours: set[tuple[str, int, int]], entries: list[dict[str, Any]]
) -> list[Step]:
    """The MIG planner's steps for each wanted slice at its placement (a slice ``ours`` is kept), MIG mode
    turned on first where it is off on a GPU that needs no reset for it (with its record); the made-record
    entries of the new ones are added to ``entries``."""
    nvml = env.nvml
    assert nvml is not None
    steps: list[Step] = []
    turned: set[str] = set()
    for m in wanted.values():
        mine = (m.gpu.bdf, m.profile.id, m.start) in ours
        req = layout.GiAtRequest(m.gpu, m.profile.id, m.start, ours=mine, turn_on=True)
        plan = [s for s in layout.plan_gi_at(nvml, req).steps if not (isinstance(s, SetMode) and m.gpu.bdf in turned)]
        if any(isinstance(s, SetMode) for s in plan):
            turned.add(m.gpu.bdf)
            steps.append(_mode_record(env, m.gpu.bdf, uid))
        steps += plan
        if not mine:
            entries.append(_entry(m))
    return steps


def _mig_devices(nvml: Nvml, wanted: dict[str, Made]) -> dict[str, DraDevice]:
    """The made slices as devices: the CDI entry of each one's (full-size) MIG device."""
    out: dict[str, DraDevice] = {}
    for m in wanted.values():
        gi = find_gi(nvml, m.gpu.index, m.profile.id, m.start)
        if gi is None or not gi.compute_instances:
            raise HostIOError(
                f"{m.name}: the {m.profile.name} GPU instance at slot {m.start} is not there after creating it"
            )
        uuid = gi.compute_instances[0].uuid
        dev = Device(uuid, m.gpu.bdf, None, f"{PREFIX}/mig={uuid}")
        out[m.name] = DraDevice(m.name, "mig", dev, f"{PREFIX}/mig-{m.profile.name}")
    return out


def refuse_under_whole(env: Env, uid: str, names: list[str], wanted: dict[str, Made]) -> None:
    """A MIG slice is never made on a GPU a claim holds whole (this claim too), or shares by capacity:
    the scheduler's counters keep it from allocating both, but a cluster that dropped the counters (or a
    stale allocation) must not turn MIG mode on under a pod (the converse, the whole GPU while slices exist,
    is refused by :func:`whole_gpu`: MIG mode is on)."""
    from .capacity import holds, shared_name

    exclusive, shared = holds(env.host, but=uid)
    for m in wanted.values():
        whole = device_name("gpu", m.gpu.bdf)
        if whole in exclusive or whole in names:
            raise Conflict(
                f"device {m.name}: the whole GPU {whole} is prepared for a claim: no MIG slice is made on it"
            )
        if whole in shared:
            raise Conflict(
                f"device {m.name}: {whole} is shared by capacity ({shared_name(whole)} holds shares): no MIG slice "
                "is made on it"
            )


def prepare(env: Env, uid: str, names: list[str], others: tuple[str, ...] = ()) -> dict[str, DraDevice]:
    """Create the made-on-demand devices among ``names`` (one engine run: the made record, then each MIG
    slice or vGPU) and return them as devices whose CDI entry is the new MIG device's, mdev's or VF's.
    What the claim's record names already is kept (a prepare again after a crash). ``others``: the claim's
    other devices (a slice is not made on a GPU the claim also holds whole)."""
    nvml = env.nvml
    wholes = whole_gpu(env, [n for n in names if "-mig-" not in n and "-vgpu-" not in n])
    wanted = lookup(nvml, names) if nvml is not None and names else {}
    vgpus = ondemand_vgpu.lookup(env, names) if names else {}
    if not wanted and not vgpus:
        return wholes
    old = read_made(env, uid) or []
    ours = placements(old)
    fresh = {n: m for n, m in wanted.items() if (m.gpu.bdf, m.profile.id, m.start) not in ours}
    refuse_under_whole(env, uid, [*names, *others], fresh)
    kept = {str(m["device"]): m for m in old if m.get("kind") == "vgpu" and ondemand_vgpu.exists(env, m)}
    steps: list[Step] = []
    entries = [m for m in old if m.get("kind", "mig") == "mig" or str(m["device"]) in kept]
    if nvml is not None:
        steps += _mig_steps(env, uid, wanted, ours, entries)
    for v in vgpus.values():
        if v.name not in kept:
            more, entry = ondemand_vgpu.plan(env, v)
            steps += more
            entries.append(entry)
    record = json.dumps({"claim": uid, "made": entries}, indent=2) + "\n"
    path = env.host.display(env.host.dra_made_record(uid))
    execute(env, [PutFile(path, record, 0o600, what=f"record what is made for claim {uid}"), *steps])
    out = _mig_devices(nvml, wanted) if nvml is not None else {}
    for e in entries:
        if e.get("kind") == "vgpu" and str(e["device"]) in vgpus:
            out[str(e["device"])] = ondemand_vgpu.device(e)
    return {**wholes, **out}


def unprepare_steps(env: Env, uid: str) -> list[Step]:
    """The steps destroying what was made for the claim (the MIG and vGPU planners': refused while in
    use), MIG mode turned off on a GPU whose last slice this was where a claim turned it on, and
    removing its made record; none when nothing was made."""
    made = read_made(env, uid)
    if made is None:
        return []
    nvml = env.nvml
    mig = [m for m in made if m.get("kind", "mig") == "mig"]
    gpus = {g.bdf: g for g in nvml.gpus()} if nvml is not None and mig else {}
    by_gpu: dict[str, list[tuple[int, int]]] = {}
    for m in mig:
        by_gpu.setdefault(str(m["gpu"]), []).append((int(m["profileId"]), int(m["start"])))
    steps: list[Step] = []
    for bdf, where in by_gpu.items():
        gpu = gpus.get(bdf)
        if gpu is None or nvml is None or gpu.lost:  # gone or lost (fell off the bus): so is what was made on it
            log.warning("claim %s: GPU %s is %s; its MIG slice with it", uid, bdf, "lost" if gpu else "gone")
            continue
        turned_on = env.host.exists(env.host.dra_mig_mode_record(bdf))
        plan = layout.plan_release(nvml, gpu, where, turn_off=turned_on)
        steps += plan.steps
        if any(isinstance(s, SetMode) for s in plan.steps):
            steps.append(_mode_record(env, bdf, None))
        elif plan.note:
            log.warning("claim %s: %s", uid, plan.note)
    steps += ondemand_vgpu.remove_steps(env, [m for m in made if m.get("kind") == "vgpu"])
    steps.append(PutFile(env.host.display(env.host.dra_made_record(uid)), None))
    return steps


def whole_gpu(env: Env, names: list[str]) -> dict[str, DraDevice]:
    """A whole GPU among ``names`` that a claim's last slice left in MIG mode (something held the GPU when
    it was unprepared): MIG mode turned off now, in one engine run with its record, and the GPU returned
    as a device (the MIG planner refuses while the GPU is still held)."""
    nvml = env.nvml
    out: dict[str, DraDevice] = {}
    for gpu in nvml.gpus() if nvml is not None and names else []:
        name = device_name("gpu", gpu.bdf)
        if name not in names or not gpu.mig_current or not env.host.exists(env.host.dra_mig_mode_record(gpu.bdf)):
            continue
        assert nvml is not None
        plan = layout.plan_release(nvml, gpu, [], turn_off=True)
        if not any(isinstance(s, SetMode) for s in plan.steps):
            raise Busy(plan.note or f"{gpu.bdf}: MIG mode is on with GPU instances on it", device=gpu.bdf)
        execute(env, [*plan.steps, _mode_record(env, gpu.bdf, None)])
        out[name] = DraDevice(name, "gpu", Device(f"{gpu.bdf}-0", gpu.bdf, None, f"{PREFIX}/gpu={gpu.uuid}"))
    return out
