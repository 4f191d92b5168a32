"""The options every command shares (``--json``, ``--dry-run`` after the command) and ``@mutating``
(the host lock and recovery around a command that changes the host)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from .context import App

F = TypeVar("F", bound=Callable[..., Any])


def mutating(fn: F) -> F:
    """Run a mutating command under the host lock, after repairing any interrupted command.

    Put it directly above the function (below ``@click.pass_obj``). Dry runs take no lock.
    """

    @functools.wraps(fn)
    def wrapper(app: App, *args: Any, **kwargs: Any) -> Any:
        with held(app):
            return fn(app, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@contextmanager
def held(app: App) -> Iterator[None]:
    """The host lock for the block, after repairing any interrupted command (said on stderr): what
    ``@mutating`` does, for a command that changes the host only with some options. Dry runs take none."""
    if app.dry_run:
        yield
        return
    from ..engine import session

    with session(app.env) as recovered:
        for line in recovered:
            sys.stderr.write(f"vgpukit: {line}\n")
        yield


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(App).json = True  # type: ignore[union-attr]


def _set_dry_run(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        app = ctx.find_object(App)
        assert app is not None
        app.dry_run = True
        if app._host is not None:
            app._host.dry_run = True


json_option = click.option(
    "--json",
    "json_",
    is_flag=True,
    expose_value=False,
    callback=_set_json,
    is_eager=True,
    help="Print one JSON document.",
)
dry_run_option = click.option(
    "--dry-run",
    "dry_run_",
    is_flag=True,
    expose_value=False,
    callback=_set_dry_run,
    is_eager=True,
    help="Show the plan, change nothing.",
)
