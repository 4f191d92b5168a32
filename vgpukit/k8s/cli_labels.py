"""``vgpukit k8s labels``: node labels for node-feature-discovery (:mod:`vgpukit.k8s.labels` decides them)."""

from __future__ import annotations

from contextlib import nullcontext

import click

from ..clikit.context import App
from ..clikit.options import held, json_option
from ..clikit.output import emit, finish_read, say
from ..partial import as_json
from .cli_host import _options


@click.command("labels")
@click.option("--write", is_flag=True, help="Write the NFD feature file (default: print the labels).")
@json_option
@click.pass_obj
def labels_cmd(app: App, write: bool) -> None:
    """Node labels for node-feature-discovery: GPU model, MIG, VF counts, vGPU types.

    --write puts them in <root>/etc/kubernetes/node-feature-discovery/features.d/vgpukit (rewritten
    only when they change), through the change engine: under the host lock, journaled, --dry-run.
    """
    from ..node.inventory import collect
    from . import labels as lb

    host = app.host
    path = lb.feature_file(host)
    plan: list[str] = []
    with held(app) if write else nullcontext():
        inv = collect(host, app.nvml, _options(host, 0))
        found = lb.labels(host, app.nvml, inv)
        text = lb.render(found)
        if write and host.read_doc(path, "feature file", missing_ok=True) != text:
            from ..engine import execute
            from ..engine.files import PutFile

            step = PutFile(host.display(path), text)
            execute(app.env, [step], derived=False)  # labels describe the host; no device changed
            plan = [step.describe()]
    written = bool(plan) and not app.dry_run

    def human() -> None:
        for k, v in found.items():
            say(f"{lb.NAMESPACE}/{k}={v}")
        if written:
            say(f"written: {host.display(path)}")
        elif app.dry_run and plan:
            say(f"dry run, nothing changed: would {plan[0]}")

    data = {"namespace": lb.NAMESPACE, "labels": found, "file": host.display(path), "written": written}
    if write:
        data["plan"] = plan
    data["unreadable"] = as_json(inv.unread)
    emit(app, "k8s-labels", data, human)
    finish_read(app, inv.unread)  # labels of what could be read (health: unusable), exit 6
