"""Options shared by the ``vgpukit k8s`` commands: the device plugin's resources, its KubeVirt mode, the DRA
plugin's sharing by capacity and device metadata."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from ..clikit.params import AsciiInt


class ShareChoice(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """``--share-by-capacity``: ``off``, or ``gpu``, ``mig`` and DRA device names (:func:`.dra.capacity.choice`)."""

    name = "devices"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "DEVICES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from ..errors import InvalidInput
        from .dra.capacity import Choice, choice

        if isinstance(value, Choice):
            return value
        try:
            return choice(str(value))
        except InvalidInput as err:
            self.fail(err.message, param, ctx)


replicas_option = click.option(
    "--share-replicas",
    "replicas",
    type=AsciiInt(0, 64),
    default=4,
    show_default=True,
    help="vgpukit.io/gpu-share devices per GPU that has no QoS tenants (0: offer no gpu-share).",
)


def vm_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--kubevirt`` and ``--kubevirt-naming``, handed to the command as ``vms``: the naming of the KubeVirt
    mode (vgpukit | nvidia), None for containers."""

    @functools.wraps(fn)
    def command(*args: Any, kubevirt: str | None, naming: str | None, **kwargs: Any) -> Any:
        if naming is not None and kubevirt is None:
            raise click.UsageError("--kubevirt-naming goes with --kubevirt")
        given = click.get_current_context().get_parameter_source("replicas")
        if kubevirt is not None and given not in (None, click.core.ParameterSource.DEFAULT):
            raise click.UsageError("--share-replicas is for containers' gpu-share: not with --kubevirt")
        return fn(*args, vms=None if kubevirt is None else naming or kubevirt, **kwargs)

    command = click.option(
        "--kubevirt-naming",
        "naming",
        type=click.Choice(["vgpukit", "nvidia"]),
        default=None,
        help="With --kubevirt: resource names vgpukit.io/vm-* (default), or kubevirt-gpu-device-plugin's "
        "nvidia.com/<pci.ids name> and nvidia.com/<vGPU type> (existing VM manifests keep working).",
    )(command)
    return click.option(
        "--kubevirt",
        "kubevirt",
        flag_value="vgpukit",
        default=None,
        help="KubeVirt mode: devices for VMs (PCI functions on VFIO, mdevs, vGPUs), answered with the "
        "PCI_RESOURCE_*/MDEV_PCI_RESOURCE_* variables and VFIO nodes virt-launcher reads (docs/kubevirt.md).",
    )(command)


device_metadata_option = click.option(
    "--device-metadata",
    "metadata",
    is_flag=True,
    help="Write each prepared request's device metadata (KEP-5304: PCI address, mdevUUID, UUID...) and mount it "
    "into the pod by CDI, as KubeVirt's GPUsWithDRA/HostDevicesWithDRA read it (docs/kubevirt.md).",
)


def vm_mode(vms: str | None, allocate: str) -> str:
    """What the device plugin's Allocate answers: in the KubeVirt mode the variables and nodes virt-launcher
    reads (``devices``), never CDI names alone."""
    if vms is not None and allocate == "cdi":
        raise click.UsageError("--kubevirt answers the variables and nodes virt-launcher reads: not --allocate cdi")
    return "devices" if vms else allocate
