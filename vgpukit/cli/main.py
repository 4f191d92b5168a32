"""The ``vgpukit`` command.

Sub-commands are registered in :data:`COMMANDS` by module path and imported only when run, so
``vgpukit --help`` stays fast and a host without libvirt or NVML still runs everything else.
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..clikit.context import App
from ..clikit.globalopts import hoist
from ..clikit.lazy import LazyGroup
from ..clikit.params import AsciiFloat
from ..errors import EXIT_INVALID, InvalidInput, VgpukitError
from ..inputs import has_control
from ..wiring import Wiring

# name -> (module, attribute, one-line help): the top-level commands, imported when run (LazyGroup).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "topo": ("vgpukit.cli.cmd_topo", "topo", "Show the PCIe topology (tree, --matrix)."),
    "devices": ("vgpukit.cli.cmd_topo", "devices", "List PCI devices, flat and filterable."),
    "sriov": ("vgpukit.sriov.cli", "sriov", "SR-IOV virtual functions: list, enable, disable."),
    "bind": ("vgpukit.sriov.cli", "bind", "Bind a device to a driver (vfio-pci) or restore its driver."),
    "unbind": ("vgpukit.sriov.cli", "unbind", "Unbind a device from its driver."),
    "mdev": ("vgpukit.mdev.cli", "mdev", "Mediated devices: types, create, remove, define, start."),
    "vgpu": ("vgpukit.vgpu.cli", "vgpu", "NVIDIA vGPUs on legacy mdev or per-VF vendor VFIO."),
    "mig": ("vgpukit.mig.cli", "mig", "MIG status, profiles, destroy, apply mig-parted configs."),
    "partition": ("vgpukit.mig.cli", "partition", "Carve a GPU into MIG slices: partition gpu0 --mig 3g.20gb."),
    "render": ("vgpukit.attach.cli", "render", "Render libvirt XML for devices and VMs."),
    "attach": ("vgpukit.attach.cli", "attach", "Attach devices to a libvirt domain."),
    "detach": ("vgpukit.attach.cli", "detach", "Detach devices from a libvirt domain."),
    "cdi": ("vgpukit.cdi.cli", "cdi", "Generate CDI specs for containers."),
    "qos": ("vgpukit.qos.cli", "qos", "GPU time-slice QoS daemon and its control commands."),
    "apply": ("vgpukit.fleet.cli", "apply_cmd", "Make the host match a declarative host config (vgpukit.host/v1)."),
    "diff": ("vgpukit.fleet.cli", "diff_cmd", "Show what 'apply' would change."),
    "assert": ("vgpukit.fleet.cli", "assert_cmd", "Exit 0 when the host matches a host config, 1 otherwise."),
    "export": ("vgpukit.fleet.cli", "export_cmd", "Print the host as a host config document."),
    "boot-unit": ("vgpukit.fleet.cli", "boot_unit_cmd", "Print a systemd unit applying the host config at boot."),
    "completion": ("vgpukit.cli.cmd_completion", "completion", "Print the shell completion script (bash, zsh, fish)."),
    "recover": ("vgpukit.cli.cmd_recover", "recover", "Repair what an interrupted vgpukit command left half-done."),
    "health": (
        "vgpukit.health.cli",
        "health",
        "Device health (XIDs, ECC, lost GPUs, AER, VFs gone), the action to take.",
    ),
    "quarantine": (
        "vgpukit.remedy.cli",
        "quarantine_cmd",
        "Keep every door from placing work on a device until released.",
    ),
    "release": ("vgpukit.remedy.cli", "release_cmd", "End a device's quarantine."),
    "drain": ("vgpukit.remedy.cli", "drain_cmd", "Move all work off a device: VMs, processes, Kubernetes pods."),
    "reset": ("vgpukit.remedy.cli", "reset_cmd", "Reset a device and rebuild exactly what it carried."),
    "remediate": (
        "vgpukit.remedy.cli",
        "remediate_cmd",
        "Quarantine, drain, reset, rebuild, verify and release a device: one journaled plan.",
    ),
    "exporter": (
        "vgpukit.cli.cmd_exporter",
        "exporter",
        "Serve Prometheus metrics: GPUs (dcgm-exporter names), health, QoS tenants, slices.",
    ),
    "k8s": ("vgpukit.k8s.cli", "k8s", "Kubernetes: device plugin, node labels, node config agent."),
    "sim": ("vgpukit.sim.cli", "sim", "Create and inspect simulated hosts."),
    "units": ("vgpukit.cli.cmd_units", "units", "Install the systemd units and udev rules (with this vgpukit's path)."),
}


# the wiring (vgpukit.wiring) rides in the root context's obj until the group's callback makes the App;
# shell completion, which runs no callback, finds it there
@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"], "obj": Wiring()})
@click.option("--root", metavar="DIR", help="Host root directory (default: /; env VGPUKIT_ROOT).")
@click.option("--sim", "sim", metavar="DIR", help="Act on the simulated host in DIR (env VGPUKIT_SIM).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (also accepted after the command).")
@click.option("--dry-run", is_flag=True, help="Show the plan, change nothing (mutating commands).")
@click.option("--debug", is_flag=True, help="Debug logging and tracebacks.")
@click.option(
    "-v", "--verbose", is_flag=True, help="Every step a change made (or plans), not a summary (also after the command)."
)
@click.option(
    "--wait",
    type=AsciiFloat(0, 86400),
    envvar="VGPUKIT_WAIT",
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="How long a mutating command waits for another one to release the host lock (env VGPUKIT_WAIT).",
)
@click.version_option(__version__, "-V", "--version", prog_name="vgpukit")
@click.pass_context
def cli(
    ctx: click.Context,
    root: str | None,
    sim: str | None,
    as_json: bool,
    dry_run: bool,
    debug: bool,
    verbose: bool,
    wait: float,
) -> None:
    """vgpukit: carve GPUs and PCIe devices into VFs, mdevs, vGPUs and MIG slices.

    Devices are named gpuN / nicN / nvmeN (physical functions in PCI bus order), by PCI address
    (0000:3b:00.0 or 3b:00.0), or by GPU UUID where NVML is available.
    """
    if debug:
        from ..logs import debug_logging

        debug_logging()
    # else the loggers set up the ``vgpukit: warning:`` last resort when a module that logs is loaded
    # (vgpukit.logs): a read-only command loads no logging
    wiring = ctx.obj if isinstance(ctx.obj, Wiring) else Wiring()
    ctx.obj = App.from_env(
        root,
        sim,
        json=as_json,
        dry_run=dry_run,
        debug=debug,
        verbose=verbose,
        wait=wait,
        command=_command_line(),
        wiring=wiring,
    )
    ctx.call_on_close(ctx.obj.close)  # runs when the command ends, error or not


def _command_line() -> str:
    words = ["vgpukit", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith(("vgpukit", "__main__.py")) else []
    return " ".join(words)[:400] or "vgpukit"


def main(argv: list[str] | None = None, shim: str = "") -> int:
    """``shim``: ``--mig-parted`` when ``argv`` is nvidia-mig-parted's command line translated (the
    commands errors name are then the shim's)."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    as_json = "--json" in args
    try:
        _check_args(args)
        args = hoist(cli, args)  # the global options are accepted after the command too
        # standalone_mode=False: click returns ctx.exit(N)'s code instead of raising
        rc = cli.main(args=args, prog_name="vgpukit", standalone_mode=False)
    except VgpukitError as err:
        if debug:
            raise
        _report(err, as_json, [*args, shim])
        return err.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        # the same one-line form as every other error; usage errors are bad input (exit 2)
        msg = " ".join(exc.format_message().split())
        where = exc.ctx.command_path if isinstance(exc, click.UsageError) and exc.ctx is not None else ""
        hint = _shim(f" (see: {where} --help)", [*args, shim]) if where else ""
        if as_json:
            from ..clikit.output import json_doc, print_json

            print_json(json_doc("error", {"error": "invalid-input", "message": msg, "exit_code": EXIT_INVALID}))
        sys.stderr.write(f"vgpukit: error: {msg}{hint}\n")
        return EXIT_INVALID if isinstance(exc, click.UsageError) else exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 1
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except Exception as exc:  # an unexpected bug: one line, traceback only with --debug
        if debug:
            raise
        from ..extras import missing

        extra = missing(exc) if isinstance(exc, ModuleNotFoundError) else None
        if extra is not None:  # an optional dependency (an extra) is not installed: exit 5 naming it
            _report(extra, as_json)
            return extra.exit_code
        sys.stderr.write(f"vgpukit: internal error: {type(exc).__name__}: {exc} (rerun with --debug)\n")
        return 1
    return rc if isinstance(rc, int) else 0


