"""The QoS planner: every rule of the time-slice configuration, for every door that changes it.

Typed requests in (:class:`SetPolicy`, :class:`AddTenant`, :class:`RemoveTenant` for the daemon's
control requests, which ``vgpukit qos set`` / ``qos tenant add|rm`` send; a whole :class:`QosConfig`
for the ``qos:`` section of a host config, :func:`plan_config`), a :class:`Change` / engine steps or a
typed refusal out. Nothing here executes, prints or parses argv. The rules (docs/qos.md):

* a GPU has at most :data:`~vgpukit.qos.model.MAX_TENANTS` tenants (``no-capacity``, exit 4);
* tenant names are unique on a GPU; adding a tenant that exists with other settings is refused
  (``conflict``, exit 4), adding it again with the same settings changes nothing;
* the shares of a class (online, offline) on a GPU add up to at most 100% (``conflict``, exit 4);
* a tenant with a cap of the CUDA interception library (``memory``, ``inflight``, ``inflight_ms``),
  or any tenant once the ``gpu-share`` CDI class is enabled, needs the library: when it is missing
  that is a warning (the tenant still time-slices), the same words through every door;
* run-time changes recorded by the daemon apply on top of the base config; one that no longer fits
  is skipped and reported (:func:`effective`).

What a tenant is (class, share 1..100, its cgroup, processes or domain named well) is checked where
it is parsed (:mod:`vgpukit.qos.model`); that its cgroup, processes or domain exist right now is a
run-time fact the daemon checks when it adds the tenant (a config file may name them before they
exist: the daemon drops such a tenant with a warning, docs/qos.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ..engine import Step
from ..engine.files import PutFile
from ..errors import Conflict, NoCapacity, NotFound, VgpukitError
from ..host import Host
from .config import Overlay, default_config_path, load_base
from .model import CLASSES, MAX_TENANTS, Gpu, QosConfig, Tenant, check_key


# ----------------------------------------------------------------------------- the rules of one GPU
def check_gpu(gpu: Gpu) -> Gpu:
    """``gpu`` when its tenants fit together: at most MAX_TENANTS, unique names, each class's shares
    at most 100%."""
    if len(gpu.tenants) > MAX_TENANTS:
        raise NoCapacity(f"{gpu.key}: at most {MAX_TENANTS} tenants per GPU")
    names = [t.name for t in gpu.tenants]
    if len(set(names)) != len(names):
        raise Conflict(f"{gpu.key}: duplicate tenant names")
    for cls in CLASSES:
        total = sum(t.share for t in gpu.tenants if t.cls == cls)
        if total > 100:
            raise Conflict(f"{gpu.key}: {cls} shares add up to {total}% (at most 100)")
    return gpu


def check(cfg: QosConfig) -> QosConfig:
    """``cfg`` when every GPU's tenants fit (:func:`check_gpu`)."""
    for gpu in cfg.gpus.values():
        check_gpu(gpu)
    return cfg


# ----------------------------------------------------------------------------- run-time changes
@dataclass(frozen=True)
class SetPolicy:
    gpu: str
    policy: str | None
    slice_ms: int | None
    memory: dict[str, Any] | None = None  # memory QoS settings to change (MemoryPolicy's keys), None: keep


@dataclass(frozen=True)
class AddTenant:
    gpu: str
    tenant: Tenant


@dataclass(frozen=True)
class RemoveTenant:
    gpu: str
    name: str


Request = SetPolicy | AddTenant | RemoveTenant


@dataclass(frozen=True)
class Change:
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
        same = old is not None and (old.policy, old.slice_ms, old.memory) == (gpu.policy, gpu.slice_ms, gpu.memory)
        plan = [f"{key}: policy {gpu.policy}, slice {gpu.slice_ms} ms"]
        if old is None or old.memory != gpu.memory:
            m = gpu.memory
            plan.append(
                f"{key}: memory watermark {m.watermark} B, suspend {m.suspend}, restore after {m.restore_ms} ms"
            )
        return Change(new, [] if same else plan, gpu)
    if isinstance(req, AddTenant):
        t = req.tenant.validate()
        if old is not None and any(x.name == t.name for x in old.tenants):
            if old.tenant(t.name) == t:
                return Change(new, [], old)
            raise Conflict(f"{key}: tenant {t.name!r} exists with other settings (remove it first)")
        gpu = check_gpu(replace(old or Gpu(key), tenants=(*(old.tenants if old else ()), t)).validate())
        new.gpus[key] = gpu
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
    return load_base(host, path, rules=check_gpu)


def running(host: Host) -> tuple[QosConfig, list[str]]:
    """What the daemon runs (or would run): the config file and the run-time record on top."""
    return effective(load(host, default_config_path(host)), Overlay.load(host))


@dataclass(frozen=True)
class Library:
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
@dataclass(frozen=True)
class Plan:
    steps: list[Step]
    warnings: list[str]


def refuse_quarantined(host: Host, keys: list[str]) -> None:
    """The quarantine rule: no new tenant on a quarantined device, named by its alias (gpu3) or address."""
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


def plan_config(host: Host, want: QosConfig) -> Plan:
    """The steps that make ``/etc/vgpukit/qos.yaml`` the config ``want`` (none when the file, or what
    the daemon runs with its run-time changes, already is); refused as the rules say. The run-time
    record is left alone (the daemon applies it on top)."""
    check(want)
    lib = library(host)
    warnings = [w for g in want.gpus.values() for t in g.tenants for w in library_warnings(lib, t.name, caps(t))]
    path = default_config_path(host)
    base = load_base(host, path)
    running = effective(base, Overlay.load(host))[0]
    if want.to_dict() in (base.to_dict(), running.to_dict()):
        return Plan([], warnings)
    had = {(k, t.name) for k, g in running.gpus.items() for t in g.tenants}
    refuse_quarantined(host, [k for k, g in want.gpus.items() for t in g.tenants if (k, t.name) not in had])
    text = yaml.safe_dump(want.to_dict(), sort_keys=False)
    shown = host.display(path)
    return Plan([PutFile(shown, text, 0o644, what=f"write the QoS config {shown}")], warnings)
