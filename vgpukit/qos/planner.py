"""The QoS planner: every rule of the time-slice configuration, for every door that changes it.

Typed requests in (:class:`SetPolicy`, :class:`AddTenant`, :class:`RemoveTenant` for the daemon's
control requests, which ``vgpukit qos set`` / ``qos tenant add|rm`` send; a whole :class:`QosConfig`
for the ``qos:`` section of a host config, :func:`plan_config`), a :class:`Change` / engine steps or a
typed refusal out. Nothing here executes, prints or parses argv. The rules (docs/qos.md):

* a GPU has at most :data:`~vgpukit.qos.model.MAX_TENANTS` tenants (``no-capacity``, exit 4);
* tenant names are unique on a GPU; adding a tenant that exists with other settings is refused
  (``conflict``, exit 4), adding it again with the same settings changes nothing;
* the shares of a class (online, offline) on a GPU add up to at most 100% (``conflict``, exit 4);
* a process is in one tenant only, of any GPU (``conflict``, exit 4);
* a GPU key that names a device names a GPU of this host not in MIG mode, or a MIG device
  (:mod:`vgpukit.qos.planner_host`: ``apply``, ``qos set``, ``qos tenant add``);
* a tenant with a cap of the CUDA interception library (``memory``, ``inflight``, ``inflight_ms``),
  or any tenant once the ``gpu-share`` CDI class is enabled, needs the library: when it is missing
  that is a warning (the tenant still time-slices), the same words through every door;
* run-time changes recorded by the daemon apply on top of the base config; one that no longer fits
  is skipped and reported (:func:`effective`);
* ``apply`` writes the file and has a running daemon reload it (:mod:`vgpukit.qos.steps`), and plans a
  reload alone when the daemon runs an older file or a tenant it dropped could run now.

What a tenant is (class, share 1..100, its cgroup, processes or domain named well) is checked where
it is parsed (:mod:`vgpukit.qos.model`); that its cgroup, processes or domain exist right now is a
run-time fact the daemon checks when it adds the tenant (a config file may name them before they
exist: the daemon drops such a tenant with a warning, docs/qos.md).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import yaml
from msgspec.structs import replace

from ..engine import Step
from ..errors import Conflict, NoCapacity, NotFound, VgpukitError
from ..host import Host
from ..inputs import at, under
from ..words import size
from .config import Overlay, default_config_path, load_base
from .model import CLASSES, MAX_TENANTS, Gpu, QosConfig, Tenant, check_key
from .planner_host import NvmlSource, check_host, daemon_view, target_exists
from .steps import PutQosConfig, ReloadQos


# ----------------------------------------------------------------------------- the rules of one GPU
def check_gpu(gpu: Gpu) -> Gpu:
    """``gpu`` when its tenants fit together: at most MAX_TENANTS, unique names, each class's shares
    at most 100%."""
    if len(gpu.tenants) > MAX_TENANTS:
        raise at(
            NoCapacity(f"{gpu.key}: at most {MAX_TENANTS} tenants per GPU"), "tenants", gpu.tenants[MAX_TENANTS].name
        )
    names = [t.name for t in gpu.tenants]
    if len(set(names)) != len(names):
        raise at(Conflict(f"{gpu.key}: duplicate tenant names"), "tenants")
    for cls in CLASSES:
        total = 0
        for t in (t for t in gpu.tenants if t.cls == cls):
            total += t.share
            if total > 100:  # the share that goes over is the one at fault
                total = sum(t.share for t in gpu.tenants if t.cls == cls)
                raise at(
                    Conflict(f"{gpu.key}: {cls} shares add up to {total}% (at most 100)"), "tenants", t.name, "share"
                )
    return gpu


def check_processes(cfg: QosConfig) -> QosConfig:
    """``cfg`` when no process is in two tenants (of one GPU or of several): each GPU's scheduler
    freezes and thaws its tenants' processes, so two would undo each other's freezes. (A cgroup or a
    domain may be in tenants of several GPUs: a pod or a VM using them all; docs/qos.md.)"""
    seen: dict[int, list[tuple[str, str]]] = {}
    for key, gpu in cfg.gpus.items():
        for t in gpu.tenants:
            for pid in dict.fromkeys(t.pids):
                seen.setdefault(pid, []).append((key, t.name))
    for pid, where in seen.items():
        if len(where) > 1:
            key, name = where[-1]
            listed = ", ".join(f"{k}/{n}" for k, n in where)
            err = Conflict(
                f"process {pid} is in {len(where)} tenants ({listed}): a process can be in one tenant only",
                hint="their schedulers would freeze and thaw it against each other; put it in one",
            )
            raise at(err, "gpus", key, "tenants", name, "pids")
    return cfg


def check(cfg: QosConfig) -> QosConfig:
    """``cfg`` when every GPU's tenants fit (:func:`check_gpu`) and no process is in two tenants."""
    for key, gpu in cfg.gpus.items():
        under(("gpus", key), partial(check_gpu, gpu))
    return check_processes(cfg)


