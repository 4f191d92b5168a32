"""``vgpukit cdi generate/enable/disable/list``: CDI specs for containers (docs/cdi.md)."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, json_doc, print_json, say, table
from ..errors import InvalidInput
from ..host_layout import CDI_SPEC_DIRS
from ..inputs import check_text
from .settings import CLASSES
from .spec import NVML_CLASSES

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
    from . import files as f
    from . import spec as c

    host = app.host
    settings = f.load_settings(host)
    wanted = classes or (settings.classes if settings else CLASSES)
    specs, warnings = c.collect(host, app.nvml if NVML_CLASSES & set(wanted) else None, wanted, settings)
    _warn(warnings)
    if output == "-":
        if app.json:
            print_json(json_doc("cdi", {"specs": [s.to_dict() for s in specs], "warnings": warnings}))
        else:
            sys.stdout.write("---\n".join(s.render("yaml") for s in specs if s.devices))
        return
    given = output
    if output is None:
        output = f"{settings.dir if settings else f.DIRS[0]}/{f.SPEC_STEM}.yaml"
    else:
        check_text(output, "--output", max_len=4096)
        if not output.startswith("/"):
            raise InvalidInput(f"--output {output}: give an absolute path (or '-')", value=output)
        f.check_abs(output, "--output")
    # an --output the user named is reported where it is written (under --sim/--root: inside that root)
    plans = f.plan_files(host, output, specs, real_paths=given is not None and str(host.root) != "/")
    done = _execute(app, f.file_steps(plans))
    emit_result(app, "cdi", plan=done, data={"files": _files(host, plans), "warnings": warnings},
                human=lambda: _human(plans))  # fmt: skip


def _execute(app: App, steps: list[Any]) -> list[str]:
    from ..engine import execute

    if app.dry_run:
        return [s.describe() for s in steps]
    return execute(app.env, steps)


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
    from ..engine.files import PutFile
    from . import files as f
    from . import spec as c

    given = (("hook", hook), ("cuda_library", cuda_library))
    kw = {k: f.check_abs(v, f"--{k.replace('_', '-')}") for k, v in given if v}
    settings = f.Settings(f.check_abs(directory, "--dir"), classes or CLASSES, **kw).validate()
    host = app.host
    path = host.display(f.settings_path(host))
    specs, warnings = c.collect(host, app.nvml if NVML_CLASSES & set(settings.classes) else None, settings.classes,
                                settings)  # fmt: skip
    _warn(warnings)
    plans = f.plan_files(host, f"{settings.dir}/{f.SPEC_STEM}.yaml", specs)
    old = host.read_raw_opt(f.settings_path(host))
    before = f.load_settings(host) if old is not None else None
    steps: list[Any] = []
    if old != settings.to_text():
        steps.append(PutFile(path, settings.to_text(), 0o644, f"keep CDI specs in {settings.dir} current ({path})"))
    if before is not None:  # moved: what vgpukit wrote in the old place goes; narrowed: the dropped classes'
        moved = before.dir != settings.dir
        gone = [c.Spec(k) for k in CLASSES if moved or (k in before.classes and k not in settings.classes)]
        steps += f.file_steps(f.plan_files(host, f"{before.dir}/{f.SPEC_STEM}.yaml", gone))
    if app.dry_run:
        done = [s.describe() for s in steps + f.file_steps(plans)]
    else:
        from ..engine import execute

        done = execute(app.env, steps) if steps else _execute(app, f.file_steps(plans))
    emit_result(app, "cdi", plan=done, data={"files": _files(host, plans), "warnings": warnings},
                human=lambda: _human(plans))  # fmt: skip


@cdi.command("disable")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def disable(app: App) -> None:
    """Stop keeping CDI specs current and remove the spec files vgpukit wrote there."""
    from ..engine.files import PutFile
    from . import files as f
    from . import spec as c

    host = app.host
    settings = f.load_settings(host)
    if settings is None:
        emit_result(app, "cdi", plan=[], data={"files": [], "warnings": []})
        return
    empty = [c.Spec(cls) for cls in CLASSES]
    plans = f.plan_files(host, f"{settings.dir}/{f.SPEC_STEM}.yaml", empty)
    path = host.display(f.settings_path(host))
    steps = [PutFile(path, None, 0o644, f"stop keeping CDI specs current (remove {path})"), *f.file_steps(plans)]
    done = _execute(app, steps)
    emit_result(app, "cdi", plan=done, data={"files": _files(host, plans), "warnings": []})


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
