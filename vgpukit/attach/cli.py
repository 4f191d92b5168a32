"""``vgpukit render hostdev|domain``, ``vgpukit attach``, ``vgpukit detach``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, say
from ..clikit.params import NAME, VM_DEVICE, AsciiInt, Size
from ..libvirt.connection import DEFAULT_URI
from ..naming import needs_nvml

if TYPE_CHECKING:
    from ..nvml import Nvml

connect_option = click.option(
    "--connect",
    "-c",
    "uri",
    metavar="URI",
    default=DEFAULT_URI,
    show_default=True,
    envvar="VGPUKIT_LIBVIRT_URI",
    help="libvirt URI (env VGPUKIT_LIBVIRT_URI); test:///default for libvirt's test driver.",
)


def _nvml(app: App, names: tuple[str, ...]) -> Nvml | None:
    """NVML only when a GPU UUID has to be resolved (opening it costs a driver round trip)."""
    return app.nvml if any(needs_nvml(n) for n in names) else None


def _warn(lines: list[str]) -> None:
    for line in lines:
        sys.stderr.write(f"vgpukit: warning: {line}\n")


@click.group(cls=LazyGroup)
def render() -> None:
    """Render libvirt XML for devices and VMs (prints it; changes nothing)."""


@render.command("hostdev")
@click.argument("device", type=VM_DEVICE)
@click.option("--mac", metavar="MAC", help="MAC address for a NIC VF (<interface type='hostdev'>).")
@click.option("--vlan", type=AsciiInt(0, 4094), help="VLAN tag for a NIC VF.")
@click.option("--managed/--unmanaged", default=None, help="Override managed='yes|no' (default: no for vGPU VFs).")
@json_option
@click.pass_obj
def render_hostdev(app: App, device: str, mac: str | None, vlan: int | None, managed: bool | None) -> None:
    """The <hostdev>/<interface> element for DEVICE (VF BDF, mdev UUID, vGPU VF, gpuN)."""
    from . import render as r
    from .templates import TemplateSet

    nvml = app.nvml if needs_nvml(device) else None
    target, element = r.hostdev(
        app.host, device, nvml=nvml, mac=mac.lower() if mac else None, vlan=vlan, managed=managed
    )
    xml = TemplateSet(app.host).device(element)
    emit(app, "render", {"device": target.label, "key": target.key, "xml": xml}, lambda: _print(xml))


@render.command("domain")
@click.option("--name", help="Domain name (required unless --from).", type=NAME)
@click.option(
    "--memory",
    "memory",
    type=Size(1, 1 << 24, unit="MiB"),
    metavar="SIZE",
    help="Guest memory: 8G, 512M (as qos --memory takes); a plain number is MiB (required unless --from).",
)
@click.option("--vcpus", type=AsciiInt(1, 4096), help="Number of vCPUs (required unless --from).")
@click.option(
    "--device", "devices", multiple=True, metavar="DEVICE", help="A device to pass through (repeat).", type=VM_DEVICE
)
@click.option(
    "--disk",
    "disks",
    multiple=True,
    metavar="DISK",
    type=NAME,
    help="PATH of a disk image or block device (repeat: vda, vdb...); the format is read from the image's header,"
    " or given as PATH,format=FMT.",
)
@click.option("--cdrom", metavar="ISO", type=NAME, help="An ISO image on a SATA CD-ROM, booted first (an installer).")
@click.option(
    "--network",
    "networks",
    multiple=True,
    metavar="NETWORK",
    type=NAME,
    help="A virtio NIC on libvirt network NAME, bridge=BR, or none (repeat; default: the network 'default').",
)
@click.option("--bridge", "bridges", multiple=True, metavar="BR", type=NAME, help="Same as --network bridge=BR.")
@click.option("--no-network", is_flag=True, help="No NIC (same as --network none).")
@click.option(
    "--graphics",
    type=click.Choice(["none", "vnc", "spice"]),
    default="none",
    show_default=True,
    help="A screen besides the serial console (virsh console NAME), listening on 127.0.0.1.",
)
@click.option(
    "--firmware",
    type=click.Choice(["auto", "efi", "bios"]),
    default="auto",
    show_default=True,
    help="UEFI (efi), SeaBIOS (bios), or efi when the host has UEFI firmware (auto).",
)
@click.option(
    "--virt-type",
    type=click.Choice(["kvm", "qemu"]),
    default="kvm",
    show_default=True,
    help="kvm (hardware virtualization) or qemu (emulation, where /dev/kvm is missing).",
)
@click.option("--hugepages", is_flag=True, help="Back guest memory with hugepages.")
@click.option("--no-pin", is_flag=True, help="Do not pin vCPUs (still place them on the devices' NUMA node).")
@click.option(
    "--from",
    "source",
    metavar="FILE",
    type=NAME,
    help="Add the DEVICEs and their NUMA placement to the domain XML in FILE (e.g. virsh dumpxml) instead.",
)
@json_option
@click.pass_obj
def render_domain(
    app: App,
    name: str | None,
    memory: int | None,
    vcpus: int | None,
    devices: tuple[str, ...],
    disks: tuple[str, ...],
    cdrom: str | None,
    networks: tuple[str, ...],
    bridges: tuple[str, ...],
    no_network: bool,
    graphics: str,
    firmware: str,
    virt_type: str,
    hugepages: bool,
    no_pin: bool,
    source: str | None,
) -> None:
    """A bootable q35 domain: disk, network, serial console, firmware, DEVICEs on their NUMA node; virsh define it."""
    from . import render as r
    from .templates import TemplateSet

    ctx = click.get_current_context()
    tpl = TemplateSet(app.host)
    if source is not None:
        _refuse_with_from(ctx)
        from .edit import add_devices

        dom, node, warnings = add_devices(
            app.host, tpl, source, nvml=_nvml(app, devices), devices=list(devices), hugepages=hugepages, pin=not no_pin
        )
        xml = dom.to_xml(indent=True) + "\n"
        _warn(warnings)
        edited = {"name": dom.name, "from": source, "numa_node": node, "warnings": warnings, "xml": xml}
        emit(app, "render", edited, lambda: _print(xml))
        return
    missing = [f"--{o}" for o, v in (("name", name), ("memory", memory), ("vcpus", vcpus)) if v is None]
    if missing:
        raise click.UsageError(f"{' '.join(missing)} required (or --from FILE)")
    assert name is not None and memory is not None and vcpus is not None
    spec, warnings = r.domain(
        app.host,
        nvml=_nvml(app, devices),
        name=name,
        memory_mib=memory,
        vcpus=vcpus,
        devices=list(devices),
        firmware=firmware,
        hugepages=hugepages,
        pin=not no_pin,
        disks=list(disks),
        cdrom=cdrom,
        networks=list(networks),
        bridges=list(bridges),
        no_network=no_network,
        graphics=None if graphics == "none" else graphics,
        virt_type=virt_type,
    )
    xml = tpl.domain(spec)
    _warn(warnings)
    data: dict[str, object] = {
        "name": name,
        "numa_node": spec.placement.numa_node,
        "firmware": spec.firmware.kind,
        "disks": [{"path": d.path, "format": d.format, "device": d.device, "target": d.target} for d in spec.disks],
        "networks": [{"type": n.kind, "source": n.source} for n in spec.nics],
        "graphics": spec.graphics,
        "warnings": warnings,
        "xml": xml,
    }
    emit(app, "render", data, lambda: _print(xml))


_FROM_FILE = ("name", "memory", "vcpus", "disks", "cdrom", "networks", "bridges", "no_network", "graphics",
              "firmware", "virt_type")  # fmt: skip


def _refuse_with_from(ctx: click.Context) -> None:
    """With --from, the VM is the file's: only DEVICEs, --hugepages and --no-pin apply."""
    from click.core import ParameterSource

    for param in ctx.command.params:
        if param.name in _FROM_FILE and ctx.get_parameter_source(param.name) != ParameterSource.DEFAULT:
            flag = param.opts[0] if param.opts else param.name
            raise click.UsageError(f"{flag} does not go with --from (the VM is the file's: add DEVICEs to it)")


