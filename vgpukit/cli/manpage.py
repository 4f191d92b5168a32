"""Generate ``vgpukit(1)`` from the commands' own help (roff, man(7) macros).

``python -m vgpukit.cli.manpage > docs/man/vgpukit.1``; a test keeps the shipped page current.
Install: ``install -m 644 docs/man/vgpukit.1 /usr/local/share/man/man1/``.
"""

from __future__ import annotations

import sys

import click


def _esc(text: str) -> str:
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in out.splitlines())


def _params(ctx: click.Context, cmd: click.Command) -> list[str]:
    lines: list[str] = []
    for p in cmd.get_params(ctx):
        rec = p.get_help_record(ctx) if isinstance(p, click.Option) else None
        if rec is None:
            continue
        lines += [".TP", f"\\fB{_esc(rec[0])}\\fR", _esc(rec[1]) or "\\&"]
    return lines


def _command(ctx: click.Context, path: str, cmd: click.Command, out: list[str]) -> None:
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    out += [".SS " + _esc(f"{path} {usage}".strip())]
    text = (cmd.help or cmd.short_help or "").strip()
    if text:
        out += [_esc(" ".join(para.split())) + "\n.PP" for para in text.split("\n\n")]
        out[-1] = out[-1].removesuffix("\n.PP")
    out += _params(ctx, cmd)
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                _command(click.Context(sub, info_name=name, parent=ctx), f"{path} {name}", sub, out)


def render() -> str:
    from importlib.metadata import version

    from .main import cli

    ctx = cli.make_context("vgpukit", [], resilient_parsing=True)  # with the group's context settings (-h)
    out = [
        f'.TH VGPUKIT 1 "" "vgpukit {version("vgpukit")}" "User Commands"',
        ".SH NAME",
        "vgpukit \\- carve GPUs and PCIe devices into VFs, mdevs, vGPUs and MIG slices",
        ".SH SYNOPSIS",
        "\\fBvgpukit\\fR [\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        _esc(" ".join((cli.help or "").split())),
        ".SH GLOBAL OPTIONS",
        *_params(ctx, cli),
        ".SH COMMANDS",
    ]
    assert isinstance(cli, click.Group)
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        if cmd is not None and not cmd.hidden:
            _command(click.Context(cmd, info_name=name, parent=ctx), f"vgpukit {name}", cmd, out)
    out += [
        ".SH EXIT STATUS",
        "0 success (also: nothing to do); 1 failed; 2 bad input or usage; 3 not found;",
        "4 busy, conflicting, no capacity, or the host lock is held; 5 unsupported.",
        ".SH ENVIRONMENT",
        ".TP\nVGPUKIT_ROOT\nhost root (as \\-\\-root)",
        ".TP\nVGPUKIT_SIM\nsimulated host directory (as \\-\\-sim)",
        ".TP\nVGPUKIT_WAIT\nseconds to wait for the host lock (as \\-\\-wait)",
        ".SH FILES",
        ".TP\n/run/vgpukit/lock, /run/vgpukit/journal\nthe host lock and the intent journal",
        ".TP\n/run/vgpukit/bind/\noriginal drivers of devices vgpukit moved",
        ".TP\n/etc/mdevctl.d/\npersistent mdev definitions (mdevctl's format)",
        ".TP\n/etc/vgpukit/\nconfiguration (qos.yaml, template overrides)",
    ]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
