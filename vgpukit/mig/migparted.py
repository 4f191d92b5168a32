"""mig-parted's semantics over a parsed config: which entry a GPU gets, the plans, assert, export.

The walk (mig-parted ``WalkSelectedMigConfigForEachGPU``): for each entry in file order, every GPU
that passes its ``device-filter`` and ``devices``. A GPU that is not MIG-capable is skipped when the
entry says ``devices: all`` or ``mig-enabled: false``; an entry that names it and asks for MIG is an
error. A MIG-capable GPU selected by several entries ends as the last one says (mig-parted applies
them in order); entries that disagree on ``mig-enabled`` make mig-parted fail half-way, so a full
apply refuses them up front (``--mode-only``: the last one wins, as in mig-parted).

The MIG config planner every front end calls: :func:`plan_config` takes a typed
:class:`MigRequest` (the selected config's entries and how to apply them) and the GPUs (through
the NVML facade, read only) and returns a :class:`MigPlan` (steps per GPU and the warnings about
this host) or raises a typed refusal (InvalidInput, NeverFits, NoCapacity, Busy, ResetRequired,
Unsupported, DeviceUnusable: a GPU the health layer finds unusable -- :func:`build_plans` reads the
health fact itself). It never executes, prints or parses argv; ``mig apply`` and ``vgpukit apply``
run its steps on the change engine.

Public: :class:`MigRequest`, :class:`MigPlan`, :func:`plan_config`, :func:`host_notes`,
:func:`device_ids`, :func:`walk`, :func:`build_plans`, :func:`split_phases`, :func:`assert_config`,
:func:`export_entries`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .. import naming
from ..errors import DeviceUnusable, InvalidInput, Unsupported, VgpukitError
from ..exclusion import LOST, Exclusions, refusal
from ..nvml import GiProfile, Nvml, NvmlGpu
from ..partial import Unread, each_gpu
from ..pci import Scan
from . import layout
from .config import MAX_INDEX, SAFE_NAME, DeviceId, Entry, MigName, parse_device_id
from .spec import WantGi, ci_allowed, ci_layout_fits
from .steps import MigStep, Reset, SetMode


class MigRequest(msgspec.Struct, frozen=True):
    """The selected config of a mig-parted file and how to apply it."""

    entries: Sequence[Entry]
    source: str  # the file, as messages name it
    config: str | None = None  # the selected config's name
    allow_reset: bool = True
    mode_only: bool = False
    skip_reset: bool = False
    strict: bool = False  # a warning about this host refuses (exit 2) instead


@dataclass
class MigPlan:
    plans: list[layout.GpuPlan]
    warnings: list[str] = field(default_factory=list)
    skipped: list[DeviceUnusable] = field(default_factory=list)  # GPUs left alone (a config door's)

    @property
    def steps(self) -> list[MigStep]:
        return [s for p in self.plans for s in p.steps]


def plan_config(nvml: Nvml, scan: Scan | None, req: MigRequest, exclusions: Exclusions | None = None) -> MigPlan:
    """The steps that make the GPUs as ``req`` says, with the warnings about this host; raises before
    anything is touched when it cannot be done. A GPU to leave alone (``exclusions``, else the health
    fact read here) is in ``skipped`` with its refusal, the others planned (a config door's way)."""
    warnings = host_notes(nvml.gpus(), req.entries, req.source, req.config)
    strict(warnings, req.strict)
    skipped: list[DeviceUnusable] = []
    plans = build_plans(
        scan,
        nvml,
        req.entries,
        req.source,
        req.allow_reset,
        mode_only=req.mode_only,
        skip_reset=req.skip_reset,
        health=exclusions,
        skipped=skipped,
    )
    return MigPlan(plans, warnings, skipped)


def strict(warnings: Sequence[str], refuse: bool) -> None:
    """Under --strict a warning is the refusal it would be without mig-parted's leniency (exit 2)."""
    if refuse and warnings:
        more = f" (and {len(warnings) - 1} more)" if len(warnings) > 1 else ""
        raise InvalidInput(f"{warnings[0]}{more}", hint="refused under --strict; without it this is a warning")


def host_notes(gpus: Sequence[NvmlGpu], entries: Sequence[Entry], source: str, config: str | None) -> list[str]:
    """What the selected config says that no GPU here can be: an index past the last GPU (mig-parted
    skips it silently; the entry may be meant for a larger host)."""
    have = {g.index for g in gpus}
    name = f": config {config}" if config is not None and SAFE_NAME.match(config) else ""
    out = []
    for e in entries:
        for i in sorted({i for i in e.devices or () if 0 <= i <= MAX_INDEX and i not in have}):
            out.append(
                f"{source}:{e.marks.get('devices', (e.line, 0))[0]}{name}: devices: index {i} names no GPU here"
                f" ({len(have)} GPUs): "
                "the entry skips it, as mig-parted does"
            )
    return out


def _names(scan: Scan | None) -> dict[str, str]:
    """PCI address -> gpuN, as every command names GPUs (NVML order when there is no sysfs)."""
    try:
        return naming.aliases(scan) if scan is not None else {}
    except VgpukitError:
        return {}


def _label(names: dict[str, str], gpu: NvmlGpu) -> str:
    return f"{names.get(gpu.bdf, f'gpu{gpu.index}')} ({gpu.bdf})"


def device_ids(scan: Scan | None, gpus: Sequence[NvmlGpu]) -> dict[int, DeviceId | None]:
    """Each GPU's PCI id as mig-parted reads it: device, vendor and subsystem from the PCI config
    (sysfs), else the packed id NVML reports (no subsystem)."""
    out: dict[int, DeviceId | None] = {}
    for g in gpus:
        hw: DeviceId | None = None
        try:
            dev = scan.device(g.bdf) if scan is not None else None
        except VgpukitError:
            dev = None
        if dev is not None:
            sub = None
            if dev.subsystem:
                sv, sd = dev.subsystem.split(":")
                sub = (int(sd, 16), int(sv, 16))
            hw = DeviceId(int(dev.device, 16), int(dev.vendor, 16), sub)
        elif g.pci_device_id is not None:
            hw = parse_device_id(f"0x{g.pci_device_id:08X}")
        out[g.index] = hw
    return out


@dataclass
class GpuChoice:
    """What the walk decided for one GPU."""

    gpu: NvmlGpu
    entries: list[Entry] = field(default_factory=list)  # every entry that selects it, in file order
    skipped: bool = False  # not MIG-capable, skipped by every entry that selects it

    @property
    def entry(self) -> Entry | None:
        """The entry that decides (the last one; None when skipped)."""
        return None if self.skipped or not self.entries else self.entries[-1]


def walk(
    entries: Sequence[Entry], gpus: Sequence[NvmlGpu], ids: dict[int, DeviceId | None], source: str
) -> list[GpuChoice]:
    """GPUs in NVML order with the entries that select them. Raises Unsupported when an entry names a
    GPU that is not MIG-capable and asks for MIG (mig-parted: "cannot set MIG mode on non MIG-capable GPU")."""
    choices = []
    for g in gpus:
        c = GpuChoice(g)
        for e in entries:
            if not e.selects(g.index, ids.get(g.index)):
                continue
            if not g.mig_capable:
                if e.all_devices or not e.mig_enabled:
                    c.skipped = True
                    continue
                raise Unsupported(
                    f"{e.place(source, 'devices')}: gpu{g.index} ({g.name}) is not MIG-capable but the entry asks"
                    " for MIG",
                    device=g.bdf,
                    hint='mig-parted skips it only under "devices: all" or with mig-enabled: false',
                )
            c.entries.append(e)
        choices.append(c)
    return choices


def mode_conflict(c: GpuChoice) -> tuple[Entry, Entry] | None:
    """Two entries selecting the GPU that disagree on mig-enabled (the last one and the first that differs)."""
    last = c.entry
    if last is None:
        return None
    other = next((e for e in c.entries if e.mig_enabled != last.mig_enabled), None)
    return None if other is None else (other, last)


def wants(profiles: Sequence[GiProfile], entry: Entry, label: str, source: str) -> list[WantGi]:
    """GPU instances for an entry's mig-devices: every count is of MIG devices (compute instances),
    as in mig-parted; CIs of one GI profile share GIs while they fit (first fit, largest first)."""
    groups: dict[int, tuple[GiProfile, list[int]]] = {}
    for name, count in entry.wanted().items():
        where = entry.place(source, f"profile:{name}", "mig-devices")  # the count of that profile
        p = _gi_profile(profiles, name, f"{where}: ", label)
        if name.c not in ci_allowed(p):
            raise InvalidInput(f"{where}: {label}: {name} is not a compute-instance profile of {p.name}")
        groups.setdefault(p.id, (p, []))[1].extend([name.c] * count)
    out: list[WantGi] = []
    for p, sizes in groups.values():
        bins: list[list[int]] = []
        for c in sorted(sizes, reverse=True):
            home = next((b for b in bins if ci_layout_fits(p, [*b, c])), None)
            if home is None:
                bins.append([c])
            else:
                home.append(c)
        out.extend(WantGi(p, tuple(b)) for b in bins)
    return out


def _gi_profile(profiles: Sequence[GiProfile], name: MigName, where: str, label: str) -> GiProfile:
    for p in profiles:
        if name.gi_matches(p.name):
            return p
    valid = ", ".join(p.name for p in sorted(profiles, key=lambda p: (p.slices, p.size, p.media)))
    raise InvalidInput(f"{where}unknown MIG profile {str(name)!r} for {label}", value=str(name), hint=f"valid: {valid}")


def build_plans(
    scan: Scan | None,
    nvml: Nvml,
    entries: Sequence[Entry],
    source: str,
    reset: bool,
    *,
    mode_only: bool = False,
    skip_reset: bool = False,
    health: Mapping[str, str] | Exclusions | None = None,
    skipped: list[DeviceUnusable] | None = None,
) -> list[layout.GpuPlan]:
    """The steps that make the GPUs as the selected config says; raises before anything is touched
    when it cannot be done (bad profile, no capacity, busy instances, a reset not allowed, a GPU the
    health layer finds unusable). ``health``: the devices to leave alone (:class:`vgpukit.exclusion.
    Exclusions`, or BDF -> why); None: read here through ``scan``'s host, so every door gets the rule.
    ``skipped``: a config door's list -- a selected GPU that is left alone is added to it (its
    refusal) and the other GPUs are planned; None: the refusal is raised (nothing planned)."""
    exclusions = _exclusions(scan, nvml, health)
    gpus = nvml.gpus()
    names = _names(scan)
    ids = device_ids(scan, gpus)
    usable = []
    left: list[DeviceUnusable] = []
    for g in gpus:  # before anything else about it: a lost GPU answers no NVML call
        selected = any(e.selects(g.index, ids.get(g.index)) for e in entries)
        if not (selected and _left_alone(exclusions, names, g, left)):
            usable.append(g)
    if left and skipped is None:
        raise left[0]
    if skipped is not None:
        skipped += left
    plans = []
    for c in walk(entries, usable, ids, source):
        entry = c.entry
        if entry is None:
            continue
        conflict = mode_conflict(c)
        if conflict and not mode_only:
            first, last = conflict
            raise InvalidInput(
                f"{source}: the entries at lines {first.line} and {last.line} both select gpu{c.gpu.index} "
                "and disagree on mig-enabled (mig-parted would change the mode and then fail)"
            )
        gpu = c.gpu
        label = _label(names, gpu)
        current, pending = nvml.mig_mode(gpu.index)
        if mode_only:
            if (current, pending) == (entry.mig_enabled, entry.mig_enabled):
                continue
            req = layout.GpuRequest(gpu, entry.mig_enabled, [], exact=not entry.mig_enabled, label=label)
        else:
            gis = wants(nvml.gi_profiles(gpu.index), entry, label, source) if entry.mig_enabled else []
            req = layout.GpuRequest(gpu, entry.mig_enabled, gis, exact=True, label=label)
        if skip_reset and not mode_only and current != entry.mig_enabled and layout.needs_reset(gpu):
            raise layout.ResetRequired(
                f"{label}: the MIG mode change needs a GPU reset and --skip-reset was given",
                device=gpu.bdf,
                hint="apply --mode-only --skip-reset, reset the GPU, then apply again",
            )
        try:
            plan = layout.plan_gpu(nvml, req, allow_reset=reset, skip_reset=skip_reset)
        except VgpukitError as err:  # about the entry's layout: it points at the entry's mig-devices
            if not err.message.startswith(f"{source}:"):
                err.message = f"{entry.place(source, 'mig-devices', 'mig-enabled')}: {err.message}"
                err.args = (err.message,)
            raise
        plans.append(plan)
    return plans


def _exclusions(scan: Scan | None, nvml: Nvml, health: Mapping[str, str] | Exclusions | None) -> Exclusions | None:
    if isinstance(health, Exclusions):
        return health
    if health is not None:
        return Exclusions(None, scan=scan, known=health)
    return Exclusions(scan.host, lambda: nvml, scan) if scan is not None else None


def split_phases(plans: Sequence[layout.GpuPlan]) -> tuple[list[MigStep], list[MigStep]]:
    """mig-parted's two phases: the mode (with the instances a mode change destroys first), then the
    MIG devices. Per GPU, the steps up to its last mode step are the mode phase."""
    mode: list[MigStep] = []
    devices: list[MigStep] = []
    for p in plans:
        cut = max((i + 1 for i, s in enumerate(p.steps) if isinstance(s, (SetMode, Reset))), default=0)
        mode += p.steps[:cut]
        devices += p.steps[cut:]
    return mode, devices


def _left_alone(exclusions: Exclusions | None, names: dict[str, str], g: NvmlGpu, out: list[DeviceUnusable]) -> bool:
    """Whether GPU ``g`` is left alone (its refusal added to ``out``): excluded, or lost."""
    err = exclusions.check(g.bdf, _label(names, g)) if exclusions is not None and g.bdf else None
    if err is None and g.lost:
        err = refusal(_label(names, g), g.bdf, LOST)
    if err is not None:
        out.append(err)
    return err is not None


def assert_config(
    scan: Scan | None,
    nvml: Nvml,
    entries: Sequence[Entry],
    source: str,
    *,
    mode_only: bool = False,
    health: Mapping[str, str] | Exclusions | None = None,
    skip_unusable: bool = False,
) -> list[str]:
    """The differences between the GPUs and the config, as mig-parted's assert sees them: the MIG
    mode of every GPU an entry selects (every entry), then (unless ``mode_only``) the MIG devices of
    the deciding entry. Empty: it matches. A selected GPU left alone (unusable, lost: read before any
    NVML call on it) is a difference, ``left alone: ...`` (as the host config's ``assert`` says it);
    with ``skip_unusable`` (apply's own check, which leaves it alone) it is not looked at."""
    gpus = nvml.gpus()
    names = _names(scan)
    diff: list[str] = []
    ids = device_ids(scan, gpus)
    left: list[DeviceUnusable] = []
    exclusions = _exclusions(scan, nvml, health)
    selected = [g for g in gpus if any(e.selects(g.index, ids.get(g.index)) for e in entries)]
    gone = {g.index for g in selected if _left_alone(exclusions, names, g, left)}
    if not skip_unusable:
        diff += [f"left alone: {err.message}" for err in left]
    try:
        choices = walk(entries, [g for g in gpus if g.index not in gone], ids, source)
    except Unsupported as exc:
        return [*diff, f"cannot be applied: {exc.message}"]
    for c in choices:
        conflict = mode_conflict(c)
        if conflict:
            diff.append(
                f"gpu{c.gpu.index}: the entries at lines {conflict[0].line} and {conflict[1].line} "
                "disagree on mig-enabled"
            )
        elif c.entry is not None and nvml.mig_mode(c.gpu.index)[0] != c.entry.mig_enabled:
            word = "enabled" if c.entry.mig_enabled else "disabled"
            diff.append(f"{_label(names, c.gpu)}: MIG mode is not {word}")
    if mode_only or diff:
        return diff
    # mig-parted's assert also fails for a GPU no entry selects, even right after a successful apply
    # (mig-parted issue #157); vgpukit leaves such GPUs alone in assert as apply does (docs/mig.md)
    try:
        plans = build_plans(scan, nvml, entries, source, True, health=exclusions, skipped=[])
    except InvalidInput:
        raise
    except VgpukitError as exc:  # the config could not even be applied from here
        return [*diff, f"cannot be applied: {exc.message}"]
    return diff + [s.describe() for p in plans for s in p.steps]


def mig_devices(nvml: Nvml, gpu: NvmlGpu) -> dict[str, int]:
    """The GPU's MIG devices as mig-parted's export counts them: one per compute instance, named
    ``<g>g.<gb>gb`` when it spans its GPU instance, else ``<c>c.<g>g.<gb>gb``."""
    out: dict[str, int] = {}
    by_id = {p.id: p for p in nvml.gi_profiles(gpu.index)}
    for gi in nvml.gpu_instances(gpu.index):
        p = by_id[gi.profile_id]
        for ci in sorted(gi.compute_instances, key=lambda ci: -ci.slices):
            key = p.name if ci.slices == p.slices else f"{ci.slices}c.{p.name}"
            out[key] = out.get(key, 0) + 1
    return out


def export_entries(scan: Scan | None, nvml: Nvml, unread: list[Unread] | None = None) -> list[dict[str, Any]]:
    """mig-parted's export: one spec per GPU (MIG mode in effect, its MIG devices), merged: equal
    specs share an entry; ``device-filter`` only when GPUs of several PCI ids differ, ``devices: all``
    when an entry covers every GPU of its ids. A host without GPUs still gets one valid entry.
    A GPU NVML cannot answer for (lost) is left out of every entry (applying the export leaves it
    alone; no entry says ``all`` over it) and added to ``unread``."""
    gpus = nvml.gpus()
    ids = device_ids(scan, gpus)

    def spec(g: NvmlGpu) -> tuple[bool, dict[str, int]]:
        enabled = g.mig_capable and nvml.mig_mode(g.index)[0]
        return enabled, mig_devices(nvml, g) if enabled else {}

    done, missed = each_gpu(gpus, spec, _names(scan))
    if unread is not None:
        unread += missed
    specs = []
    for g, (enabled, devs) in done:
        hw = ids.get(g.index)
        specs.append((str(hw.primary) if hw is not None else "", g.index, enabled, devs))
    if not gpus:
        return [{"devices": "all", "mig-enabled": False, "mig-devices": {}}]
    if not specs:  # not one GPU answered: an entry that selects none (applying it changes nothing)
        return [{"devices": [], "mig-enabled": False, "mig-devices": {}}]
    merged: list[dict[str, Any]] = []
    for df, index, enabled, devs in specs:
        home = next((m for m in merged if m["mig-enabled"] == enabled and m["mig-devices"] == devs), None)
        if home is None:
            merged.append({"device-filter": [df], "devices": [index], "mig-enabled": enabled, "mig-devices": devs})
        else:
            home["devices"] = sorted({*home["devices"], index})
            home["device-filter"] = sorted({*home["device-filter"], df})
    per_filter: dict[str, set[int]] = {}
    for df, index, _, _ in specs:
        per_filter.setdefault(df, set()).add(index)
    for g in gpus:  # a GPU left out still counts: an entry without it does not say "all"
        if all(g.index != index for _, index, _, _ in specs):
            hw = ids.get(g.index)
            per_filter.setdefault(str(hw.primary) if hw is not None else "", set()).add(g.index)
    out = []
    for m in merged:
        covered = set().union(*(per_filter[f] for f in m["device-filter"]))
        entry: dict[str, Any] = {}
        if len(per_filter) > 1 and len(merged) > 1:
            entry["device-filter"] = m["device-filter"][0] if len(m["device-filter"]) == 1 else m["device-filter"]
        entry["devices"] = "all" if set(m["devices"]) == covered else m["devices"]
        entry["mig-enabled"] = m["mig-enabled"]
        entry["mig-devices"] = m["mig-devices"]
        out.append(entry)
    return out
