"""``vgpukit topo`` and ``vgpukit devices``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .. import pci, topology
from ..clikit.context import App
from ..clikit.options import json_option
from ..clikit.output import emit, finish_read, is_tty, table
from ..clikit.params import NAME
from ..errors import InvalidInput
from ..naming import aliases, vf_names
from ..partial import as_json

if TYPE_CHECKING:
    from ..nvml import NvmlGpu
    from ..partial import Unread


def _gpu_info(app: App, devices: list[pci.PciDevice]) -> dict[str, NvmlGpu]:
    """NVML's view of the GPUs, asked only when there is an NVIDIA GPU to ask about."""
    if not any(d.vendor == "10de" and d.kind == "gpu" for d in devices):
        return {}
    nv = app.nvml
    return {g.bdf: g for g in nv.gpus()} if nv is not None else {}


def unread(gpus: dict[str, NvmlGpu], names: dict[str, str]) -> list[Unread]:
    """The GPUs NVML could not answer for (lost): shown, marked, and the reason exit 6 (docs/health.md)."""
    from ..partial import unread_gpu

    return [unread_gpu(names, g) for g in gpus.values() if g.lost]


def caps(dev: pci.PciDevice, gpus: dict[str, NvmlGpu]) -> list[str]:
    out = ["console (boot_vga)"] if dev.boot_vga else []
    if dev.sriov:
        out.append(f"SR-IOV {dev.sriov.num_vfs}/{dev.sriov.total_vfs} VFs")
        if len(dev.sriov.vfs) < dev.sriov.num_vfs:
            out.append(f"{dev.sriov.num_vfs - len(dev.sriov.vfs)} VFs missing")
    if dev.mdev_types:
        out.append(f"mdev {len(dev.mdev_types)} types")
    g = gpus.get(dev.bdf)
    if g and g.lost:
        out.append("GPU lost (NVML: not read)")
    elif g and g.mig_capable:
        state = "on" if g.mig_current else "off"
        if g.mig_pending != g.mig_current:
            state += f" (pending {'on' if g.mig_pending else 'off'})"
        out.append(f"MIG {state}")
    return out


def _dev_doc(dev: pci.PciDevice, names: dict[str, str], gpus: dict[str, NvmlGpu]) -> dict[str, Any]:
    d = dev.to_dict()
    d["alias"] = names.get(dev.bdf)
    g = gpus.get(dev.bdf)
    d["gpu"] = (
        {
            "uuid": g.uuid,
            "name": g.name,
            "mig_capable": g.mig_capable,
            "mig_current": g.mig_current,
            "mig_pending": g.mig_pending,
            **({"lost": True} if g.lost else {}),
        }
        if g
        else None
    )
    d["capabilities"] = caps(dev, gpus)
    return d


KIND_STYLE = {"gpu": "bold green", "nic": "bold cyan", "nvme": "bold magenta", "other": "white"}


def _line(
    dev: pci.PciDevice, role: str | None, names: dict[str, str], gpus: dict[str, NvmlGpu], rich: bool = False
) -> str:
    kind = role or dev.kind
    alias = f" {names[dev.bdf]}" if dev.bdf in names else ""
    numa = dev.numa_node if dev.numa_node is not None else "-"
    group = dev.iommu_group if dev.iommu_group is not None else "-"
    details = f"driver={dev.driver or '-'}  numa={numa}  iommu={group}  link={dev.link.describe()}"
    c = "; ".join(caps(dev, gpus))
    if not rich:
        return "  ".join(p for p in (f"{dev.bdf}{alias}", kind, f"[{dev.ids}] {dev.name}", details, c) if p)
    from rich.markup import escape

    style = KIND_STYLE.get(kind, "dim")
    text = f"[bold]{dev.bdf}[/bold][cyan]{alias}[/cyan]  [{style}]{kind}[/{style}]  {escape(f'[{dev.ids}]')} "
    text += f"{escape(dev.name)}  [dim]{details}[/dim]"
    return text + (f"  [yellow]{escape(c)}[/yellow]" if c else "")


def _render_tree(roots: list[topology.Node], names: dict[str, str], gpus: dict[str, NvmlGpu], show_vfs: bool) -> None:
    rich = is_tty()

    def children(node: topology.Node) -> list[tuple[str, topology.Node | None]]:
        out: list[tuple[str, topology.Node | None]] = []
        for c in node.children:
            if c.device is not None and (show_vfs or not c.device.is_vf):
                out.append((_line(c.device, c.role, names, gpus, rich), c))
        vfs = node.device.sriov.vfs if node.device is not None and node.device.sriov is not None else ()
        if vfs and not show_vfs:  # the PF's own list: the VFs themselves need not be read
            out.append((f"{len(vfs)} VFs {vfs[0]} .. {vfs[-1]} (--vfs to list)", None))
        return out

    if rich:
        from rich.tree import Tree

        from ..clikit.output import console

        def add(tree: Any, node: topology.Node) -> None:
            for text, child in children(node):
                sub = tree.add(text)
                if child is not None:
                    add(sub, child)

        for root in roots:
            t = Tree(f"[bold]{root.label}[/bold]")
            add(t, root)
            console().print(t)
        return

    def walk(node: topology.Node, depth: int) -> None:
        for text, child in children(node):
            print("  " * depth + text)
            if child is not None:
                walk(child, depth + 1)

    for root in roots:
        print(root.label)
        walk(root, 1)