def _check_args(args: list[str]) -> None:
    """No argument carries control characters (names, paths, numbers alike): refused before parsing."""
    for i, arg in enumerate(args, 1):
        if has_control(arg):
            raise InvalidInput(f"argument {i} contains control characters")


def _one_line(text: str) -> str:
    return " ".join(text.split())


# what a shim's user types for the commands a hint names (docs/mdev.md, docs/mig.md): only commands
# the shim has under the same name
_SHIMS = {
    "--mig-parted": {f"vgpukit mig {c}": f"nvidia-mig-parted {c}" for c in ("apply", "assert", "export")},
    "--mdevctl": {f"vgpukit mdev {c}": f"mdevctl {c}" for c in ("list", "types")},
}


def _shim(text: str, args: list[str]) -> str:
    """``text`` with the commands it names as the shim run (``--mig-parted``, ``--mdevctl``) has them."""
    for flag, names in _SHIMS.items():
        if flag in args:
            for ours, theirs in names.items():
                text = text.replace(ours, theirs)
    return text


def _report(err: VgpukitError, as_json: bool, args: list[str] | None = None) -> None:
    if as_json:
        from ..clikit.output import json_doc, print_json

        print_json(json_doc("error", err.to_dict()))
    sys.stderr.write(f"vgpukit: error: {_shim(_one_line(str(err)), args or [])}\n")
