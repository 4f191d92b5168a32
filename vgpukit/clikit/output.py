"""Output conventions shared by every command.

* ``--json``: one JSON document on stdout, ``{"schema": "vgpukit.<kind>/v1", ...}``.
* a terminal: rich tables and trees; a pipe: plain aligned text, no colour, no box drawing.
* mutating commands: :func:`emit_result` shows the plan (``--dry-run``) or what was changed: a
  summary when the command has one (a line per GPU, per PF...), every step with ``-v``; the JSON
  document always lists every step (``plan``) next to the command's summary fields.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ..errors import VgpukitError
from .context import App

if TYPE_CHECKING:
    from ..partial import Unread

SCHEMA_VERSION = 1


def is_tty() -> bool:
    return sys.stdout.isatty()


def console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def json_doc(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"schema": f"vgpukit.{kind}/v{SCHEMA_VERSION}", **data}


def print_json(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")


def emit(app: App, kind: str, data: dict[str, Any] | Callable[[], dict[str, Any]], human: Callable[[], None]) -> None:
    """Print ``data`` as JSON under --json, else call the human renderer.

    ``data`` may be a function building the document, so a human listing never pays for it.
    """
    if app.json:
        print_json(json_doc(kind, data() if callable(data) else data))
    else:
        human()


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table on a terminal; tab-free aligned plain text in a pipe."""
    cells = [["-" if c is None or c == "" else str(c) for c in row] for row in rows]
    if is_tty():
        from rich.table import Table

        t = Table(title=title, title_justify="left", header_style="bold")
        for col in columns:
            t.add_column(col)
        for row in cells:
            t.add_row(*row)
        console().print(t)
        return
    if title:
        print(title)
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=False)).rstrip())
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def say(text: str, style: str | None = None) -> None:
    """One human line (styled on a terminal), written at once (a long-running command's first line
    reaches a pipe, a container's log, before it waits)."""
    if is_tty() and style:
        console().print(text, style=style)
    else:
        print(text, flush=True)


def emit_result(
    app: App,
    kind: str,
    *,
    plan: Sequence[str],
    data: dict[str, Any] | None = None,
    human: Callable[[], None] | None = None,
    summary: Sequence[str] | None = None,
) -> None:
    """Report a mutating command: its plan (dry run) or its outcome.

    ``plan`` lists the steps in words; an empty plan means the host already matched the request.
    ``summary``: the lines shown instead of the steps and ``human`` unless ``-v`` (a line per device).
    """
    doc = {"dry_run": app.dry_run, "changed": bool(plan) and not app.dry_run, "plan": list(plan), **(data or {})}
    if app.json:
        print_json(json_doc(kind, doc))
        return
    skipped = (data or {}).get("skipped") or []
    brief = summary is not None and not app.verbose
    if brief:
        _summarize(app, plan, summary or [], bool(skipped))
    elif not plan:
        _nothing(bool(skipped))
    elif app.dry_run:
        say("dry run, nothing changed. Plan:", "bold")
        for step in plan:
            say(f"  - {step}")
    elif is_tty():
        for step in plan:
            say(f"done: {step}", "green")
    else:  # a pipe: every line in one write
        sys.stdout.write("".join(f"done: {step}\n" for step in plan))
    for left in skipped:  # a config door's devices left alone (exit 6 follows)
        say(f"left alone: {left['message']}", "yellow")
    if human is not None and not brief:
        human()


SHORT_PLAN = 3  # a plan this short is listed step by step above the summary


def _nothing(skipped: bool) -> None:
    if skipped:
        say("nothing else to do: every device not left alone already matches the request")
    else:
        say("nothing to do: the host already matches the request", "green")


def _summarize(app: App, plan: Sequence[str], summary: Sequence[str], skipped: bool) -> None:
    """The summary lines under a head line; the steps themselves when there are only a few."""
    from ..words import plural

    short = len(plan) <= SHORT_PLAN
    lines = [f"  - {step}" for step in plan] if app.dry_run and short else []
    if not plan:
        _nothing(skipped)
    elif app.dry_run:
        say(
            "dry run, nothing changed. Plan:" + ("" if short else f" {plural(len(plan), 'step')} (-v lists them)"),
            "bold",
        )
    elif short:
        lines = [f"done: {step}" for step in plan]
    else:
        say(f"done: {plural(len(plan), 'step')} (-v lists them)", "green")
    indent = "  " if app.dry_run and plan else ""
    lines += [indent + text for text in summary]
    if is_tty():
        for text in lines:
            say(text)
    else:  # a pipe: every line in one write
        sys.stdout.write("".join(f"{text}\n" for text in lines))


def finish_read(app: App, unread: Sequence[Unread], alone: bool = False) -> None:
    """End a whole-host read that printed its document: exit 6 (one line naming what it could not read)
    when devices were left out (docs/health.md, "One bad device"); nothing when it read them all.
    ``alone``: the read was of the one device named (no "everything else is shown")."""
    if unread:
        from ..partial import error

        fail_after_emit(app, error(list(unread), alone))


def fail_after_emit(app: App, err: VgpukitError) -> NoReturn:
    """Fail a command that already printed its document: under --json that stays the only document
    on stdout (the error goes to stderr and the exit code), otherwise the error is raised as usual."""
    if app.json:
        sys.stderr.write(f"vgpukit: error: {err}\n")
        raise click.exceptions.Exit(err.exit_code)
    raise err
