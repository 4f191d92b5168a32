"""``vgpukit units``: the systemd units and udev rule of ``templates/``, written with the path of the
vgpukit that runs the command (the installed entry point), never a guessed ``/usr/local/bin``.

The templates say ``@VGPUKIT@`` where the command goes (a copied template fails loudly: systemd
refuses a relative ``ExecStart=``). ``units install`` replaces it with the entry point found by
:func:`vgpukit.entrypoint.entry_point` (or ``--exec``) and writes each file through the change engine.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, say
from ..entrypoint import entry_point
from ..errors import InvalidInput, NotFound
from ..host import SYSTEMD_UNIT_DIR, UDEV_RULES_DIR

MARKER = "@VGPUKIT@"
DESTINATIONS = {"systemd": tuple(SYSTEMD_UNIT_DIR.split("/")[1:]), "udev": tuple(UDEV_RULES_DIR.split("/")[1:])}
_SAFE = re.compile(r"^/[A-Za-z0-9/._+@:-]*\Z", re.ASCII)  # needs no quoting or %-escaping in a unit


def _check(command: str) -> str:
    """``command`` as ExecStart's program: an absolute path of plain characters (no quoting or
    ``%``-escaping needed), alone or followed by ``-m vgpukit``."""
    words = command.split(" ")
    if not _SAFE.match(words[0]) or words[1:] not in ([], ["-m", "vgpukit"]):
        raise InvalidInput(
            f"cannot use {command!r} in a unit: it needs an absolute path of plain characters",
            value=command,
            hint="give one with --exec /usr/bin/vgpukit",
        )
    return command


def shipped() -> dict[str, Path]:
    """``systemd/NAME`` / ``udev/NAME`` -> the shipped template file."""
    from ..attach.templates import shipped_dirs

    out: dict[str, Path] = {}
    for base in reversed(shipped_dirs()):  # the package's own copy wins over a checkout's
        for kind in DESTINATIONS:
            for f in sorted((base / kind).glob("*")) if (base / kind).is_dir() else []:
                if f.is_file() and f.suffix in (".service", ".rules", ".timer"):
                    out[f"{kind}/{f.name}"] = f
    return out


def _destination(key: str) -> str:
    kind, fname = key.split("/")
    return "/" + "/".join((*DESTINATIONS[kind], fname))


def render(template: Path, command: str) -> str:
    return template.read_text().replace(MARKER, command)


@click.group(cls=LazyGroup)
def units() -> None:
    """systemd units and udev rules that run this vgpukit (mdev restore, QoS daemon)."""


@units.command("list")
@json_option
@click.pass_obj
def list_units(app: App) -> None:
    """The units and rules 'units install' writes, and where."""
    rows = [
        {"name": key, "path": "/" + "/".join((*DESTINATIONS[key.split("/")[0]], Path(key).name))} for key in shipped()
    ]

    def human() -> None:
        for row in rows:
            say(f"{row['name']:<40} {row['path']}")

    emit(app, "units-list", {"units": rows, "exec": " ".join(entry_point())}, human)


@units.command()
@click.argument("names", nargs=-1, metavar="[NAME...]")
@click.option("--exec", "command", metavar="FILE", help="The vgpukit the units run (default: this one).")
@json_option
@dry_run_option
@click.pass_obj
@mutating
def install(app: App, names: tuple[str, ...], command: str | None) -> None:
    """Write the units and rules (all, or NAME...: e.g. vgpukit-qos.service) under /etc, running this
    vgpukit by its absolute path. Then: systemctl daemon-reload; systemctl enable ..."""
    from ..engine import execute
    from ..engine.files import PutFile

    exe = _check(command if command is not None else " ".join(entry_point()))
    templates = shipped()
    by_name = {Path(k).name: k for k in templates}
    for n in names:
        if n not in by_name:
            raise NotFound(f"no unit or rule {n!r} ships with vgpukit", value=n, hint="see: vgpukit units list")
    keys = [by_name[n] for n in names] if names else list(templates)
    steps = []
    for key in keys:
        target, text = app.host.path(_destination(key).lstrip("/")), render(templates[key], exe)
        if app.host.read_raw_opt(target) != text:
            steps.append(PutFile(app.host.display(target), text))
    execute(app.env, steps)
    plan = [s.describe() for s in steps]

    def human() -> None:
        say(f"the units run: {exe}")
        if plan and not app.dry_run:
            say("next: systemctl daemon-reload && udevadm control --reload (then enable the units you use)")

    emit_result(app, "units-install", plan=plan, data={"exec": exe}, human=human)
