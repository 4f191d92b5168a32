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
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="The cluster's KubeVirt CR (kubectl get kubevirt -n kubevirt kubevirt -o yaml; a List of one, '-' for "
    "stdin): the patch merges this node's entries into its lists, and warns where its entries clash with this "
    "node's or its mediatedDevicesConfiguration would create mdevs on this node's parents.",
)
@click.option(
    "--kubevirt-naming",
    "naming",
    type=click.Choice(["vgpukit", "nvidia"]),
    default="vgpukit",
    show_default=True,
    help="The resource names the device plugin's --kubevirt mode uses (nvidia: kubevirt-gpu-device-plugin's).",
)
@click.option("--patch-only", is_flag=True, help="Print only the patch (for kubectl patch --patch-file).")
@click.pass_obj
def kubevirt_config(app: App, cr_file: Path | None, naming: str, patch_only: bool) -> None:
    """Print the KubeVirt CR patch (permittedHostDevices) and example VMIs for this node's devices.

    YAML documents: the merge patch, then VMIs using each kind of device through the device plugin
    (--kubevirt) and through DRA (ResourceClaimTemplates of the DeviceClasses in deploy/kubernetes/dra).
    Give the cluster's CR with -f: without it the patch holds this node's entries only, and applied
    with --type merge it replaces the CR's lists. Warnings go to stderr.
    """
    import yaml

    from ..clikit import userfile
    from .kubevirt import collect
    from .kubevirt_config import clashes, examples, notes, patch
    from .kubevirt_cr import MAX_CR_BYTES, parse

    cr = None
    if cr_file is not None:
        cr = parse(userfile.read(app, cr_file, "KubeVirt CR", MAX_CR_BYTES), userfile.source(cr_file))
    offers = collect(app.host, naming)
    doc, warnings = patch(offers, cr)
    warnings = list(offers.warnings) + warnings
    if cr is None:
        warnings.append(
            "no KubeVirt CR given (-f): the patch lists this node's devices only; applied with --type merge it "
            "replaces the CR's permittedHostDevices lists (kubectl get kubevirt -n kubevirt kubevirt -o yaml | "
            "vgpukit k8s kubevirt-config -f -)"
        )
    else:
        warnings += clashes(cr, offers)
    docs = [doc] if patch_only else [doc, *examples(offers)]
    text = yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True).rstrip("\n")
    say(text if patch_only else notes(cr) + text)
    for w in warnings:
        click.echo(f"vgpukit: warning: {w}", err=True)
