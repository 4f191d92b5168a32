"""``mig apply / assert / export``: mig-parted v1 configs, applied idempotently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..cli.context import App
from ..cli.main import dry_run_option, json_option, mutating
from ..cli.output import emit, fail_after_emit, say
from ..cli.params import NAME
from ..errors import InvalidInput, NotFound, Unsupported, VerifyFailed, VgpukitError
from ..nvml import GiProfile, Nvml, NvmlGpu
from ..pci import Scan
from . import config, engine
from .common_cli import label_of, nvml_of, run_plans
from .config import SAFE_NAME
from .spec import CI_RE, WantGi, ci_allowed, ci_layout_fits, find_profile


def _pick(configs: dict[str, list[config.Entry]], name: str | None, source: str) -> list[config.Entry]:
    if name is None:
        if len(configs) == 1:
            return next(iter(configs.values()))
        names = [n for n in configs if SAFE_NAME.match(n)]
        raise InvalidInput(f"{source} has several configs: choose one with -c", hint=", ".join(names) or None)
    if name not in configs:
        names = [n for n in configs if SAFE_NAME.match(n)]  # names from the file, shown only when plain
        raise NotFound(f"no config {name!r} in {source}", hint=f"available: {', '.join(names) or 'none'}")
    return configs[name]


def _wants(nvml: Nvml, gpu: NvmlGpu, entry: config.Entry, source: str) -> list[WantGi]:
    """GPU instances for an entry's mig-devices: like mig-parted, every count is of MIG devices
    (compute instances); ``3g.20gb`` is a GI with its full CI, ``<c>c.3g.20gb`` a c-slice CI, and CIs
    of one GI profile share GIs while they fit (first fit, largest first)."""
    profiles = nvml.gi_profiles(gpu.index)
    label = f"gpu{gpu.index} ({gpu.name}) [{source}:{entry.line}]"
    groups: dict[int, tuple[GiProfile, list[int]]] = {}
    for name, count in entry.mig_devices.items():
        m = CI_RE.match(name)
        p = find_profile(profiles, m.group("gi") if m else name, label)
        c = int(m.group("c")) if m else p.slices
        if c not in ci_allowed(p):
            raise InvalidInput(f"{label}: {name} is not a compute-instance profile of {p.name}")
        groups.setdefault(p.id, (p, []))[1].extend([c] * count)
    wants: list[WantGi] = []
    for p, sizes in groups.values():
        bins: list[list[int]] = []
        for c in sorted(sizes, reverse=True):
            home = next((b for b in bins if ci_layout_fits(p, [*b, c])), None)
            if home is None:
                bins.append([c])
            else:
                home.append(c)
        wants.extend(WantGi(p, tuple(b)) for b in bins)
    return wants


def build_plans(scan: Scan, nvml: Nvml, entries: list[config.Entry], source: str, reset: bool) -> list[engine.GpuPlan]:
    plans = []
    for gpu in nvml.gpus():
        matched = [e for e in entries if e.selects(gpu.index, gpu.pci_device_id)]
        if not matched:
            continue
        if len(matched) > 1:
            raise InvalidInput(
                f"{source}: gpu{gpu.index} is selected by the entries at lines {matched[0].line} and {matched[1].line}"
            )
        entry = matched[0]
        if not gpu.mig_capable:
            if entry.mig_enabled:
                raise Unsupported(f"{source}:{entry.line}: gpu{gpu.index} ({gpu.name}) is not MIG-capable")
            continue
        wants = _wants(nvml, gpu, entry, source) if entry.mig_enabled else []
        req = engine.GpuRequest(gpu, entry.mig_enabled, wants, exact=True, label=label_of(scan, gpu))
        plans.append(engine.plan_gpu(nvml, req, allow_reset=reset))
    return plans


@click.command("apply")
@click.option("-f", "--file", "path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-c", "--config", "name", help="Config name under mig-configs (needed when there are several).", type=NAME
)
@click.option(
    "--reset/--no-reset",
    default=None,
    help="Reset GPUs whose MIG mode change needs it (Ampere). Default: only GPUs with no process on them; "
    "--no-reset refuses instead.",
)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def apply_cmd(app: App, path: Path, name: str | None, reset: bool | None) -> None:
    """Apply a mig-parted v1 config; instances that already match are kept (a second run does nothing)."""
    entries = _pick(config.parse(_read(app, path), str(path)), name, str(path))
    nvml = nvml_of(app)
    scan = Scan(app.host)
    plans = build_plans(scan, nvml, entries, str(path), reset is not False)
    run_plans(app, "mig-apply", plans, {"config": name}, scan=scan)


@click.command("assert")
@click.option("-f", "--file", "path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("-c", "--config", "name", help="Config name under mig-configs.", type=NAME)
@json_option
@click.pass_obj
def assert_cmd(app: App, path: Path, name: str | None) -> None:
    """Exit 0 when the GPUs match the config, 1 (listing the differences) otherwise."""
    entries = _pick(config.parse(_read(app, path), str(path)), name, str(path))
    nvml = nvml_of(app)
    try:
        diff = [s.describe() for p in build_plans(Scan(app.host), nvml, entries, str(path), True) for s in p.steps]
    except (InvalidInput, NotFound):
        raise
    except VgpukitError as exc:  # the config could not even be applied from here
        diff = [f"cannot be applied: {exc}"]
    emit(
        app,
        "mig-assert",
        {"config": name, "matches": not diff, "differences": diff},
        lambda: say("the GPUs match the config" if not diff else "differences:\n  " + "\n  ".join(diff)),
    )
    if diff:
        fail_after_emit(app, VerifyFailed(f"the GPUs do not match {path}" + (f" -c {name}" if name else "")))


@click.command("export")
@click.option("-c", "--config", "name", default="current", show_default=True, help="Config name to write.", type=NAME)
@json_option
@click.pass_obj
def export_cmd(app: App, name: str) -> None:
    """Print the current MIG layout as a mig-parted v1 config."""
    nvml = nvml_of(app)
    groups: dict[tuple[Any, ...], list[int]] = {}
    specs: dict[tuple[Any, ...], dict[str, Any]] = {}
    gpus = nvml.gpus()
    for g in gpus:
        if not g.mig_capable:
            continue
        spec = _export_gpu(nvml, g)
        key = tuple(sorted((k, str(v)) for k, v in spec.items()))
        groups.setdefault(key, []).append(g.index)
        specs[key] = spec
    capable = [g.index for g in gpus if g.mig_capable]
    entries = []
    for key, idx in groups.items():
        entries.append({"devices": "all" if idx == capable and len(gpus) == len(capable) else idx, **specs[key]})
    text = config.dump(name, entries)
    emit(app, "mig-export", {"config": name, "yaml": text, "entries": entries}, lambda: click.echo(text, nl=False))


def _export_gpu(nvml: Nvml, g: NvmlGpu) -> dict[str, Any]:
    _, pending = nvml.mig_mode(g.index)
    current, _ = nvml.mig_mode(g.index)
    spec: dict[str, Any] = {"mig-enabled": pending}
    devices: dict[str, int] = {}
    by_id = {p.id: p for p in nvml.gi_profiles(g.index)}
    for gi in nvml.gpu_instances(g.index) if current else []:
        p = by_id[gi.profile_id]
        sig = sorted((c.slices for c in gi.compute_instances), reverse=True)
        if sig == [p.slices] or not sig:
            devices[p.name] = devices.get(p.name, 0) + 1
        else:
            for c in sig:
                key = p.name if c == p.slices else f"{c}c.{p.name}"
                devices[key] = devices.get(key, 0) + 1
    if pending:
        spec["mig-devices"] = devices
    return spec


def _read(app: App, path: Path) -> str:
    """The user's config file, read where it is: a regular file of at most 1 MiB (``-f /dev/zero``
    is refused at once)."""
    text = app.host.read_doc(path, "mig-parted config", config.MAX_CONFIG_BYTES, user_file=True)
    assert text is not None
    return text
