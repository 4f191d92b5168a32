"""``vgpukit vgpu``: NVIDIA vGPU types, create, list, remove over legacy mdev and per-VF VFIO."""

from __future__ import annotations

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, say, table
from ..clikit.params import DEVICE, NAME, AsciiInt
from ..errors import InvalidInput, NotFound
from ..pci import Scan
from . import hostview
from .model import GpuView


def _gpu(app: App, views: list[GpuView], name: str, scan: Scan) -> GpuView:
    from .. import naming

    bdf = naming.resolve(app.host, name, nvml=lambda: app.nvml, scan=scan).bdf
    for g in views:
        if g.bdf == bdf:
            return g
    raise NotFound(f"{name} ({bdf}) is not a physical NVIDIA GPU", device=bdf, hint="name the GPU, not a VF")


@click.group(cls=LazyGroup)
def vgpu() -> None:
    """NVIDIA vGPUs, one interface over the legacy mdev driver and the vGPU 17+ per-VF interface.

    Types are named as NVIDIA names them (T4-4Q, NVIDIA H100-4C, GRID T4-4Q; any case). A vGPU's ID
    is its mdev UUID (legacy) or its VF's PCI address (vendor-specific VFIO).
    """


@vgpu.command("types")
@click.argument("gpu", required=False, type=DEVICE)
@json_option
@click.pass_obj
def types_cmd(app: App, gpu: str | None) -> None:
    """Types each GPU offers and how many more the host says fit."""
    scan = Scan(app.host)
    views = hostview.gpus(app.host, scan)
    chosen = [_gpu(app, views, gpu, scan)] if gpu else views
    docs = []
    rows = []
    for g in chosen:
        ts = hostview.types(app.host, g)
        docs.append({**g.to_dict(), "types": [t.to_dict() for t in ts]})
        for t in ts:
            if t.available is not None:
                avail = str(t.available)
            else:
                avail = f"yes ({t.free_vfs} free VFs)" if t.creatable else "no"
            fb = f"{t.framebuffer_mb // 1024}G" if t.framebuffer_mb and t.framebuffer_mb >= 1024 else t.framebuffer_mb
            rows.append([g.alias or g.bdf, g.interface, t.type_id, t.name, fb, t.max_instances, avail])

    def human() -> None:
        for g in chosen:
            if g.interface is None:
                say(f"{g.alias or g.bdf} ({g.name}): no vGPU types (vGPU host driver not loaded or VFs not enabled)")
        if rows:
            table(None, ["GPU", "VIA", "TYPE", "NAME", "FB", "MAX", "AVAILABLE"], rows)
        elif not chosen:
            say("no NVIDIA GPUs on this host")

    emit(app, "vgpu-types", {"gpus": docs}, human)


@vgpu.command("list")
@json_option
@click.pass_obj
def list_cmd(app: App) -> None:
    """Every vGPU, both kinds in one table."""
    views = hostview.gpus(app.host, Scan(app.host))
    alias = {g.bdf: g.alias or g.bdf for g in views}
    items = hostview.vgpus(app.host, views)

    def human() -> None:
        if not items:
            say("no vGPUs")
            return
        table(
            None,
            ["ID", "GPU", "VIA", "TYPE", "NAME", "GROUP", "USED BY"],
            [
                [
                    v.id,
                    alias.get(v.gpu, v.gpu),
                    v.interface,
                    v.type_id,
                    v.name,
                    v.iommu_group,
                    ", ".join(f"{u.get('vm') or u.get('comm')} (pid {u['pid']})" for u in v.used_by),
                ]
                for v in items
            ],
        )

    emit(app, "vgpu-list", {"vgpus": [v.to_dict() for v in items]}, human)


@vgpu.command("create")
@click.argument("gpu", type=DEVICE)
@click.option(
    "--type", "type_name", required=True, metavar="NAME", help="vGPU type, e.g. T4-4Q or 'NVIDIA H100-4C'.", type=NAME
)
@click.option("--count", type=AsciiInt(1, 1024), default=1, show_default=True, help="How many vGPUs (all or nothing).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def create_cmd(app: App, gpu: str, type_name: str, count: int) -> None:
    """Create vGPUs of one type on GPU."""
    from . import ops  # the change machinery loads with the commands that change things

    if count < 1:
        raise InvalidInput(f"--count must be at least 1, not {count}", value=count)
    scan = Scan(app.host)
    views = hostview.gpus(app.host, scan)
    out = ops.create(app.env, _gpu(app, views, gpu, scan), type_name, count)

    def human() -> None:
        if out.created and not app.dry_run:
            table(None, ["ID", "TYPE"], [[c["id"], c["type"]] for c in out.created])

    emit_result(app, "vgpu-create", plan=out.plan, data={"vgpus": out.created}, human=human)


@vgpu.command("remove")
@click.argument("ids", nargs=-1, required=True, metavar="ID...", type=NAME)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def remove_cmd(app: App, ids: tuple[str, ...]) -> None:
    """Remove vGPUs by ID (mdev UUID or VF address), refused while a VM uses one."""
    from . import ops  # the change machinery loads with the commands that change things

    steps = ops.remove(app.env, hostview.gpus(app.host, Scan(app.host)), list(ids))
    emit_result(app, "vgpu-remove", plan=steps, data={"removed": list(ids)})