def _print(xml: str) -> None:
    sys.stdout.write(xml)


@click.command()
@click.argument("domain", type=NAME)
@click.argument("devices", nargs=-1, required=True, type=VM_DEVICE)
@click.option("--live", is_flag=True, help="Change the running VM.")
@click.option("--config", is_flag=True, help="Change the persistent definition.")
@click.option("--mac", metavar="MAC", help="MAC address when attaching one NIC VF.", type=NAME)
@click.option("--vlan", type=AsciiInt(0, 4094), help="VLAN tag when attaching one NIC VF.")
@connect_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def attach(
    app: App,
    domain: str,
    devices: tuple[str, ...],
    live: bool,
    config: bool,
    mac: str | None,
    vlan: int | None,
    uri: str,
) -> None:
    """Attach DEVICEs to libvirt DOMAIN (default: its config, and the live VM if running)."""
    from ..libvirt.connection import connect
    from . import planner
    from .ops import run

    req = planner.Attach(domain, devices, live, config, mac.lower() if mac else None, vlan)
    targets = planner.targets(app.host, req, _nvml(app, devices))  # bad ones fail before connecting
    lv = connect(uri)
    try:
        out = planner.plan_attach(app.host, lv, req, targets)
        if out.steps and not app.dry_run:
            run(app.host, lv, out.steps, app.env)
    finally:
        lv.close()
    emit_result(
        app,
        "attach",
        plan=out.plan("attach"),
        data=out.to_dict(),
        human=lambda: _unchanged(out.unchanged, "already attached"),
    )


@click.command()
@click.argument("domain", type=NAME)
@click.argument("devices", nargs=-1, required=True, type=VM_DEVICE)
@click.option("--live", is_flag=True, help="Change the running VM.")
@click.option("--config", is_flag=True, help="Change the persistent definition.")
@connect_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def detach(app: App, domain: str, devices: tuple[str, ...], live: bool, config: bool, uri: str) -> None:
    """Detach DEVICEs from libvirt DOMAIN (default: its config, and the live VM if running)."""
    from ..libvirt.connection import connect
    from . import planner
    from .ops import run

    req = planner.Detach(domain, devices, live, config)
    keys = planner.detach_keys(app.host, list(devices), _nvml(app, devices))
    lv = connect(uri)
    try:
        out = planner.plan_detach(lv, req, keys)
        if out.steps and not app.dry_run:
            run(app.host, lv, out.steps, app.env)
    finally:
        lv.close()
    emit_result(
        app,
        "detach",
        plan=out.plan("detach"),
        data=out.to_dict(),
        human=lambda: _unchanged(out.unchanged, "not attached"),
    )


def _unchanged(labels: list[str], why: str) -> None:
    for label in labels:
        say(f"unchanged: {label} ({why})")
