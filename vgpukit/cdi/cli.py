"""``vgpukit cdi generate/enable/disable/list``: CDI specs for containers (docs/cdi.md)."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..cdi_settings import CLASSES
from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, finish_read, json_doc, print_json, say, table
from ..host import CDI_SPEC_DIRS
from ..partial import Unread, as_json
from ..pci import Scan

CLASS_OPTION = click.option(
    "--class", "classes", multiple=True, type=click.Choice(CLASSES), help="Only these classes (repeat)."
)


@click.group(cls=LazyGroup)
def cdi() -> None:
    """Container Device Interface specs (podman/docker/containerd --device vgpukit.io/<class>=<name>)."""


def _files(host: Any, plans: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "path": p.shown or p.path,
            "kind": p.spec.kind,
            "action": p.action,
            "devices": [d.name for d in p.spec.devices],
        }
        for p in plans  # shown: where an --output file is on this machine
    ]


def _human(plans: list[Any]) -> None:
    for p in plans:
        if p.spec.devices:
            say(f"{p.spec.kind}: {', '.join(d.name for d in p.spec.devices)}")


def _warn(warnings: list[str]) -> None:
    for w in warnings:
        sys.stderr.write(f"vgpukit: warning: {w}\n")


@cdi.command("generate")
@click.option(
    "--output",
    "-o",
    metavar="FILE",
    help="Absolute path on the host (default: <dir>/vgpukit.yaml, dir from 'cdi enable', else /etc/cdi); one "
    "file per class is written as <stem>-<class><suffix>, e.g. /etc/cdi/vgpukit-vf.yaml. '-' prints them.",
)
@CLASS_OPTION
@json_option
@dry_run_option
@click.pass_obj
@mutating
def generate(app: App, output: str | None, classes: tuple[str, ...]) -> None:
    """Write CDI specs for this host's VFIO devices, mdevs, GPUs, MIG devices and QoS tenants."""
    from .planner import Generate, plan

    todo = plan(app.host, lambda: app.nvml, Generate(output, classes))
    _warn(todo.warnings)
    lost = _lost(app, classes)  # GPUs NVML cannot answer for: left out of the specs, named, exit 6
    if output == "-":
        if app.json:
            doc = {"specs": [s.to_dict() for s in todo.specs], "warnings": todo.warnings, "unreadable": as_json(lost)}
            print_json(json_doc("cdi", doc))
        else:
            sys.stdout.write("---\n".join(s.render("yaml") for s in todo.specs if s.devices))
        finish_read(app, lost)
        return
    _done(app, todo, lost)


def _lost(app: App, classes: tuple[str, ...]) -> list[Unread]:
    from ..cdi.spec import NVML_CLASSES
    from ..naming import aliases
    from ..partial import lost_gpus

    nvml = app.nvml
    if nvml is None or (classes and not NVML_CLASSES & set(classes)):
        return []
    gpus = nvml.gpus()
    return lost_gpus(gpus, aliases(Scan(app.host))) if any(g.lost for g in gpus) else []


def _done(app: App, todo: Any, lost: list[Unread] | None = None) -> None:
    """Run the plan (a dry run lists it) and report its files."""
    from ..engine import execute

    done = [s.describe() for s in todo.preview] if app.dry_run else execute(app.env, todo.steps)
    data = {"files": _files(app.host, todo.files), "warnings": todo.warnings, "unreadable": as_json(lost or [])}
    emit_result(app, "cdi", plan=done, data=data, human=lambda: _human(todo.files))
    finish_read(app, lost or [])


@cdi.command("enable")
@click.option(
    "--dir",
    "directory",
    metavar="DIR",
    default=CDI_SPEC_DIRS[0],
    show_default=True,
    help=f"Spec directory on the host: {CDI_SPEC_DIRS[0]} (static) or {CDI_SPEC_DIRS[1]} (dynamic, wins"
    " in the engines).",
)
@CLASS_OPTION
@click.option("--hook", metavar="FILE", help="nvidia-cdi-hook the GPU specs run (default: /usr/bin/nvidia-cdi-hook).")
@click.option(
    "--cuda-library",
    metavar="FILE",
    help="libvgpukit-cuda.so for gpu-share (default: /usr/lib/vgpukit/libvgpukit-cuda.so).",
)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def enable(app: App, directory: str, classes: tuple[str, ...], hook: str | None, cuda_library: str | None) -> None:
    """Keep CDI specs current: every later change to the host rewrites the specs it affects."""
    from ..cdi_settings import Settings, check_abs
    from .planner import Enable, plan

    given = (("hook", hook), ("cuda_library", cuda_library))
    kw = {k: check_abs(v, f"--{k.replace('_', '-')}") for k, v in given if v}
    settings = Settings(check_abs(directory, "--dir"), classes or CLASSES, **kw).validate()
    todo = plan(app.host, lambda: app.nvml, Enable(settings))
    _warn(todo.warnings)
    _done(app, todo)


@cdi.command("disable")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def disable(app: App) -> None:
    """Stop keeping CDI specs current and remove the spec files vgpukit wrote there."""
    from .planner import Disable, plan

    _done(app, plan(app.host, lambda: app.nvml, Disable()))


@cdi.command("list")
@json_option
@click.pass_obj
def list_cmd(app: App) -> None:
    """The CDI device names a container engine sees here (spec files in /etc/cdi and /var/run/cdi)."""
    from .listing import listing

    doc = listing(app.host, lambda: app.nvml)

    def human() -> None:
        rows = [(d["name"], d["file"]) for d in doc["devices"]]
        table(None, ["device (--device)", "spec file"], rows)
        for s in doc["stale"]:
            say(f"stale: {s} (not what the host has now: run 'vgpukit cdi generate')", "yellow")
        if not doc["enabled"]:
            say("spec generation is not enabled for this host (vgpukit cdi enable)")

    emit(app, "cdi-list", doc, human)
