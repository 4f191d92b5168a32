"""``vgpukit sim``: create and drive simulated hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import json_option
from ..clikit.output import emit, say, table
from ..clikit.params import NAME, VM_DEVICE, AsciiInt, Name, offer
from ..errors import InvalidInput, NotFound
from ..words import plural
from .state import check_sim_dir


class SimProfile(Name):
    """``sim init --profile``: the built-in profile names (or a YAML file)."""

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        from .build import builtin_profiles

        names = offer(sorted(builtin_profiles()), incomplete)
        return names or [CompletionItem(incomplete, type="file")]


@click.group(cls=LazyGroup)
def sim() -> None:
    """Simulated hosts: a fake sysfs tree whose kernel reacts to writes, plus a simulated NVML.

    Create one with 'vgpukit sim init DIR --profile hgx-a100', then run any command with
    'vgpukit --sim DIR ...' (or export VGPUKIT_SIM=DIR). State persists between commands.
    """


@sim.command("profiles")
@json_option
@click.pass_obj
def profiles(app: App) -> None:
    """List the built-in host profiles."""
    from .build import builtin_profiles, load_profile

    rows = []
    for name in sorted(builtin_profiles()):
        rows.append({"name": name, "description": load_profile(name).get("description", "")})
    emit(
        app,
        "sim-profiles",
        {"profiles": rows},
        lambda: table(None, ["PROFILE", "DESCRIPTION"], [[r["name"], r["description"]] for r in rows]),
    )


@sim.command("init")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--profile",
    "profile",
    metavar="PROFILE",
    type=SimProfile(),
    default="hgx-a100",
    show_default=True,
    help="Built-in profile or a YAML path.",
)
@click.option("--force", is_flag=True, help="Replace an existing simulated host in DIRECTORY.")
@click.option(
    "--char-devices",
    is_flag=True,
    help="Device nodes as real character devices with /dev/null's numbers (1:3), for container engines (root).",
)
@json_option
@click.pass_obj
def init(app: App, directory: Path, profile: str, force: bool, char_devices: bool) -> None:
    """Write a simulated host under DIRECTORY."""
    from .build import init_sim

    info = init_sim(directory.absolute(), profile, force=force, char_devices=char_devices)
    emit(
        app,
        "sim-init",
        info,
        lambda: say(
            f"simulated host '{info['profile']}' ready in {info['root']}: {plural(info['devices'], 'PCI device')}, "
            f"{plural(info['gpus'], 'GPU')}.\nTry: vgpukit --sim {info['root']} topo",
            "green",
        ),
    )


def _sim_root(app: App) -> Path:
    if app.sim_dir is None:
        raise InvalidInput("this command needs a simulated host: pass --sim DIR or set VGPUKIT_SIM")
    check_sim_dir(app.sim_dir)
    return app.sim_dir.absolute()


@sim.command("reboot")
@json_option
@click.pass_obj
def reboot_cmd(app: App) -> None:
    """Reboot the simulated host: the kernel's state (VFs, mdevs, drivers, /run) built again from its
    profile; the disk (/etc, /var...) and the GPUs' MIG mode kept (docs/simulator.md)."""
    from .reboot import reboot

    done = reboot(_sim_root(app))
    emit(app, "sim-reboot", done, lambda: say(f"rebooted; kept {', '.join(done['kept'])} and the MIG mode"))


@sim.command("info")
@json_option
@click.pass_obj
def info(app: App) -> None:
    """Show which profile the simulated host was built from, and its held devices."""
    from .holders import FIRST_PID
    from .state import corrupt, read_state

    root = _sim_root(app)
    meta_path = root / ".vgpukit-sim" / "sim.json"
    meta = read_state(root, meta_path)
    if not isinstance(meta, dict) or not isinstance(meta.get("profile"), str):
        raise corrupt(root, meta_path)
    meta = {k: v for k, v in meta.items() if k in ("version", "profile", "description")}
    held = []
    for pid in app.host.listdir(app.host.proc()):
        if pid.isascii() and pid.isdigit() and int(pid) >= FIRST_PID:
            fd = app.host.readlink(app.host.proc(pid, "fd", "20"))
            held.append({"pid": int(pid), "holds": fd, "comm": app.host.read_opt(app.host.proc(pid, "comm"))})
    from . import storage

    disks = storage.load(root)
    data = {**meta, "root": str(root), "holders": held, "storage": disks}

    def human() -> None:
        say(f"profile {meta['profile']}: {meta.get('description', '')}")
        table(
            "simulated processes holding devices",
            ["PID", "COMM", "HOLDS"],
            [[h["pid"], h["comm"], h["holds"]] for h in held],
        )
        if disks:
            table("storage faults (vgpukit sim fault storage)", ["DIRECTORY", "ERROR"], sorted(disks.items()))

    emit(app, "sim-info", data, human)


@sim.command("hold")
@click.argument("device", type=VM_DEVICE)
@click.option("--vm", default="sim-vm", help="Name of the simulated VM holding it.", type=NAME)
@json_option
@click.pass_obj
def hold(app: App, device: str, vm: str) -> None:
    """Simulate a VM (QEMU) holding DEVICE's VFIO group open: a PCI device or an mdev UUID."""
    from .holders import hold as do_hold

    root = _sim_root(app)
    group = _group_of(app, device)
    pid = do_hold(root, group, owner=vm)
    emit(
        app,
        "sim-hold",
        {"pid": pid, "device": device, "iommu_group": int(group)},
        lambda: say(f"pid {pid} ({vm}) now holds /dev/vfio/{group} ({device})"),
    )


@sim.command("release")
@click.argument("pid", type=AsciiInt(1, 4194304))
@json_option
@click.pass_obj
def release(app: App, pid: int) -> None:
    """End a simulated holder process started by 'sim hold'."""
    from .holders import release as do_release

    if not do_release(_sim_root(app), pid):
        raise NotFound(f"no simulated holder process {pid}", value=pid, hint="see: vgpukit sim info")
    emit(app, "sim-release", {"pid": pid}, lambda: say(f"released pid {pid}"))


def _group_of(app: App, device: str) -> str:
    from .. import naming
    from ..host import IOMMU_GROUP

    host = app.host
    t = naming.resolve(host, device, frozenset({naming.PCI, naming.MDEV}), nvml=lambda: app.nvml)
    if t.kind == naming.MDEV:
        assert t.uuid is not None
        link = host.link_name(host.mdev_device(t.uuid, IOMMU_GROUP))
    else:
        assert t.bdf is not None
        link = host.link_name(host.pci_device(t.bdf, IOMMU_GROUP))
    if link is None:
        raise NotFound(f"{device} has no IOMMU group", device=device)
    return link


def _register_driver_controls() -> None:
    """The simulated NVIDIA driver's controls: injected faults and client processes."""
    from .cli_nvml import client, fault
    from .cli_storage import fault_storage

    fault.add_command(fault_storage)
    sim.add_command(fault)
    sim.add_command(client)


_register_driver_controls()
