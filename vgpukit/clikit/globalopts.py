"""The global options (``--json``, ``--dry-run``, ``--debug``, ``-v``, ``--root``, ``--sim``, ``--wait``) are
accepted anywhere on the command line, before or after the command: ``vgpukit recover --dry-run`` is
``vgpukit --dry-run recover``.

:func:`hoist` moves each global option given after the command (and its value) in front of it, where
the ``vgpukit`` group parses it, unless the command (or a group on the way) defines an option of the
same name itself (``--json``, ``--dry-run`` on many commands: theirs, which do the same). Arguments
after ``--`` and option values are never moved (``--name --json`` keeps ``--json`` as the name).
"""

from __future__ import annotations

import click

# the global options -> whether each takes a value
GLOBAL: dict[str, bool] = {
    "--json": False,
    "--dry-run": False,
    "--debug": False,
    "-v": False,
    "--verbose": False,
    "--root": True,
    "--sim": True,
    "--wait": True,
}


def _takes_value(cmd: click.Command, name: str) -> bool | None:
    """None: ``cmd`` has no option ``name``; else whether it takes a value (its declared options only:
    ``get_params`` would make, and cache, its help option in a context without the group's settings)."""
    for p in cmd.params:
        if isinstance(p, click.Option) and name in (*p.opts, *p.secondary_opts):
            return not (p.is_flag or p.count) and name not in p.secondary_opts
    return None


def hoist(group: click.Group, args: list[str]) -> list[str]:
    """``args`` with every global option given after the command moved before it (order kept)."""
    front: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":  # the global options given first
        name = args[i].partition("=")[0]
        takes = GLOBAL.get(name, False) and "=" not in args[i]
        front += args[i : i + 1 + int(takes)]
        i += 1 + int(takes)
    if i >= len(args) or args[i] == "--":
        return args
    moved: list[str] = []
    rest: list[str] = []
    cmd: click.Command | None = group
    ctx = click.Context(group, resilient_parsing=True, **group.context_settings)
    sub_expected = True  # the next plain word names a command of ``cmd`` (a group)
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        if arg.startswith("-") and len(arg) > 1:
            name = arg.partition("=")[0]
            own = _takes_value(cmd, name) if cmd is not None else None
            if own is None and name in GLOBAL:
                n = 1 + int(GLOBAL[name] and "=" not in arg)
                moved += args[i : i + n]
                i += n
                continue
            n = 1 + int(bool(own) and "=" not in arg)
            rest += args[i : i + n]
            i += n
            continue
        rest.append(arg)
        i += 1
        if sub_expected and isinstance(cmd, click.Group):
            try:
                cmd = cmd.get_command(ctx, arg)
            except Exception:  # an unknown or broken command: click reports it as it parses
                cmd = None
            sub_expected = isinstance(cmd, click.Group)
        else:
            sub_expected = False
    return front + moved + rest if moved else args
