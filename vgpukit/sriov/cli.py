"""``vgpukit sriov list|enable|disable``, ``vgpukit bind`` and ``vgpukit unbind``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .. import naming
from ..clikit.context import App
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, say, table
from ..clikit.params import DEVICE, NAME, AsciiFloat, AsciiInt
from ..errors import InvalidInput
from ..holders import OpenFiles
from ..inputs import check_component
from ..pci import Scan, read_device
from . import binding
from .model import PfInfo, list_pfs, read_pf
from .usage import User, libvirt_users, pci_users

if TYPE_CHECKING:
    from ..engine import Step


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
    from dataclasses import replace

    return [replace(pf, vfs=tuple(replace(v, users=(*v.users, *doms.get(v.bdf, []))) for v in pf.vfs)) for pf in pfs]


def _show_pfs(pfs: list[PfInfo]) -> None:
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
                pf.num_vfs,
                pf.total_vfs,
                pf.vf_device,
                "on" if pf.autoprobe else "off",
            ]
            for pf in pfs
        ],
    )
    rows = [
        [
            v.bdf,
            f"{pf.alias or pf.bdf} vf{v.index}",
            v.driver,
            v.iommu_group,
            "; ".join(u.describe() for u in v.users) if v.users else "no",
        ]
        for pf in pfs
        for v in pf.vfs
    ]
    if rows:
        say("")
        table(None, ["VF", "OF", "DRIVER", "IOMMU", "IN USE"], rows)


@click.group()
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
@click.argument("pf", required=False, type=DEVICE)
@libvirt_option
@json_option
@click.pass_obj
def list_cmd(app: App, pf: str | None, libvirt_uri: str | None) -> None:
    """Every SR-IOV capable PF (or just PF) with its VFs, drivers, IOMMU groups and users."""
    files = OpenFiles(app.host)
    scan = Scan(app.host)
    pfs = [_pf(app, pf, files, scan)] if pf else list_pfs(app.host, files, scan)
    pfs = _with_libvirt(app, pfs, libvirt_uri)
    emit(app, "sriov-list", {"pfs": [p.to_dict() for p in pfs]}, lambda: _show_pfs(pfs))


def _report(
    app: App, kind: str, steps: list[Step], pf: PfInfo, scan: Scan, extra: dict[str, Any] | None = None
) -> None:
    plan = [s.describe() for s in steps]
    data: dict[str, Any] = {"steps": [s.to_dict() for s in steps], **(extra or {})}
    if not app.dry_run:  # the PF as it is now: what the steps read and wrote, the rest read afresh
        before = scan.device(pf.bdf)
        after = read_pf(app.host, pf.bdf, OpenFiles(app.host), alias=pf.alias, seen=app.env.seen, before=before)
        data["pf"] = after.to_dict()
    emit_result(app, kind, plan=plan, data=data)


@sriov.command("enable")
@click.argument("pf", type=DEVICE)
@click.option("--vfs", "count", type=AsciiInt(0, 65535), required=True, help="Number of VFs wanted.")
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
    from ..engine import execute  # the change machinery loads with the commands that change things
    from . import ops
    from .steps import planned

    scan = Scan(app.host)
    (info,) = _with_libvirt(app, [_pf(app, pf, OpenFiles(app.host), scan)], libvirt_uri)
    from ..health import fact

    health = fact.unusable(fact.current(app.host, app.nvml, save=False), ignore=("vfs-missing",))
    steps = ops.plan_enable(app.host, info, count, driver, no_autoprobe, force, timeout, health.get(info.bdf))
    planned(app.env, info.bdf, info.num_vfs, info.autoprobe)
    execute(app.env, steps)
    _report(app, "sriov-enable", steps, info, scan, {"requested": {"vfs": count, "driver": driver}})


@sriov.command("disable")
@click.argument("pf", type=DEVICE)
@click.option("--force", is_flag=True, help="Disable even when VFs are in use.")
@libvirt_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def disable(app: App, pf: str, force: bool, libvirt_uri: str | None) -> None:
    """Remove every VF of PF (refused while one is in use, unless --force)."""
    from ..engine import execute
    from . import ops
    from .steps import planned

    scan = Scan(app.host)
    (info,) = _with_libvirt(app, [_pf(app, pf, OpenFiles(app.host), scan)], libvirt_uri)
    steps = ops.plan_disable(app.host, info, force)
    planned(app.env, info.bdf, info.num_vfs, info.autoprobe)
    execute(app.env, steps)
    _report(app, "sriov-disable", steps, info, scan)


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


def _refuse_if_in_use(app: App, bdf: str, force: bool, what: str) -> None:
    """Busy (exit 4) unless ``--force``: the device is the console display (``boot_vga``), or in use."""
    from ..errors import Busy

    dev = read_device(app.host, bdf)
    if dev.boot_vga and not force:
        raise Busy(
            f"{what} {bdf}: it is the console display device (boot_vga); moving it takes the console away",
            device=bdf,
            hint="pass --force if the console is not needed",
        )
    users: list[User] = pci_users(app.host, bdf, dev.iommu_group, OpenFiles(app.host))
    if users and not force:
        raise Busy(
            f"{what} {bdf}: it is in use ({'; '.join(u.describe() for u in users)})",
            device=bdf,
            hint="stop its users first, or pass --force",
        )


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
    from .steps import BindDriver, RestoreDriver

    if bool(driver) == restore:
        raise InvalidInput("give exactly one of --driver NAME or --restore")
    host = app.host
    bdf = _bdf(app, device, Scan(host))
    cur = binding.current_driver(host, bdf)
    warnings: list[str] = []
    steps: list[Step] = []
    if driver:
        check_component(driver, "driver name")
        binding.require_driver(host, driver)
        if cur != driver:
            _refuse_if_in_use(app, bdf, force, f"cannot move {device}")
            steps.append(BindDriver(bdf, driver, note=f"{bdf} (now on {cur or 'no driver'})"))
        if driver == binding.VFIO:
            warnings = binding.group_warnings(host, bdf)
    else:
        known = binding.remembered(host, bdf)
        rec = known or binding.Remembered(bdf, None, None, probe=True)
        same = binding.satisfied(rec, cur, binding.current_override(host, bdf))
        if same and known is not None:
            steps.append(PutFile(host.display(binding.record_path(host, bdf)), None, what="bind record"))
        elif not same:
            _refuse_if_in_use(app, bdf, force, f"cannot move {device}")
            steps.append(RestoreDriver(bdf, rec.driver, rec.override, rec.probe))
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
    from .steps import UnbindDriver

    host = app.host
    bdf = _bdf(app, device, Scan(host))
    cur = binding.current_driver(host, bdf)
    steps: list[Step] = [UnbindDriver(bdf, f"{bdf} from {cur}")] if cur else []
    if steps:
        _refuse_if_in_use(app, bdf, force, f"cannot unbind {device}")
    execute(app.env, steps)
    emit_result(app, "unbind", plan=[s.describe() for s in steps], data={"device": _device_doc(app, bdf)})
