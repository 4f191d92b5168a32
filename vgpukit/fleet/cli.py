"""``vgpukit apply / diff / assert / export / boot-unit``: one declarative host config (docs/fleet.md)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from ..clikit.context import App
from ..clikit.options import dry_run_option, json_option, mutating
from ..clikit.output import emit, emit_result, fail_after_emit, finish_read, say
from ..clikit.params import NAME
from ..engine import execute
from ..errors import InvalidInput, NotFound, Unsupported, VerifyFailed, VgpukitError
from ..exclusion import skipped_doc
from ..partial import Unread, as_json
from ..pci import Scan
from . import document, export, plan

FILE_ENV, CONFIG_ENV = "VGPUKIT_HOST_FILE", "VGPUKIT_HOST_CONFIG"

file_option = click.option(
    "-f",
    "--file",
    "path",
    required=True,
    envvar=FILE_ENV,
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"The vgpukit.host/v1 (or mig-parted v1) file (env {FILE_ENV}).",
)
config_option = click.option(
    "-c", "--config", "name", envvar=CONFIG_ENV, type=NAME, help=f"Config name in the file (env {CONFIG_ENV})."
)


strict_option = click.option(
    "--strict",
    is_flag=True,
    envvar=["VGPUKIT_STRICT"],
    help="Refuse (exit 2) what mig-parted accepts silently in a mig-configs section and vgpukit otherwise "
    "warns about (docs/mig.md, leniency). Env: VGPUKIT_STRICT.",
)


def _plan(app: App, path: Path, name: str | None, strict: bool) -> tuple[document.HostConfig, plan.Plan]:
    cfg = _select(app, path, name, strict)
    todo = plan.plan(app.env, cfg)
    for w in todo.warnings:
        sys.stderr.write(f"vgpukit: warning: {w}\n")
    return cfg, todo


def _select(app: App, path: Path, name: str | None, strict: bool) -> document.HostConfig:
    """The selected config; the file's warnings shown once on stderr (--strict: refused)."""
    text = app.host.read_doc(path, "host config", document.MAX_DOC_BYTES, user_file=True)
    assert text is not None
    cfg = document.parse(text, str(path)).select(name, strict)
    for w in cfg.warnings:
        sys.stderr.write(f"vgpukit: warning: {w}\n")
    return cfg


def _head(path: Path, cfg: document.HostConfig, todo: plan.Plan | None = None) -> dict[str, Any]:
    return {"file": str(path), "config": cfg.name, "warnings": cfg.warnings + (todo.warnings if todo else [])}


@click.command("apply")
@file_option
@config_option
@strict_option
@json_option
@dry_run_option
@click.pass_obj
@mutating
def apply_cmd(app: App, path: Path, name: str | None, strict: bool) -> None:
    """Make the host match config NAME of FILE: every area in one plan, rolled back as a whole on failure.

    Devices the config does not mention are left alone. A second run does nothing. Exit codes and
    --json output: docs/fleet.md.
    """
    cfg, todo = _plan(app, path, name, strict)
    if not app.dry_run and todo.plain:
        execute(app.env, todo.plain)
    emit_result(
        app,
        "apply",
        plan=[s.describe() for s in todo.plain],
        data={**_head(path, cfg, todo), **_rest(todo)},
        summary=_by_area(todo),
    )
    _left_alone(app, todo)


def _by_area(todo: plan.Plan) -> list[str]:
    """A few lines per area: its steps, those alike folded into one (``-v`` lists each)."""
    from ..words import condense, plural

    out = []
    for area in plan.AREAS:
        mine = [s.describe() for a, s in todo.ordered if a == area]
        if mine:
            out += [f"{area}: {plural(len(mine), 'step')}"] + [f"  {line}" for line in condense(mine)]
    return out


def _left_alone(app: App, todo: plan.Plan) -> None:
    """A device the config names that is left alone (unusable): everything else was done; exit 6 with
    its refusal (docs/fleet.md, "Exit codes")."""
    if todo.skipped:
        from ..exclusion import outcome

        fail_after_emit(app, outcome([err for _, _, err in todo.skipped]))


def _rest(todo: plan.Plan) -> dict[str, Any]:
    doc = todo.to_json()
    del doc["plan"]
    return doc


@click.command("diff")
@file_option
@config_option
@strict_option
@json_option
@click.pass_obj
def diff_cmd(app: App, path: Path, name: str | None, strict: bool) -> None:
    """Show what 'apply' would change (the plan), changing nothing; exit 0 either way."""
    cfg, todo = _plan(app, path, name, strict)
    doc = {**_head(path, cfg, todo), "dry_run": True, "changed": False, **todo.to_json()}
    emit(app, "diff", doc, lambda: _show(app, doc["plan"], doc["skipped"]))
    _left_alone(app, todo)


def _show(app: App, lines: list[str], skipped: list[dict[str, Any]] | None = None) -> None:
    """Every difference with -v; else those alike folded into one."""
    from ..words import condense, plural

    if not lines and not skipped:
        say("no differences: the host matches the config", "green")
        return
    if not app.verbose and lines:
        say(f"{plural(len(lines), 'difference')} (-v lists them):")
        lines = condense(lines)
    for line in lines:
        say(f"  - {line}")
    for left in skipped or []:
        say(f"  left alone: {left['message']}")


