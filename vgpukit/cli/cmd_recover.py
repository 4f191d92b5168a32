"""``vgpukit recover``: repair what an interrupted mutating command left (its journal)."""

from __future__ import annotations

import click

from ..clikit.context import App
from ..clikit.options import json_option
from ..clikit.output import emit, say
from ..words import plural


@click.command()
@click.option("--discard", is_flag=True, help="Drop the journal without replaying it (after fixing things by hand).")
@json_option
@click.pass_obj
def recover(app: App, discard: bool) -> None:
    """Put back what an interrupted command changed (every mutating command does this first, too)."""
    from ..engine import journal, session

    if discard:
        from ..engine.lock import host_lock

        with host_lock(app.host, app.command, app.wait):
            found = journal.pending(app.host)
            if found is not None:
                journal.discard(app.host)
        lines = [f"discarded the journal of {found.command}"] if found else []
    elif app.dry_run:
        found = journal.pending(app.host)
        lines = [] if found is None else [f"would put back {plural(len(found.entries), 'change')} of {found.command}"]
    else:
        with session(app.env) as lines:
            pass

    def human() -> None:
        for line in lines or ["nothing to recover"]:
            say(line)

    emit(app, "recover", {"dry_run": app.dry_run, "changed": bool(lines) and not app.dry_run, "actions": lines}, human)