# ----------------------------------------------------------------------------- run-time changes
class SetPolicy(msgspec.Struct, frozen=True):
    gpu: str
    policy: str | None
    slice_ms: int | None
    memory: dict[str, Any] | None = None  # memory QoS settings to change (MemoryPolicy's keys), None: keep


class AddTenant(msgspec.Struct, frozen=True):
    gpu: str
    tenant: Tenant


class RemoveTenant(msgspec.Struct, frozen=True):
    gpu: str
    name: str


Request = SetPolicy | AddTenant | RemoveTenant


class Change(msgspec.Struct, frozen=True):
    config: QosConfig  # the whole configuration once the change is made
    plan: list[str]  # what changes, one line each (empty: nothing to do)
    gpu: Gpu | None  # the GPU's settings once the change is made (None: removed)


def change(cfg: QosConfig, req: Request) -> Change:
    """What ``req`` makes of the running configuration ``cfg`` (left as it is); refused as the rules say."""
    new = QosConfig(gpus=dict(cfg.gpus), watchdog_s=cfg.watchdog_s, sample_ms=cfg.sample_ms)
    key = check_key(req.gpu, "GPU key")
    old = new.gpus.get(key)
    if isinstance(req, SetPolicy):
        gpu = old or Gpu(key)
        memory = gpu.memory if req.memory is None else gpu.memory.replace(req.memory).validate(key)
        gpu = replace(
            gpu,
            policy=req.policy or gpu.policy,
            slice_ms=gpu.slice_ms if req.slice_ms is None else req.slice_ms,
            memory=memory,
        ).validate()
        new.gpus[key] = gpu
        plan = []  # what changes only (a memory setting changed: not the policy line again)
        if old is None or (old.policy, old.slice_ms) != (gpu.policy, gpu.slice_ms):
            plan.append(f"{key}: policy {gpu.policy}, slice {gpu.slice_ms} ms")
        if old is None or old.memory != gpu.memory:
            m = gpu.memory
            plan.append(
                f"{key}: memory watermark {size(m.watermark)}, suspend {m.suspend}, restore after {m.restore_ms} ms, "
                f"an online allocation waits up to {m.reclaim_ms} ms"
            )
        return Change(new, plan, gpu)
    if isinstance(req, AddTenant):
        t = req.tenant.validate()
        if old is not None and any(x.name == t.name for x in old.tenants):
            if old.tenant(t.name) == t:
                return Change(new, [], old)
            raise Conflict(f"{key}: tenant {t.name!r} exists with other settings (remove it first)")
        gpu = check_gpu(replace(old or Gpu(key), tenants=(*(old.tenants if old else ()), t)).validate())
        new.gpus[key] = gpu
        check_processes(new)
        return Change(new, [f"{key}: add {t.cls} tenant {t.name} ({t.share}%, {t.target})"], gpu)
    check_key(req.name, "tenant name")
    if old is None:
        raise NotFound(f"no QoS settings for {key}")
    old.tenant(req.name)
    gpu = replace(old, tenants=tuple(x for x in old.tenants if x.name != req.name))
    new.gpus[key] = gpu
    return Change(new, [f"{key}: remove tenant {req.name} (thawed first)"], gpu)


