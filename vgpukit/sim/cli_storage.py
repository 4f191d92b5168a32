"""``vgpukit sim fault storage DIR ERROR``: the file system holding DIR on a simulated host is full,
over quota, read-only or failing (:mod:`vgpukit.sim.storage`), or works again (``ok``)."""

from __future__ import annotations

import click

from ..clikit.context import App
from ..clikit.output import say
from ..errors import InvalidInput
from . import storage


@click.command("storage")
@click.argument("path", metavar="DIR")
@click.argument("error", metavar="ERROR", type=click.Choice([*storage.ERRORS, "ok"]))
@click.pass_obj
def fault_storage(app: App, path: str, error: str) -> None:
    """The file system holding DIR (/run, /etc/cdi...) fails every later change with ERROR, or works again (ok)."""
    if app.sim_dir is None:
        raise InvalidInput("this acts on a simulated host: give --sim DIR (or VGPUKIT_SIM)")
    faults = storage.set_fault(app.sim_dir, path, None if error == "ok" else error)
    say("storage faults: " + (", ".join(f"{p} {e}" for p, e in sorted(faults.items())) or "none"))
