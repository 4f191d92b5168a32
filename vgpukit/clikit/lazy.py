"""A click group whose commands are imported only when one is run: start-up stays fast, and a host
without an optional extra (libvirt, NVML) still runs everything else."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import click


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class LazyGroup(click.Group):
    """A group whose listed commands are imported only when one is run (or asked for help): ``lazy``
    maps a name to (module, attribute, one-line help); an empty help is taken from the command itself
    when a listing needs it. Listed commands whose module is not installed are hidden. Commands added
    the usual way (``@group.command``) live beside them."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = [name for name, (mod, _, _) in self.lazy.items() if _available(mod)]
        return sorted({*names, *self.commands}) if self.commands else names

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        entry = self.lazy.get(cmd_name)
        if entry is None or not _available(entry[0]):
            return None
        module = importlib.import_module(entry[0])
        cmd = getattr(module, entry[1])
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        shown: list[tuple[str, str | click.Command]] = []  # a listed help text, or the command to ask
        for name in self.list_commands(ctx):
            text = self.lazy[name][2] if name in self.lazy else ""
            cmd = None if text else self.get_command(ctx, name)
            if text or (cmd is not None and not cmd.hidden):
                shown.append((name, text or cmd))  # type: ignore[arg-type]
        if shown:
            limit = formatter.width - 6 - max(len(name) for name, _ in shown)  # as click's own listing
            rows = [(n, t if isinstance(t, str) else t.get_short_help_str(limit)) for n, t in shown]
            with formatter.section("Commands"):
                formatter.write_dl(rows)
