"""The help of the whole command tree follows one style (CONTRIBUTING.md, "Help text"): every command
and option has help, listings never cut a summary with "...", metavars say what the value is in upper
case (never click's type names), defaults are shown one way."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click

from vgpukit.cli.main import cli

TYPE_NAMES = {"TEXT", "INTEGER", "FLOAT", "NUMBER", "PATH", "FILENAME", "DIRECTORY", "BOOLEAN", "NAME_"}
METAVAR = re.compile(r"^(\[?[A-Z][A-Z0-9_]*(\[[=,.A-Z0-9_]+\])*\]?(\.\.\.)?( |$))+$|^[\[{][^\]}]+[\]}](\.\.\.)?$")


def commands() -> Iterator[tuple[str, click.Command, click.Context]]:
    def walk(cmd: click.Command, ctx: click.Context, path: str) -> Iterator[tuple[str, click.Command, click.Context]]:
        yield path, cmd, ctx
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, f"{path} {name}"
                yield from walk(sub, click.Context(sub, info_name=name, parent=ctx), f"{path} {name}")

    # with the group's context settings (-h), as the command itself runs: click remembers a command's
    # help option, so a bare context here would change what later help (and the man page) shows
    root = cli.make_context("vgpukit", [], resilient_parsing=True)
    root.terminal_width = 80  # the listings a default terminal shows
    yield from walk(cli, root, "vgpukit")


def test_every_command_and_option_has_help() -> None:
    missing = []
    for path, cmd, _ in commands():
        if not (cmd.help or cmd.short_help):
            missing.append(path)
        missing += [f"{path} {p.opts[0]}" for p in cmd.params if isinstance(p, click.Option) and not p.help]
    assert missing == []


def test_listings_never_cut_a_summary() -> None:
    cut = []
    for path, cmd, ctx in commands():
        if not isinstance(cmd, click.Group):
            continue
        listing = cmd.get_help(ctx).split("\nCommands:\n", 1)
        assert len(listing) == 2, path
        cut += [f"{path}: {line.strip()}" for line in listing[1].splitlines() if line.rstrip().endswith("...")]
    assert cut == []


def test_metavars_name_the_value_in_one_style() -> None:
    bad = []
    for path, cmd, ctx in commands():
        for p in cmd.params:
            if isinstance(p, click.Option) and (p.is_flag or p.count or p.hidden):
                continue
            metavar = p.make_metavar(ctx)
            words = set(re.findall(r"[A-Za-z_]+", metavar)) if not metavar.startswith(("[", "{")) else set()
            if not METAVAR.match(metavar) or words & TYPE_NAMES:
                bad.append(f"{path} {p.opts[0]}: {metavar}")
    assert bad == []


def test_defaults_are_shown_one_way() -> None:
    """A default value is click's ``[default: X]`` (show_default); where the option's absence means
    something else, the help says ``(default: ...)`` -- never both, never another spelling."""
    bad = []
    for path, cmd, _ in commands():
        for p in cmd.params:
            if not isinstance(p, click.Option) or not p.help:
                continue
            text = p.help
            if re.search(r"\(default [^)]|\bDefault:|default is\b", text):
                bad.append(f"{path} {p.opts[0]}: another spelling: {text}")
            if p.show_default and "(default" in text:
                bad.append(f"{path} {p.opts[0]}: shown twice: {text}")
    assert bad == []