@click.command("assert")
@file_option
@config_option
@strict_option
@json_option
@click.pass_obj
def assert_cmd(app: App, path: Path, name: str | None, strict: bool) -> None:
    """Exit 0 when the host matches the config, 1 (listing the differences) otherwise."""
    cfg = _select(app, path, name, strict)
    todo: plan.Plan | None = None
    try:
        todo = plan.plan(app.env, cfg)
        for w in todo.warnings:
            sys.stderr.write(f"vgpukit: warning: {w}\n")
        diff = [s.describe() for s in todo.plain]
    except (InvalidInput, NotFound):
        raise
    except VgpukitError as exc:  # cannot even be planned from here (in use, unsupported...): no match
        diff = [f"cannot be applied: {exc}"]
    left = [skipped_doc(area, device, err) for area, device, err in todo.skipped] if todo else []
    diff += [f"left alone: {s['message']}" for s in left]  # apply would leave it: the host cannot match
    doc = {**_head(path, cfg, todo), "matches": not diff, "differences": diff, "skipped": left}
    emit(app, "assert", doc, lambda: say("the host matches the config", "green") if not diff else _show(app, diff))
    if diff:
        fail_after_emit(app, VerifyFailed(f"the host does not match {path}" + (f" -c {cfg.name}" if cfg.name else "")))


@click.command("export")
@click.option("-c", "--config", "name", default="current", show_default=True, type=NAME, help="Config name to write.")
@json_option
@click.pass_obj
def export_cmd(app: App, name: str) -> None:
    """Print the host as a vgpukit.host/v1 document (SR-IOV, vfio, mdev, vGPU, MIG, QoS); applying it is a no-op."""
    unread: list[Unread] = []  # a GPU NVML cannot answer for: left out of the document, named, exit 6
    left_out: list[str] = []  # what a document cannot carry (QoS tenants named by process ids)
    doc = export.current(app.host, name, lambda: _mig_export(app, unread), left_out)
    text = export.dump(doc, left_out)
    if unread:
        from ..mig.cli_config import not_read_comment

        text = not_read_comment(unread) + text
    for line in left_out:
        sys.stderr.write(f"vgpukit: warning: {line}\n")
    data = {"config": name, "yaml": text, "document": doc, "unreadable": as_json(unread), "warnings": left_out}
    emit(app, "export", data, lambda: click.echo(text, nl=False))
    finish_read(app, unread)


def _mig_export(app: App, unread: list[Unread]) -> list[dict[str, Any]] | None:
    """mig-parted's export of this host (vgpukit mig export's own), when it has a MIG-capable GPU (or a
    lost GPU, which may be one)."""
    from ..mig.cli_common import nvml_of
    from ..mig.migparted import export_entries

    try:
        nvml = nvml_of(app)
    except Unsupported:
        return None
    if not any(g.mig_capable or g.lost for g in nvml.gpus()):
        return None
    return export_entries(Scan(app.host), nvml, unread)


# ----------------------------------------------------------------------------- boot unit
BOOT_UNIT = """\
# Generated by: vgpukit boot-unit. Applies the node's host config early at boot (docs/fleet.md).
[Unit]
Description=Apply the vgpukit host config ({config})
Documentation=man:vgpukit(1)
# after the kernel modules and the devices (GPU drivers, vfio-pci) are there
After=systemd-modules-load.service systemd-udev-settle.service local-fs.target nvidia-persistenced.service
Wants=systemd-udev-settle.service
# before anything that hands the devices out
Before=libvirtd.service virtqemud.service kubelet.service containerd.service crio.service docker.service
Before=vgpukit-qos.service nvidia-mig-manager.service
ConditionPathExists={file}

[Service]
Type=oneshot
RemainAfterExit=yes
Environment=VGPUKIT_WAIT=300
ExecStart={exe} apply -f {file}{c}
# exit 6: a device the health layer finds unusable was left alone, everything else applied: the node
# comes up (libvirtd and the kubelet start); vgpukit health and this unit's journal name the device
SuccessExitStatus=6

[Install]
WantedBy=multi-user.target
RequiredBy=libvirtd.service kubelet.service
"""


def entry_point() -> str:
    """The installed ``vgpukit`` command (absolute), else this Python running the package."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "vgpukit" and os.path.isfile(argv0):
        return os.path.abspath(argv0)
    found = shutil.which("vgpukit")
    return found or f"{sys.executable} -m vgpukit"


@click.command("boot-unit")
@file_option
@config_option
@click.pass_obj
def boot_unit_cmd(app: App, path: Path, name: str | None) -> None:
    """Print a systemd unit that runs 'vgpukit apply -f FILE -c NAME' at boot, before libvirt and kubelet."""
    for part in (str(path), name or ""):
        if any(c.isspace() or c in "\"'\\%$;" for c in part):
            raise InvalidInput("the file path and config name of a boot unit must not contain spaces or quotes")
    file = os.path.abspath(path)
    c = f" -c {shlex.quote(name)}" if name else ""
    click.echo(BOOT_UNIT.format(config=name or "the only config", file=file, exe=entry_point(), c=c), nl=False)
