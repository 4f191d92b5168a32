"""``vgpukit vgpu``: NVIDIA vGPU types, create, list, remove over legacy mdev and per-VF VFIO."""

from __future__ import annotations

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, say, table
from ..clikit.params import DEVICE, NAME, VM_DEVICE, AsciiInt
from ..errors import InvalidInput, NotFound
from ..pci import Scan
from . import hostview
from .model import GpuView, Vgpu


def _gpu(app: App, views: list[GpuView], name: str, scan: Scan) -> GpuView:
    from .. import naming

    bdf = naming.resolve(app.host, name, nvml=lambda: app.nvml, scan=scan).bdf
    for g in views:
        if g.bdf == bdf:
            return g
    raise NotFound(f"{name} ({bdf}) is not a physical NVIDIA GPU", device=bdf, hint="name the GPU, not a VF")


def _ids(app: App, ids: tuple[str, ...]) -> list[str]:
    """vGPU ids as the planner takes them: a VF named any way (``gpu0 vf4``, its address) is its address;
    an mdev UUID stays as given (a vGPU that is only defined has no instance to resolve)."""
    from .. import naming

    out = []
    for raw in ids:
        if naming.form_of(raw) in ("alias", "bdf", "vf"):
            bdf = naming.resolve(app.host, raw, nvml=lambda: app.nvml).bdf
            assert bdf is not None
            out.append(bdf)
        else:
            out.append(raw)
    return out


@click.group(cls=LazyGroup)
def vgpu() -> None:
    """NVIDIA vGPUs, one interface over the legacy mdev driver and the vGPU 17+ per-VF interface.

    Types are named as NVIDIA names them (T4-4Q, NVIDIA H100-4C, GRID T4-4Q; any case). A vGPU's ID
    is its mdev UUID (legacy) or its VF's PCI address (vendor-specific VFIO). Legacy vGPUs are kept
    across reboots by a definition (create --define, define; --auto: made again at boot); remove
    takes the definition too.
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
    """Every vGPU, both kinds in one table, with its definition (DEFINED: auto, manual or no)."""
    views = hostview.gpus(app.host, Scan(app.host))
    alias = {g.bdf: g.alias or g.bdf for g in views}
    items = hostview.with_definitions(app.host, views, hostview.vgpus(app.host, views))

    def used(v: Vgpu) -> str:
        if not v.active:
            return "not running" + (" (made at boot)" if v.start == "auto" else "")
        return ", ".join(f"{u.get('vm') or u.get('comm')} (pid {u['pid']})" for u in v.used_by)

    def human() -> None:
        if not items:
            say("no vGPUs")
            return
        table(
            None,
            ["ID", "GPU", "VIA", "TYPE", "NAME", "GROUP", "USED BY", "DEFINED"],
            [
                [v.id, alias.get(v.gpu, v.gpu), v.interface, v.type_id, v.name, v.iommu_group, used(v), v.defined]
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
@click.option("--define", is_flag=True, help="Also write their definitions, which keep them (legacy vGPUs).")
@click.option("--auto", is_flag=True, help="With --define: made again at boot (start=auto).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def create_cmd(app: App, gpu: str, type_name: str, count: int, define: bool, auto: bool) -> None:
    """Create vGPUs of one type on GPU (with --define, kept across reboots)."""
    from . import ops  # the change machinery loads with the commands that change things

    if count < 1:
        raise InvalidInput(f"--count must be at least 1, not {count}", value=count)
    scan = Scan(app.host)
    views = hostview.gpus(app.host, scan)
    out = ops.create(app.env, _gpu(app, views, gpu, scan), type_name, count, define, auto)

    def human() -> None:
        if out.created and not app.dry_run:
            rows = [[c["id"], c["type"], c.get("start", "no" if "parent" in c else "-")] for c in out.created]
            table(None, ["ID", "TYPE", "DEFINED"], rows)

    emit_result(app, "vgpu-create", plan=out.plan, data={"vgpus": out.created}, human=human)


@vgpu.command("remove")
@click.argument("ids", nargs=-1, required=True, metavar="ID...", type=VM_DEVICE)
@click.option(
    "--keep-definition", is_flag=True, help="Leave legacy vGPUs' definitions (an auto one makes it again at boot)."
)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def remove_cmd(app: App, ids: tuple[str, ...], keep_definition: bool) -> None:
    """Remove vGPUs by ID (mdev UUID or VF address) and their definitions, refused while a VM uses one."""
    from . import ops  # the change machinery loads with the commands that change things

    steps = ops.remove(app.env, hostview.gpus(app.host, Scan(app.host)), _ids(app, ids), keep_definition)
    emit_result(app, "vgpu-remove", plan=steps, data={"removed": list(ids)})


@vgpu.command("define")
@click.argument("ids", nargs=-1, required=True, metavar="ID...", type=VM_DEVICE)
@click.option("--auto", is_flag=True, help="Made again at boot (start=auto; default: manual).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def define_cmd(app: App, ids: tuple[str, ...], auto: bool) -> None:
    """Keep running legacy vGPUs across reboots: write their definitions (again: change the start mode)."""
    from . import ops  # the change machinery loads with the commands that change things

    steps = ops.define(app.env, hostview.gpus(app.host, Scan(app.host)), _ids(app, ids), auto)
    emit_result(app, "vgpu-define", plan=steps, data={"defined": list(ids), "start": "auto" if auto else "manual"})


@vgpu.command("undefine")
@click.argument("ids", nargs=-1, required=True, metavar="ID...", type=VM_DEVICE)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def undefine_cmd(app: App, ids: tuple[str, ...]) -> None:
    """Delete legacy vGPUs' definitions (running ones keep running; none comes back at boot)."""
    from . import ops  # the change machinery loads with the commands that change things

    steps = ops.undefine(app.env, hostview.gpus(app.host, Scan(app.host)), _ids(app, ids))
    emit_result(app, "vgpu-undefine", plan=steps, data={"undefined": list(ids)})
