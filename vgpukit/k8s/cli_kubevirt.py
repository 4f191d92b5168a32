"""``vgpukit k8s kubevirt-config``: the KubeVirt CR patch and example VMIs for this node's devices."""

from __future__ import annotations

from pathlib import Path

import click

from ..clikit.context import App
from ..clikit.output import say


@click.command("kubevirt-config")
@click.option(
    "-f",
    "--kubevirt-cr",
    "cr_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The cluster's KubeVirt CR (kubectl get kubevirt -n kubevirt kubevirt -o yaml): warn where its "
    "mediatedDevicesConfiguration would create mdevs on this node's parents.",
)
@click.option(
    "--kubevirt-naming",
    "naming",
    type=click.Choice(["vgpukit", "nvidia"]),
    default="vgpukit",
    show_default=True,
    help="The resource names the device plugin's --kubevirt mode uses (nvidia: kubevirt-gpu-device-plugin's).",
)
@click.pass_obj
def kubevirt_config(app: App, cr_file: Path | None, naming: str) -> None:
    """Print the KubeVirt CR patch (permittedHostDevices) and example VMIs for this node's devices.

    YAML documents: the merge patch, then VMIs using each kind of device through the device plugin
    (--kubevirt) and through DRA (ResourceClaimTemplates of the DeviceClasses in deploy/kubernetes/dra).
    Warnings (KubeVirt would make mdevs here) go to stderr.
    """
    import yaml

    from ..inputs import load_yaml
    from .kubevirt import collect
    from .kubevirt_config import NOTES, clashes, examples, patch

    offers = collect(app.host, naming)
    warnings = list(offers.warnings)
    if cr_file is not None:
        text = app.host.read_doc(cr_file, "KubeVirt CR", user_file=True)
        warnings += clashes(load_yaml(text or "", str(cr_file)), offers)
    docs = [patch(offers), *examples(offers)]
    say(NOTES + yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True).rstrip("\n"))
    for w in warnings:
        click.echo(f"vgpukit: warning: {w}", err=True)
