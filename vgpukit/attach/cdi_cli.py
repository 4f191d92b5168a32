"""``vgpukit cdi generate``: CDI specs for VFIO devices, mdevs and MIG slices."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..cli.context import App
from ..cli.main import dry_run_option, json_option, mutating
from ..cli.output import emit_result, json_doc, print_json, say
from ..errors import InvalidInput
from .cdi import CLASSES


@click.group()
def cdi() -> None:
    """Container Device Interface specs (podman/docker/containerd --device vgpukit.io/<class>=<name>)."""


@cdi.command("generate")
@click.option(
    "--output",
    "-o",
    metavar="PATH",
    help="Absolute path on the host (default /etc/cdi/vgpukit.yaml); one file per class is written as "
    "<stem>-<class><suffix>, e.g. /etc/cdi/vgpukit-vf.yaml. '-' prints the specs instead.",
)
@click.option("--class", "classes", multiple=True, type=click.Choice(CLASSES), help="Only these classes (repeat).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def generate(app: App, output: str | None, classes: tuple[str, ...]) -> None:
    """Write CDI specs for this host's VFIO-bound VFs and PCI functions, mdevs and MIG devices."""
    from . import cdi as c

    host = app.host
    wanted = classes or CLASSES
    specs, warnings = c.collect(host, app.nvml if "mig" in wanted else None, wanted)
    for w in warnings:
        sys.stderr.write(f"vgpukit: warning: {w}\n")
    if output == "-":
        if app.json:
            print_json(json_doc("cdi", {"specs": [s.to_dict() for s in specs], "warnings": warnings}))
        else:
            sys.stdout.write("---\n".join(s.render("yaml") for s in specs if s.devices))
        return
    if output is None:
        target = host.etc("cdi", "vgpukit.yaml")
    else:
        if not output.startswith("/"):
            raise InvalidInput(f"--output {output}: give an absolute path (or '-')", value=output)
        target = host.path(*Path(output).parts[1:])
    plans = c.plan_files(host, target, specs)
    steps = []
    for p in plans:
        if p.action == "write":
            steps.append(f"write {host.display(p.path)} ({p.spec.kind}, {len(p.spec.devices)} devices)")
        elif p.action == "remove":
            steps.append(f"remove {host.display(p.path)} (no {p.spec.kind} devices left)")
    if not app.dry_run:
        c.apply_files(host, plans)
    data = {
        "files": [
            {"path": host.display(p.path), "kind": p.spec.kind, "action": p.action,
             "devices": [d.name for d in p.spec.devices]}
            for p in plans
        ],
        "warnings": warnings,
    }  # fmt: skip

    def human() -> None:
        for p in plans:
            if p.spec.devices:
                say(f"{p.spec.kind}: {', '.join(d.name for d in p.spec.devices)}")

    emit_result(app, "cdi", plan=steps, data=data, human=human)
