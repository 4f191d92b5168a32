"""What the ``vgpukit mdev`` commands share: parent names, mdevctl's ``-u``/``-p``/``-t`` options beside
vgpukit's positional arguments, and mdevctl's output mode (``vgpukit mdev --mdevctl``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..clikit.context import App
from ..clikit.params import NAME
from ..errors import InvalidInput
from . import sysfs

F = TypeVar("F", bound=Callable[..., Any])
MDEVCTL = "vgpukit.mdevctl-output"


def resolve_parent(app: App, name: str) -> str:
    """An mdev parent from its mdev_bus name (``mtty``, a BDF) or a device name (``gpu0``, short BDF)."""
    from .. import naming

    t = naming.resolve(app.host, name, frozenset({naming.PARENT}))
    assert t.parent is not None
    return t.parent


def definition_parent(app: App, name: str) -> str:
    """A parent for a definition: it may be absent now (a BDF or name), or named gpuN when present."""
    from .. import naming

    form = naming.form_of(name)
    if mdevctl_output() and name not in sysfs.parent_names(app.host):
        return name  # mdevctl's parent names are exact: 'Did you mean' (compat) says when only the case differs
    if name in sysfs.parent_names(app.host) or form == "alias":
        return resolve_parent(app, name)
    if form == "bdf":
        from ..pci import parse_bdf

        return parse_bdf(name)
    return name


def one_uuid(positional: str | None, option: str | None) -> str | None:
    """UUID given as vgpukit's argument or as mdevctl's ``-u/--uuid`` (the same one when both)."""
    if positional and option and positional.lower() != option.lower():
        raise InvalidInput("two different UUIDs given (argument and --uuid)")
    return positional or option


def mdevctl_output() -> bool:
    """Whether ``vgpukit mdev --mdevctl`` asked for mdevctl's own output."""
    return bool(click.get_current_context().meta.get(MDEVCTL))


def uuid_option(help_text: str) -> Callable[[F], F]:
    return click.option("-u", "--uuid", "uuid_opt", metavar="UUID", type=NAME, help=help_text)


def parent_option(help_text: str, dest: str = "parent") -> Callable[[F], F]:
    return click.option("-p", "--parent", dest, metavar="PARENT", type=NAME, help=help_text)


def type_option(help_text: str) -> Callable[[F], F]:
    return click.option("-t", "--type", "type_id", metavar="TYPE", type=NAME, help=help_text)


force_option = click.option(
    "--force", is_flag=True, help="Go on when a call-out script vetoes (as mdevctl's --force: the veto is logged)."
)


def jsonfile_option(help_text: str) -> Callable[[F], F]:
    return click.option("--jsonfile", metavar="FILE", type=click.Path(dir_okay=False), help=help_text)


def read_jsonfile(app: App, path: str) -> str:
    """A ``--jsonfile`` FILE (a regular file), or standard input for ``-`` and ``/dev/stdin``."""
    from ..host import STDIN_PATH
    from .mdevctl import MAX_DEFINITION_BYTES

    if path in ("-", STDIN_PATH):
        data = sys.stdin.buffer.read(MAX_DEFINITION_BYTES + 1)
        if len(data) > MAX_DEFINITION_BYTES:
            raise InvalidInput(f"--jsonfile {path}: larger than {MAX_DEFINITION_BYTES} bytes")
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise InvalidInput(f"--jsonfile {path}: not UTF-8 text") from None
    return app.host.read_doc(path, "--jsonfile", MAX_DEFINITION_BYTES, user_file=True) or ""


def report(
    app: App,
    kind: str,
    plan: list[str],
    data: dict[str, Any] | None = None,
    human: Callable[[], None] | None = None,
    new_uuid: str | None = None,
) -> None:
    """A mutating command's outcome: vgpukit's (emit_result), or mdevctl's (the UUID it made up, if
    any, else nothing) under ``--mdevctl``."""
    from ..clikit.output import emit_result

    if mdevctl_output() and not app.json and not app.dry_run:
        if new_uuid:
            click.echo(new_uuid)
        return
    emit_result(app, kind, plan=plan, data=data, human=human)
