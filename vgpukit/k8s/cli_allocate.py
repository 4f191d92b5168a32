"""``vgpukit k8s allocate``: what the device plugin's ``Allocate`` would answer now, without a kubelet.

The answer is built by the plugin's own :func:`~vgpukit.k8s.plugin.container_response` from the same
inventory the plugin serves; in the KubeVirt mode that is what virt-launcher reads (the
``PCI_RESOURCE_*``/``MDEV_PCI_RESOURCE_*`` variables and the VFIO nodes, docs/kubevirt.md). The kubelet
asks each resource's plugin for its own devices, so the answer is one per resource named. Nothing is
allocated: the running plugin keeps no record of a preview.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..clikit.context import App
from ..clikit.options import json_option
from ..clikit.output import emit, say
from ..errors import NotFound
from .cli_options import replicas_option, vm_mode, vm_options


@click.command("allocate")
@click.argument("devices", nargs=-1, required=True, metavar="DEVICE...")
@replicas_option
@click.option(
    "--allocate",
    "mode",
    type=click.Choice(["both", "cdi", "devices"]),
    default="both",
    show_default=True,
    help="As the device plugin's option: CDI device names, device specs/env/mounts, or both.",
)
@vm_options
@json_option
@click.pass_obj
def allocate_cmd(app: App, devices: tuple[str, ...], replicas: int, mode: str, vms: str | None) -> None:
    """Show the device plugin's Allocate answer for the devices, without a kubelet.

    DEVICE is a device plugin ID as `vgpukit k8s resources` lists it. The answer (environment, device
    nodes, mounts, CDI names) is one per resource, as the kubelet asks each resource's plugin; nothing is
    allocated."""
    from google.protobuf.json_format import MessageToDict

    from ..node.inventory import HEALTHY, health_of
    from .cli_host import _health as health_look
    from .cli_host import _poller
    from .plugin import container_response

    answer_mode = vm_mode(vms, mode)
    inv = _poller(app, replicas, vms)()
    where = {d.id: (name, d) for name, devs in inv.resources.items() for d in devs}
    unknown = [i for i in dict.fromkeys(devices) if i not in where]
    if unknown:
        mode_name = "the KubeVirt mode" if vms else "containers"
        raise NotFound(
            f"no device {', '.join(unknown)[:200]} offered to {mode_name} here",
            hint=f"see: vgpukit k8s resources{' --kubevirt' if vms else ''}",
        )
    sick = health_look(app)()
    by_resource: dict[str, list[str]] = {}
    for i in dict.fromkeys(devices):
        by_resource.setdefault(where[i][0], []).append(i)
    answers: list[dict[str, Any]] = []
    warnings: list[str] = []
    for name, ids in sorted(by_resource.items()):
        resp = container_response(iter(where[i][1] for i in ids), answer_mode)
        response = MessageToDict(resp, preserving_proto_field_name=True)  # ContainerAllocateResponse's fields
        answers.append({"resource": name, "devices": ids, "response": response})
        for i in ids:
            health, why = health_of(where[i][1], sick)
            if health != HEALTHY:
                warnings.append(f"{i} is {health} ({why}): the kubelet does not allocate it")

    def human() -> None:
        for a in answers:
            r = a["response"]
            say(f"{a['resource']}: {', '.join(a['devices'])}")
            for key, value in sorted(r.get("envs", {}).items()):
                say(f"  env     {key}={value}")
            for d in r.get("devices", []):
                say(f"  device  {d['host_path']} ({d['permissions']})")
            for m in r.get("mounts", []):
                say(f"  mount   {m['host_path']} -> {m['container_path']}{' (ro)' if m.get('read_only') else ''}")
            for c in r.get("cdi_devices", []):
                say(f"  cdi     {c['name']}")
        for w in warnings:
            sys.stderr.write(f"vgpukit: warning: {w}\n")

    emit(app, "k8s-allocate", lambda: {"answers": answers, "warnings": warnings}, human)