def _matrix(app: App, scan: pci.Scan, names: dict[str, str], matrix: bool, rdma: bool) -> None:
    from .cmd_topo_matrix import matrix_doc, rdma_rows, smi_text

    data = matrix_doc(app, scan, names)

    def human() -> None:  # both options: the matrix, a blank line, the RDMA table
        if matrix:
            print(smi_text(data), end="\n" if rdma else "")
        if rdma:
            table(None, ["GPU", "BDF", "NICS BEHIND A SHARED PCIE SWITCH (GPUDIRECT RDMA)"], rdma_rows(data))

    emit(app, "topo-matrix", data, human)
    if data["unreadable"]:
        from ..partial import Unread

        finish_read(app, [Unread(**u) for u in data["unreadable"]])


@click.command()
@click.option(
    "--matrix", is_flag=True, help="GPU x GPU and GPU x NIC relationships, as nvidia-smi topo -m prints them."
)
@click.option("--rdma", is_flag=True, help="For each GPU, the NICs sharing a PCIe switch with it (GPUDirect RDMA).")
@click.option("--vfs", "show_vfs", is_flag=True, help="List every VF instead of a summary line.")
@json_option
@click.pass_obj
def topo(app: App, matrix: bool, rdma: bool, show_vfs: bool) -> None:
    """Show the PCIe tree: root complexes, switches, endpoints and what each can do."""
    scan = pci.Scan(app.host)
    names = aliases(scan)
    if matrix or rdma:
        _matrix(app, scan, names, matrix, rdma)
        return
    # VFs are read only when they are shown one by one; the tree summarises them from their PF
    devices = scan.devices() if show_vfs or app.json else scan.physical()
    gpus = _gpu_info(app, devices)
    roots = topology.build_tree(devices)

    def tree_doc(node: topology.Node, roles: dict[str, str]) -> dict[str, Any]:
        if node.device is None:
            return {"host_bridge": node.label, "children": [tree_doc(c, roles) for c in node.children]}
        d = _dev_doc(node.device, names, gpus)
        d["role"] = roles.get(node.device.bdf)
        d["children"] = [tree_doc(c, roles) for c in node.children]
        return d

    def doc() -> dict[str, Any]:
        host = app.host
        numa = {}
        for node_dir in host.listdir(host.numa_nodes()):
            if node_dir.startswith("node") and node_dir[4:].isdigit():
                numa[node_dir[4:]] = host.read_opt(host.numa_node(node_dir[4:], "cpulist"))
        roles = topology.port_roles(devices)
        return {"roots": [tree_doc(r, roles) for r in roots], "numa_nodes": numa, "unreadable": as_json(lost)}

    lost = unread(gpus, names)
    emit(app, "topo", doc, lambda: _render_tree(roots, names, gpus, show_vfs))
    finish_read(app, lost)


KINDS = ("gpu", "display", "nic", "nvme", "bridge", "other")


@click.command()
@click.option("--kind", type=click.Choice(KINDS), help="Only this kind of device.")
@click.option("--vendor", metavar="VVVV", help="Only this PCI vendor id (hex, e.g. 10de).", type=NAME)
@click.option("--all", "show_all", is_flag=True, help="Include bridges.")
@json_option
@click.pass_obj
def devices(app: App, kind: str | None, vendor: str | None, show_all: bool) -> None:
    """List PCI devices in bus order (physical functions, VFs, bridges with --all)."""
    if vendor is not None:
        vendor = vendor.lower().removeprefix("0x")
        if len(vendor) != 4 or any(c not in "0123456789abcdef" for c in vendor):
            raise InvalidInput(f"invalid vendor id {vendor!r}: expected 4 hex digits, e.g. 10de", value=vendor)
    scan = pci.Scan(app.host)
    all_devs = scan.devices()
    names = aliases(scan)
    vfs = vf_names(scan, names)  # a VF's name, "nic0 vf0", as every command takes it
    gpus = _gpu_info(app, all_devs)
    sel = [
        d
        for d in all_devs
        if (kind is None or d.kind == kind)
        and (vendor is None or d.vendor == vendor)
        and (show_all or kind == "bridge" or d.kind != "bridge")
    ]

    def human() -> None:
        rows = [
            [
                d.bdf,
                names.get(d.bdf) or vfs.get(d.bdf, ""),
                d.kind,
                d.ids,
                d.name,
                d.driver,
                d.numa_node,
                d.iommu_group,
                d.link.describe(),
                "; ".join(caps(d, gpus)),
            ]
            for d in sel
        ]
        table(None, ["BDF", "NAME", "KIND", "IDS", "MODEL", "DRIVER", "NUMA", "IOMMU", "LINK", "CAPABILITIES"], rows)

    lost = unread({b: g for b, g in gpus.items() if any(d.bdf == b for d in sel)}, names)
    emit(
        app, "devices", lambda: {"devices": [_dev_doc(d, names, gpus) for d in sel], "unreadable": as_json(lost)}, human
    )
    finish_read(app, lost)
