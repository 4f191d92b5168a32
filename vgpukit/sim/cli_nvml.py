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
from ..clikit.params import DEVICE, GPU_DEVICE, NAME, AsciiInt
from ..errors import InvalidInput
from ..nvml.errors import CODES_BY_NAME
from ..words import plural
from . import nvml as simdrv
from . import nvml_events as simev


def _dir(app: App) -> Path:
    if app.sim_dir is None:
        raise InvalidInput("this acts on a simulated host: give --sim DIR (or VGPUKIT_SIM)")
    return app.sim_dir


def _bdf(app: App, name: str) -> str:
    """The PCI function ``name`` names, by vgpukit's one resolver (gpuN, nic0 vf0, an address...)."""
    from .. import naming

    bdf = naming.resolve(app.host, name, nvml=lambda: app.nvml).bdf
    assert bdf is not None
    return bdf


def _gpu(app: App, name: str) -> int:
    """The simulated driver's index of the GPU ``name`` names (read from PCI facts: a lost GPU too)."""
    return simev.gpu_of(_dir(app), _bdf(app, name))


def _nvml_index(app: App, name: str) -> int:
    """NVML's index of the GPU ``name`` names (an NVML index itself, as ``nvidia-smi -i``, or any GPU name)."""
    from .. import naming

    _dir(app)
    index = naming.resolve(app.host, name, frozenset({naming.GPU}), nvml=lambda: app.nvml).nvml_index
    assert index is not None
    return index


@click.group(cls=LazyGroup)
def fault() -> None:
    """Faults of the simulated host: NVML call failures (each fires once), XIDs, ECC errors, lost GPUs, AER errors,
    PF resets, full or failing file systems."""


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
@click.option("--gpu", type=GPU_DEVICE, metavar="GPU", help="Only calls on this GPU (gpuN, an NVML index...).")
@click.pass_obj
def fault_add(app: App, call: str, error: str, nth: int, gpu: str | None) -> None:
    """Make the nth next CALL fail with NVML ERROR."""
    index = None if gpu is None else _nvml_index(app, gpu)
    simdrv.add_fault(_dir(app), call, error, nth, index)
    gpu = None if index is None else str(index)
    which = "the next" if nth == 1 else f"call {nth} from now of"
    say(f"{which} {call}{'' if gpu is None else f' on GPU {gpu}'} will fail with {error}")


@fault.command("list")
@json_option
@click.pass_obj
def fault_list(app: App) -> None:
    """List the faults in force: NVML calls that will fail (call, error, nth, calls seen, GPU), then storage faults."""
    from . import storage

    faults = simdrv.list_faults(_dir(app))
    disks = storage.load(_dir(app))
    rows = [[f["call"], f["error"], f["nth"], f.get("seen", 0), f.get("gpu")] for f in faults]

    def human() -> None:
        table(None, ["CALL", "ERROR", "NTH", "SEEN", "GPU"], rows)
        if disks:
            table("storage faults", ["DIRECTORY", "ERROR"], sorted(disks.items()))

    emit(app, "sim-faults", {"faults": faults, "storage": disks}, human)


@fault.command("clear")
@click.pass_obj
def fault_clear(app: App) -> None:
    """Remove every injected NVML call failure and every storage fault (lost GPUs: fault recover)."""
    from . import storage

    simdrv.clear_faults(_dir(app))
    storage.clear(_dir(app))


@fault.command("xid")
@click.argument("gpu", type=GPU_DEVICE)
@click.argument("xid", type=AsciiInt(1, 65535))
@click.option("--gi", type=AsciiInt(0, 63), help="In this GPU instance (a MIG slice) of GPU, as NVML names it.")
@click.pass_obj
def fault_xid(app: App, gpu: str, xid: int, gi: int | None) -> None:
    """The driver reports XID on GPU (and does what its own table says: XID 79 loses the GPU)."""
    index = _gpu(app, gpu)
    simev.inject_xid(_dir(app), index, xid, gi)
    say(f"XID {xid} reported on GPU {index}" + (f", GPU instance {gi}" if gi is not None else ""))


@fault.command("ecc")
@click.argument("gpu", type=GPU_DEVICE)
@click.option("--double", is_flag=True, help="An uncorrected (double-bit) error; default: corrected (single-bit).")
@click.pass_obj
def fault_ecc(app: App, gpu: str, double: bool) -> None:
    """Count one ECC error on GPU and deliver its event."""
    index = _gpu(app, gpu)
    simev.inject_ecc(_dir(app), index, double)
    say(f"{'double' if double else 'single'}-bit ECC error on GPU {index}")


@fault.command("lost")
@click.argument("gpu", type=GPU_DEVICE)
@click.pass_obj
def fault_lost(app: App, gpu: str) -> None:
    """GPU stops answering: every NVML call on it fails with GPU_IS_LOST until recovered."""
    index = _gpu(app, gpu)
    simev.inject_lost(_dir(app), index)
    say(f"GPU {index} is lost")


@fault.command("recover")
@click.argument("gpu", type=GPU_DEVICE)
@click.pass_obj
def fault_recover(app: App, gpu: str) -> None:
    """GPU answers again, its volatile ECC counts cleared (as after a reset or a reboot)."""
    index = _gpu(app, gpu)
    simev.recover(_dir(app), index)
    say(f"GPU {index} recovered")


@fault.command("pf-reset")
@click.argument("pf", type=DEVICE)
@click.pass_obj
def fault_pf_reset(app: App, pf: str) -> None:
    """A reset of PF that takes its VFs away (sriov_numvfs still says how many were configured)."""
    _dir(app)
    pf = _bdf(app, pf)
    gone = simev.pf_reset(_dir(app), pf)
    say(f"{pf} reset: {plural(len(gone), 'VF')} gone")


@fault.command("aer")
@click.argument("device", type=DEVICE)
@click.argument("kind", type=click.Choice(sorted(simev.AER_KINDS)))
@click.pass_obj
def fault_aer(app: App, device: str, kind: str) -> None:
    """Count one PCIe AER error of KIND on DEVICE (aer_dev_<kind> in its sysfs directory)."""
    _dir(app)
    bdf = _bdf(app, device)
    total = simev.aer(_dir(app), bdf, kind)
    say(f"{bdf}: {plural(total, f'{kind} AER error')}")


@click.group(cls=LazyGroup)
def client() -> None:
    """Simulated processes holding a GPU or a MIG device (they block resets and destroys)."""


@client.command("add")
@click.argument("gpu", type=GPU_DEVICE)
@click.argument("name", type=NAME)
@click.option("--gi", type=AsciiInt(0, 255), help="Inside this GPU instance.")
@click.option("--ci", type=AsciiInt(0, 255), help="Inside this compute instance of --gi.")
@click.pass_obj
def client_add(app: App, gpu: str, name: str, gi: int | None, ci: int | None) -> None:
    """Start a simulated client NAME on GPU (gpuN, or an NVML index as nvidia-smi -i); prints its pid."""
    if ci is not None and gi is None:
        raise InvalidInput("--ci needs --gi")
    click.echo(simdrv.add_client(_dir(app), _nvml_index(app, gpu), name, gi, ci))


@client.command("remove")
@click.argument("pid", type=AsciiInt(1, 4194304))
@click.pass_obj
def client_remove(app: App, pid: int) -> None:
    """Stop the simulated client PID."""
    simdrv.remove_client(_dir(app), pid)
