"""``vgpukit sim fault ...`` / ``vgpukit sim client ...``: drive the simulated NVML driver.

Two click groups for the ``sim`` command group to attach (``sim.add_command(fault)``,
``sim.add_command(client)``). They act on the simulated host given by ``--sim DIR``.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import json_option
from ..clikit.output import emit, say, table
from ..clikit.params import NAME, AsciiInt
from ..errors import InvalidInput
from ..nvml.errors import CODES_BY_NAME
from . import nvml as simdrv


def _dir(app: App) -> Path:
    if app.sim_dir is None:
        raise InvalidInput("this acts on a simulated host: give --sim DIR (or VGPUKIT_SIM)")
    return app.sim_dir


@click.group(cls=LazyGroup)
def fault() -> None:
    """Injected NVML failures of the simulated driver (each fires once)."""


@fault.command("add")
@click.argument("call", type=click.Choice(simdrv.FAULT_CALLS))
@click.option(
    "--error",
    default="UNKNOWN",
    show_default=True,
    type=click.Choice(sorted(CODES_BY_NAME)),
    help="The NVML error the call returns.",
)
@click.option(
    "--nth", default=1, show_default=True, type=AsciiInt(1, 1000000), help="Fail the nth matching call from now."
)
@click.option("--gpu", type=AsciiInt(0, 255), help="Only calls on this NVML index.")
@click.pass_obj
def fault_add(app: App, call: str, error: str, nth: int, gpu: int | None) -> None:
    """Make the nth next CALL fail with NVML ERROR."""
    simdrv.add_fault(_dir(app), call, error, nth, gpu)
    which = "the next" if nth == 1 else f"call {nth} from now of"
    say(f"{which} {call}{'' if gpu is None else f' on GPU {gpu}'} will fail with {error}")


@fault.command("list")
@json_option
@click.pass_obj
def fault_list(app: App) -> None:
    """List the injected faults: call, error, nth, calls seen, GPU."""
    faults = simdrv.list_faults(_dir(app))
    rows = [[f["call"], f["error"], f["nth"], f.get("seen", 0), f.get("gpu")] for f in faults]
    emit(app, "sim-faults", {"faults": faults}, lambda: table(None, ["CALL", "ERROR", "NTH", "SEEN", "GPU"], rows))


@fault.command("clear")
@click.pass_obj
def fault_clear(app: App) -> None:
    """Remove every injected fault."""
    simdrv.clear_faults(_dir(app))


@click.group(cls=LazyGroup)
def client() -> None:
    """Simulated processes holding a GPU or a MIG device (they block resets and destroys)."""


@client.command("add")
@click.argument("gpu", type=AsciiInt(0, 255))
@click.argument("name", type=NAME)
@click.option("--gi", type=AsciiInt(0, 255), help="Inside this GPU instance.")
@click.option("--ci", type=AsciiInt(0, 255), help="Inside this compute instance of --gi.")
@click.pass_obj
def client_add(app: App, gpu: int, name: str, gi: int | None, ci: int | None) -> None:
    """Start a simulated client NAME on NVML GPU index GPU; prints its pid."""
    if ci is not None and gi is None:
        raise InvalidInput("--ci needs --gi")
    click.echo(simdrv.add_client(_dir(app), gpu, name, gi, ci))


@client.command("remove")
@click.argument("pid", type=AsciiInt(1, 4194304))
@click.pass_obj
def client_remove(app: App, pid: int) -> None:
    """Stop the simulated client PID."""
    simdrv.remove_client(_dir(app), pid)
