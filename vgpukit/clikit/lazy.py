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

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, with its "Did you mean" over the listed commands (click's own sees only ``commands``)."""
        name = args[0]
        if not ctx.resilient_parsing and not name.startswith("-") and self.get_command(ctx, name) is None:
            from difflib import get_close_matches

            close = get_close_matches(name, self.list_commands(ctx))
            hint = f" Did you mean {close[0]!r}?" if len(close) == 1 else f" (Possible commands: {', '.join(close)})"
            ctx.fail(f"No such command {name!r}." + (hint if close else ""))
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        shown: list[tuple[str, str | click.Command]] = []  # a listed help text, or the command to ask
        for name in self.list_commands(ctx):
            text = self.lazy[name][2] if name in self.lazy else ""
            cmd = None if text else self.get_command(ctx, name)
            if text or (cmd is not None and not cmd.hidden):
                shown.append((name, text or cmd))  # type: ignore[arg-type]
        if shown:
            # a command's first sentence whole (wrapped), never cut with "..." (short_help where it is long)
            rows = [(n, t if isinstance(t, str) else t.get_short_help_str(10**4)) for n, t in shown]
            with formatter.section("Commands"):
                formatter.write_dl(rows)
