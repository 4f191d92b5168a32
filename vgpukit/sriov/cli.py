"""``vgpukit sriov list|enable|disable``, ``vgpukit bind`` and ``vgpukit unbind``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .. import naming
from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, say, table
from ..clikit.params import DEVICE, NAME, PF_DEVICE, AsciiFloat, AsciiInt
from ..errors import InvalidInput
from ..holders import OpenFiles
from ..pci import Scan, read_device
from . import binding
from .model import PfInfo, list_pfs, read_pf
from .usage import libvirt_users

if TYPE_CHECKING:
    from ..engine import Step
    from .planner import Facts


def _bdf(app: App, name: str, scan: Scan) -> str:
    t = naming.resolve(app.host, name, nvml=lambda: app.nvml, scan=scan)
    assert t.bdf is not None
    return t.bdf


def _pf(app: App, name: str, files: OpenFiles, scan: Scan) -> PfInfo:
    bdf = _bdf(app, name, scan)
    dev = scan.device(bdf)
    alias = naming.aliases(scan).get(bdf) if dev.sriov is not None and not dev.is_vf else None
    return read_pf(app.host, bdf, files, alias=alias, name=name, scan=scan)


def _with_libvirt(app: App, pfs: list[PfInfo], uri: str | None) -> list[PfInfo]:
    if not uri:
        return pfs
    doms = libvirt_users(app.host, uri)
    if not doms:
        return pfs
    from msgspec.structs import replace

    return [replace(pf, vfs=tuple(replace(v, users=(*v.users, *doms.get(v.bdf, []))) for v in pf.vfs)) for pf in pfs]


def _show_pfs(pfs: list[PfInfo], scan: Scan) -> None:
    if not pfs:
        say("no SR-IOV capable devices")
        return
    table(
        None,
        ["PF", "NAME", "IDS", "DRIVER", "VFS", "TOTAL", "VF DEVICE", "AUTOPROBE"],
        [
            [
                pf.bdf,
                pf.alias,
                pf.ids,
                pf.driver,
                f"{pf.num_vfs} ({pf.missing} missing)" if pf.missing else pf.num_vfs,
                pf.total_vfs,
                pf.vf_device,
                "on" if pf.autoprobe else "off",
            ]
            for pf in pfs
        ],
    )
    vf_names = naming.vf_names(scan)  # the names the resolver takes (docs/cli.md)
    rows = [
        [
            v.bdf,
            vf_names.get(v.bdf, f"{pf.alias or pf.bdf} vf{v.index}"),
            v.driver,
            v.iommu_group,
            "; ".join(u.describe() for u in v.users) if v.users else "no",
        ]
        for pf in pfs
        for v in pf.vfs
    ]
    if rows:
        say("")
        table(None, ["VF", "NAME", "DRIVER", "IOMMU", "IN USE"], rows)
    for pf in pfs:
        if pf.missing:  # sriov_numvfs says more than there are: a PF reset took them away
            say(f"{pf.alias or pf.bdf}: {pf.missing} of {pf.num_vfs} VFs missing: re-create them with "
                f"vgpukit sriov enable {pf.alias or pf.bdf} --vfs {pf.num_vfs} (or vgpukit apply)")  # fmt: skip


@click.group(cls=LazyGroup)
def sriov() -> None:
    """SR-IOV virtual functions: list, enable, disable.

    PFs are named by PCI address or gpuN / nicN / nvmeN.
    """


libvirt_option = click.option(
    "--libvirt",
    "libvirt_uri",
    metavar="URI",
    envvar="VGPUKIT_LIBVIRT_URI",
    help="Also count VFs assigned to domains of this libvirt (qemu:///system; env VGPUKIT_LIBVIRT_URI).",
)


@sriov.command("list")
@click.argument("pf", required=False, type=PF_DEVICE)
@libvirt_option
@json_option
@click.pass_obj
def list_cmd(app: App, pf: str | None, libvirt_uri: str | None) -> None:
    """Every SR-IOV capable PF (or just PF) with its VFs, drivers, IOMMU groups and users."""
    files = OpenFiles(app.host)
    scan = Scan(app.host)
    pfs = [_pf(app, pf, files, scan)] if pf else list_pfs(app.host, files, scan)
    pfs = _with_libvirt(app, pfs, libvirt_uri)
    emit(app, "sriov-list", {"pfs": [p.to_dict() for p in pfs]}, lambda: _show_pfs(pfs, scan))


def _planned_pf(app: App, name: str, libvirt_uri: str | None) -> tuple[Facts, PfInfo]:
    """What the planner reads (one per command), and the PF ``name`` names as it read it."""
    from .planner import Facts

    scan = Scan(app.host)
    facts = Facts(app.host, scan, libvirt_uri=libvirt_uri, nvml=lambda: app.nvml)
    bdf = _bdf(app, name, scan)
    dev = scan.device(bdf)
    alias = naming.aliases(scan).get(bdf) if dev.sriov is not None and not dev.is_vf else None
    return facts, facts.pf(bdf, alias=alias, name=name)


def _report(
    app: App, kind: str, facts: Facts, pf: PfInfo, steps: list[Step], extra: dict[str, Any] | None = None
) -> None:
    """Execute the planned ``steps`` and report the PF: what the steps observed (the run's outcome), the
    rest read afresh."""
    from ..engine import execute  # the change machinery loads with the commands that change things
    from .steps import observed

    outcome = execute(app.env, steps)
    plan = [s.describe() for s in steps]
    data: dict[str, Any] = {"steps": [s.to_dict() for s in steps], **(extra or {})}
    if not app.dry_run:
        before = facts.scan.device(pf.bdf)
        known = observed(outcome)  # what the steps read and wrote
        after = read_pf(app.host, pf.bdf, OpenFiles(app.host), alias=pf.alias, known=known, before=before)
        data["pf"] = after.to_dict()
    summary = _pf_line(pf, data.get("pf"), (extra or {}).get("requested"))
    made = min(pf.missing, len(data["pf"]["vfs"])) if "pf" in data and not data["pf"].get("missing_vfs") else 0
    if made:  # VFs a PF reset took away, made again
        from ..words import plural

        some = f"{made} of the {pf.missing} missing VFs" if made < pf.missing else f"the {plural(made, 'missing VF')}"
        summary += f"; {some} re-created"
    emit_result(app, kind, plan=plan, data=data, summary=[summary])


def _pf_line(pf: PfInfo, after: dict[str, Any] | None, requested: dict[str, Any] | None) -> str:
    """``nic0 (0000:05:00.0)  16 VFs (0000:05:00.2..0000:05:02.1): 16 on vfio-pci``: the PF after the
    change (on a dry run: as requested)."""
    from collections import Counter

    from ..words import plural

    head = f"{pf.alias} ({pf.bdf})" if pf.alias else pf.bdf
    if after is None:  # dry run
        if not requested:
            return f"{head}  no VFs"
        where = {"default": "the kernel's default driver", "none": "no driver"}.get(requested["driver"])
        return f"{head}  {plural(requested['vfs'], 'VF')} on {where or requested['driver']}"
    vfs = after["vfs"]
    if not vfs:
        return f"{head}  no VFs"
    drivers = Counter(vf["driver"] or "no driver" for vf in vfs)
    on = ", ".join(f"{n} on {d}" for d, n in sorted(drivers.items(), key=lambda kv: (-kv[1], kv[0])))
    first, last = vfs[0]["bdf"], vfs[-1]["bdf"]
    return f"{head}  {plural(len(vfs), 'VF')} ({first if first == last else f'{first}..{last}'}): {on}"


@sriov.command("enable")
@click.argument("pf", type=PF_DEVICE)
@click.option(  # 0 and -1 refused alike: at least 1, and 'sriov disable' removes them all
    "--vfs",
    "count",
    type=AsciiInt(1, 65535, below="use 'vgpukit sriov disable' to remove all VFs"),
    required=True,
    help="Number of VFs wanted.",
)
@click.option(
    "--driver",
    type=click.Choice(binding.DRIVER_MODES),
    default="default",
    show_default=True,
    help="Where the VFs go: the kernel's default driver, vfio-pci, or none (left unbound).",
)
@click.option("--no-autoprobe", is_flag=True, help="Turn the PF's sriov_drivers_autoprobe off (persistently).")
@click.option("--force", is_flag=True, help="Go through 0 even when current VFs are in use.")
@click.option(
    "--timeout",
    type=AsciiFloat(0.001, 3600),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds to wait for the VFs to appear.",
)
@libvirt_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def enable(
    app: App,
    pf: str,
    count: int,
    driver: str,
    no_autoprobe: bool,
    force: bool,
    timeout: float,
    libvirt_uri: str | None,
) -> None:
    """Have exactly --vfs VFs on PF, bound as --driver says (idempotent)."""
    from . import planner

    facts, info = _planned_pf(app, pf, libvirt_uri)
    req = planner.EnableRequest(info.bdf, count, driver, no_autoprobe, force, timeout)
    _report(app, "sriov-enable", facts, info, planner.plan(facts, req), {"requested": {"vfs": count, "driver": driver}})


@sriov.command("disable")
@click.argument("pf", type=PF_DEVICE)
@click.option("--force", is_flag=True, help="Disable even when VFs are in use.")
@libvirt_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def disable(app: App, pf: str, force: bool, libvirt_uri: str | None) -> None:
    """Remove every VF of PF (refused while one is in use, unless --force)."""
    from . import planner

    facts, info = _planned_pf(app, pf, libvirt_uri)
    _report(app, "sriov-disable", facts, info, planner.plan(facts, planner.DisableRequest(info.bdf, force)))


# ----------------------------------------------------------------------------- bind / unbind
def _device_doc(app: App, bdf: str) -> dict[str, Any]:
    dev = read_device(app.host, bdf)
    rec = binding.remembered_lenient(app.host, bdf)
    return {
        "bdf": bdf,
        "driver": dev.driver,
        "driver_override": dev.driver_override,
        "iommu_group": dev.iommu_group,
        "remembered": None if rec is None else {"driver": rec.driver, "override": rec.override, "probe": rec.probe},
    }


@click.command()
@click.argument("device", type=DEVICE)
@click.option("--driver", metavar="NAME", help="Driver to bind to (vfio-pci).", type=NAME)
@click.option("--restore", is_flag=True, help="Put the device back on the driver it had before vgpukit moved it.")
@click.option(
    "--force", is_flag=True, help="Move the device even when it is in use or is the console display (boot_vga)."
)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def bind(app: App, device: str, driver: str | None, restore: bool, force: bool) -> None:
    """Bind DEVICE to --driver (driver_override + unbind + drivers_probe), or --restore its original driver."""
    from ..engine import execute
    from ..engine.files import PutFile
    from . import planner

    if bool(driver) == restore:
        raise InvalidInput("give exactly one of --driver NAME or --restore")
    facts = planner.Facts(app.host, nvml=lambda: app.nvml)  # the health rule reads NVML (a lost GPU)
    bdf = _bdf(app, device, facts.scan)
    steps = planner.plan(facts, planner.BindRequest(bdf, driver, restore, force, name=device))
    warnings = binding.group_warnings(app.host, bdf) if driver == binding.VFIO else []
    execute(app.env, steps)
    for w in warnings:
        click.echo(f"vgpukit: warning: {w}", err=True)
    plan = [s.describe() for s in steps if not isinstance(s, PutFile)]
    emit_result(app, "bind", plan=plan, data={"device": _device_doc(app, bdf), "warnings": warnings})


@click.command()
@click.argument("device", type=DEVICE)
@click.option(
    "--force", is_flag=True, help="Unbind even when the device is in use or is the console display (boot_vga)."
)
@json_option
@dry_run_option
@click.pass_obj
@mutating
def unbind(app: App, device: str, force: bool) -> None:
    """Unbind DEVICE from its driver (remembered, so 'bind DEVICE --restore' brings it back)."""
    from ..engine import execute
    from . import planner

    facts = planner.Facts(app.host)
    bdf = _bdf(app, device, facts.scan)
    steps = planner.plan(facts, planner.UnbindRequest(bdf, force, name=device))
    execute(app.env, steps)
    emit_result(app, "unbind", plan=[s.describe() for s in steps], data={"device": _device_doc(app, bdf)})