def effective(base: QosConfig, overlay: Overlay) -> tuple[QosConfig, list[str]]:
    """The configuration the daemon runs: ``base`` with the run-time record on top; entries that no
    longer fit are skipped and reported."""
    cfg = QosConfig(gpus=dict(base.gpus), watchdog_s=base.watchdog_s, sample_ms=base.sample_ms)
    problems: list[str] = []
    for key, settings in overlay.gpus.items():
        try:
            memory = settings.get("memory")
            req = SetPolicy(key, settings.get("policy"), settings.get("slice_ms"), memory)
            cfg = change(cfg, req).config
        except VgpukitError as err:
            problems.append(f"runtime setting for {key} skipped: {err}")
    for key, tenants in overlay.tenants.items():
        for name, doc in tenants.items():
            try:
                gpu = cfg.gpus.get(key)
                if gpu is not None and any(t.name == name for t in gpu.tenants):
                    cfg = change(cfg, RemoveTenant(key, name)).config
                if doc is not None:
                    cfg = change(cfg, AddTenant(key, Tenant.from_dict(name, doc))).config
            except VgpukitError as err:
                problems.append(f"runtime tenant {key}/{name} skipped: {err}")
    return cfg, problems


# ----------------------------------------------------------------------------- the host's facts
def load(host: Host, path: Path) -> QosConfig:
    """The admin's config file, its tenants held to the rules (a refusal names the file and line)."""
    return load_base(host, path, rules=check)


def running(host: Host) -> tuple[QosConfig, list[str]]:
    """What the daemon runs (or would run): the config file and the run-time record on top."""
    return effective(load(host, default_config_path(host)), Overlay.load(host))


def offered(host: Host) -> QosConfig:
    """The tenants that can be handed out: :func:`running` without those the running daemon dropped
    (their cgroup, processes or domain gone: it schedules them no more), as ``k8s resources`` and the
    device plugin advertise them."""
    cfg, _problems = running(host)
    view = daemon_view(host)
    for d in view.dropped if view is not None else ():
        if d.gpu in cfg.gpus and any(t.name == d.tenant for t in cfg.gpus[d.gpu].tenants):
            cfg = change(cfg, RemoveTenant(d.gpu, d.tenant)).config
    return cfg


class Library(msgspec.Struct, frozen=True):
    """What the CUDA interception library's rule needs: where it is, whether it is there, whether the
    gpu-share CDI class is enabled (its spec carries every tenant)."""

    path: str
    present: bool
    gpu_share: bool


def library(host: Host) -> Library:
    from ..cdi_settings import DEFAULT_CUDA_LIBRARY, host_path, load_settings

    try:
        settings = load_settings(host)
    except VgpukitError:  # a broken settings file: the CDI refresh says so
        settings = None
    shared = settings is not None and "gpu-share" in settings.classes
    path = settings.cuda_library if settings is not None else DEFAULT_CUDA_LIBRARY
    return Library(path, host.is_file(host_path(host, path)), shared)


def library_warnings(lib: Library, name: str, caps: list[str]) -> list[str]:
    """What tenant ``name`` asks of the CUDA library (``caps``: ``--memory``...) that cannot happen
    because the library is missing; with gpu-share enabled, that no spec can carry the tenant."""
    if lib.present or not (caps or lib.gpu_share):
        return []
    lost = [f"its {'/'.join(caps)} cap is not enforced"] if caps else []
    lost += ["no gpu-share CDI spec can carry it"] if lib.gpu_share else []
    return [f"tenant {name}: {lib.path} is missing (see docs/cuda.md): {' and '.join(lost)}"]


def caps(t: Tenant) -> list[str]:
    """The CUDA library's caps ``t`` sets, as the area command's options name them."""
    return ["--" + k.replace("_", "-") for k in t.library_config]


# ----------------------------------------------------------------------------- a host config's qos:
class Plan(msgspec.Struct, frozen=True):
    steps: list[Step]
    warnings: list[str]
    unmet: list[str] = msgspec.field(
        default_factory=list
    )  # what the config has that apply cannot make (a dropped tenant)


def refuse_quarantined(host: Host, keys: list[str], nvml: NvmlSource = None) -> None:
    """The quarantine rule: no new tenant on a quarantined device, named by its alias (gpu3) or address,
    nor on anything carved from it (a MIG device, by its ``MIG-`` UUID: its GPU's quarantine covers it)."""
    from .. import naming
    from .. import quarantine as qr

    found = qr.load(host)
    if not found or not keys:
        return
    from ..naming import aliases
    from ..pci import Scan

    names = aliases(Scan(host), light=True)
    by_key = {
        k.lower(): (q, f"{names[b]} ({b})" if b in names else b)
        for b, q in found.items()
        for k in (b, names.get(b))
        if k
    }
    for key in keys:
        hit = by_key.get(key.lower())
        if hit is not None:
            raise qr.refusal(*hit)
        if naming.form_of(key) == "mig-uuid":
            try:
                bdf = naming.resolve(host, key, frozenset({naming.MIG}), nvml=nvml).bdf
            except VgpukitError:  # not a MIG device of this host: the key rules say so, not this one
                bdf = None
            if bdf in found:
                raise qr.refusal(found[bdf], key, "piece")


def plan_config(host: Host, want: QosConfig, nvml: NvmlSource = None, mig: dict[str, bool] | None = None) -> Plan:
    """The steps that make ``/etc/vgpukit/qos.yaml`` the config ``want`` and a running daemon run it
    (none when the file, or what the daemon runs with its run-time changes, already is, and the daemon
    loaded it); refused as the rules say, and as this host's devices say (:func:`check_host`). The
    run-time record is left alone (the daemon applies it on top). Tenants the daemon dropped (their
    cgroup, processes or domain gone) are warnings, and a reload is planned when one could run now.
    ``mig``: the GPUs' MIG modes once the rest of the plan ran (:func:`check_host`)."""
    check(want)
    want = check_host(host, want, nvml, mig)
    lib = library(host)
    warnings = [w for g in want.gpus.values() for t in g.tenants for w in library_warnings(lib, t.name, caps(t))]
    path = default_config_path(host)
    base = load_base(host, path)
    shown = host.display(path)
    told = daemon_view(host)
    running = effective(base, Overlay.load(host))[0]
    if want.to_dict() not in (base.to_dict(), running.to_dict()):
        had = {(k, t.name) for k, g in running.gpus.items() for t in g.tenants}
        refuse_quarantined(host, [k for k, g in want.gpus.items() for t in g.tenants if (k, t.name) not in had], nvml)
        text = yaml.safe_dump(want.to_dict(), sort_keys=False)
        return Plan([PutQosConfig(shown, text, 0o644, reload=told is not None)], warnings)
    steps: list[Step] = []
    if told is not None and told.loaded is not None and told.loaded != base.to_dict():
        steps = [ReloadQos(shown, "it runs an older configuration than the file")]
    could_run, unmet = [], []
    for d in told.dropped if told is not None else ():
        tenant = next((t for t in want.gpus[d.gpu].tenants if t.name == d.tenant), None) if d.gpu in want.gpus else None
        if tenant is not None and target_exists(host, tenant):
            could_run.append(f"{d.gpu}: tenant {d.tenant} can run now")
        elif tenant is not None:  # its target is gone: nothing apply can do (docs/qos.md, "Vanished targets")
            unmet.append(f"qos: {d.gpu}: tenant {d.tenant} is not running ({d.reason}): apply cannot start it")
    if could_run and not steps:
        steps = [ReloadQos(shown, "; ".join(could_run))]
    return Plan(steps, warnings, unmet)
