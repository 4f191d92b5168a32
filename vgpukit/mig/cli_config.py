"""``mig apply / assert / export / service``: mig-parted v1 configs, applied idempotently.

The file and config come from ``-f``/``-c``, else ``VGPUKIT_MIG_CONFIG_FILE`` /
``VGPUKIT_MIG_SELECTED_CONFIG``, else mig-parted's ``MIG_PARTED_CONFIG_FILE`` /
``MIG_PARTED_SELECTED_CONFIG`` (likewise the hooks file, ``--mode-only`` and ``--skip-reset``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ..clikit import userfile
from ..clikit.context import App
from ..clikit.options import dry_run_option, json_option
from ..clikit.output import emit, fail_after_emit, finish_read, say
from ..clikit.params import NAME
from ..engine import execute, session
from ..engine.files import PutFile
from ..entrypoint import entry_point
from ..errors import DeviceUnusable, InvalidInput, NotFound, Unsupported, VerifyFailed, VgpukitError
from ..exclusion import skipped_doc
from ..partial import Unread, as_json
from ..pci import Scan
from . import config, hooks, layout, migparted, service
from .cli_common import aliases, nvml_of, report_plans
from .config import select


def _env(*names: str) -> list[str]:
    return [f"VGPUKIT_MIG_{n}" for n in names] + [f"MIG_PARTED_{n}" for n in names]


file_option = click.option(
    "-f",
    "--config-file",
    "--file",
    "path",
    envvar=_env("CONFIG_FILE"),
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="mig-parted v1 config ('-' reads stdin). Env: VGPUKIT_MIG_CONFIG_FILE, MIG_PARTED_CONFIG_FILE.",
)
config_option = click.option(
    "-c",
    "--selected-config",
    "--config",
    "name",
    envvar=_env("SELECTED_CONFIG"),
    type=NAME,
    help="Config name under mig-configs (needed when there are several). "
    "Env: VGPUKIT_MIG_SELECTED_CONFIG, MIG_PARTED_SELECTED_CONFIG.",
)
mode_only_option = click.option(
    "-m",
    "--mode-only",
    is_flag=True,
    envvar=_env("MODE_CHANGE_ONLY"),
    help="Only the MIG mode of each GPU, not its MIG devices. Env: MIG_PARTED_MODE_CHANGE_ONLY.",
)


strict_option = click.option(
    "--strict",
    is_flag=True,
    envvar=["VGPUKIT_MIG_STRICT"],
    help="Refuse (exit 2) what mig-parted accepts silently and vgpukit otherwise warns about "
    "(docs/mig.md, leniency). Env: VGPUKIT_MIG_STRICT.",
)


def warn(app: App, warnings: list[str]) -> None:
    """One line on stderr per warning (also under --json, where the document lists them too)."""
    for w in warnings:
        sys.stderr.write(f"vgpukit: warning: {w}\n")


def _load(
    app: App, path: Path | None, name: str | None, strict: bool = False
) -> tuple[str, str, list[config.Entry], list[str]]:
    """(source, selected name, its entries, the warnings about the file); --strict refuses a warning."""
    if path is None:
        raise InvalidInput(
            "no config file: give -f FILE", hint="or set VGPUKIT_MIG_CONFIG_FILE (mig-parted: MIG_PARTED_CONFIG_FILE)"
        )
    source = userfile.source(path)
    text = userfile.read(app, path, "mig-parted config", config.MAX_CONFIG_BYTES)
    parsed = config.parse_file(text, source)
    chosen, entries = select(parsed.configs, name, source)
    return source, chosen, entries, config.screen(parsed.notes, chosen, strict)


def _host_warnings(app: App, source: str, chosen: str, entries: list[config.Entry], strict: bool) -> list[str]:
    """The warnings about this host (indices no GPU has), after the file's."""
    found = migparted.host_notes(nvml_of(app).gpus(), entries, source, chosen)
    migparted.strict(found, strict)
    return found


@click.command("apply")
@file_option
@config_option
@click.option(
    "-k",
    "--hooks-file",
    "hooks_path",
    envvar=_env("HOOKS_FILE"),
    type=click.Path(dir_okay=False, path_type=Path),
    help="mig-parted hooks file (apply-start, pre-apply-mode, pre-apply-config, apply-exit, ...). "
    "Env: VGPUKIT_MIG_HOOKS_FILE, MIG_PARTED_HOOKS_FILE.",
)
@mode_only_option
@strict_option
@click.option(
    "-s",
    "--skip-reset",
    is_flag=True,
    envvar=_env("SKIP_RESET"),
    help="Make MIG mode changes but leave them pending instead of resetting GPUs (with --mode-only). "
    "Env: MIG_PARTED_SKIP_RESET.",
)
@click.option(
    "--reset/--no-reset",
    default=None,
    help="Reset GPUs whose MIG mode change needs it (Ampere; default: only GPUs with no process on them); "
    "--no-reset refuses instead.",
)
@json_option
@dry_run_option
@click.pass_obj
def apply_cmd(
    app: App,
    path: Path | None,
    name: str | None,
    hooks_path: Path | None,
    mode_only: bool,
    strict: bool,
    skip_reset: bool,
    reset: bool | None,
) -> None:
    """Apply a mig-parted v1 config; instances that already match are kept (a second run does nothing)."""
    source, chosen, entries, warnings = _load(app, path, name, strict)
    warnings += _host_warnings(app, source, chosen, entries, strict)
    warn(app, warnings)
    head: dict[str, Any] = {"config": chosen, "warnings": warnings, "skipped": []}
    hk = hooks.Hooks()
    if hooks_path is not None:
        hk = hooks.parse(
            app.host.read_doc(hooks_path, "hooks file", hooks.MAX_HOOKS_BYTES, user_file=True) or "", str(hooks_path)
        )
    nvml = nvml_of(app)
    scan = Scan(app.host)
    opts: dict[str, Any] = {"mode_only": mode_only, "skip_reset": skip_reset}  # the planner reads health
    allow = reset is not False
    left: list[DeviceUnusable] = []  # GPUs left alone (unusable): the rest is applied, then exit 6

    def plan() -> list[layout.GpuPlan]:
        skipped: list[DeviceUnusable] = []
        plans = migparted.build_plans(scan, nvml, entries, source, allow, **opts, skipped=skipped)
        left[:] = skipped
        names = aliases(scan)
        head["skipped"] = [skipped_doc("mig", names.get(err.device or "", err.device or ""), err) for err in skipped]
        return plans

    if app.dry_run:
        dry = plan()
        report_plans(app, "mig-apply", dry, [s for p in dry for s in p.steps], head, scan=scan)
        _left_alone(app, left)
        return
    if hk.by_name:  # without hooks the plan made under the lock is the only one needed
        try:  # bad input fails before any hook runs; busy/capacity may change once the hooks ran
            plan()
        except (InvalidInput, NotFound, Unsupported):  # bad input: before any hook
            raise
        except VgpukitError:
            pass
    env = hooks.environment(_abs(source), chosen, str(hooks_path or ""), skip_reset, mode_only, _host_env(app))
    show = app.debug
    done: list[Any] = []
    plans: list[layout.GpuPlan] = []
    phased = bool(hk.by_name.get("post-apply-mode") or hk.by_name.get("pre-apply-config"))
    hk.run("apply-start", env, show)
    try:
        together = False  # no hook between the phases: one transaction (all rolled back on failure)
        if migparted.assert_config(scan, nvml, entries, source, mode_only=True, skip_unusable=True):
            hk.run("pre-apply-mode", env, show)
            together = not (mode_only or phased)
            plans, steps = _phase(app, plan, not together)
            done += steps
            hk.run("post-apply-mode", env, show)
            if together and migparted.split_phases(plans)[1]:
                hk.run("post-apply-config", env, show)
        if not (mode_only or together) and migparted.assert_config(scan, nvml, entries, source, skip_unusable=True):
            hk.run("pre-apply-config", env, show)
            plans, steps = _phase(app, plan, False)
            done += steps
            hk.run("post-apply-config", env, show)
    except BaseException:
        try:
            hk.run("apply-exit", env, show)
        except hooks.HookFailed as exc:
            sys.stderr.write(f"vgpukit: {exc.message}\n")
        raise
    hk.run("apply-exit", env, show)
    if not plans:  # nothing differed: report the selected GPUs as they are
        try:
            plans = plan()
        except VgpukitError:
            plans = []
    report_plans(app, "mig-apply", plans, done, head, scan=scan)
    _left_alone(app, left)


def _left_alone(app: App, left: list[DeviceUnusable]) -> None:
    """After the report: exit 6 naming the GPUs left alone (every other GPU was applied)."""
    if left:
        from ..exclusion import outcome

        fail_after_emit(app, outcome(left))


def _phase(app: App, plan: Any, mode_phase: bool) -> tuple[list[layout.GpuPlan], list[Any]]:
    """Plan under the host lock (after the hooks ran) and apply: the mode phase only, or everything."""
    with session(app.env) as recovered:
        for line in recovered:
            sys.stderr.write(f"vgpukit: {line}\n")
        plans = plan()
        steps = migparted.split_phases(plans)[0] if mode_phase else [s for p in plans for s in p.steps]
        if steps:
            execute(app.env, steps)
    return plans, steps


def _host_env(app: App) -> dict[str, str]:
    if app.sim_dir is not None:
        return {"VGPUKIT_SIM": os.path.abspath(app.sim_dir)}
    if app.root is not None:
        return {"VGPUKIT_ROOT": os.path.abspath(app.root)}
    return {}


def _abs(source: str) -> str:
    return "-" if source == userfile.STDIN else os.path.abspath(source)


@click.command("assert")
@file_option
@config_option
@mode_only_option
@strict_option
@click.option(
    "-a", "--valid-config", is_flag=True, help="Only check that the file is valid and holds the selected config."
)
@json_option
@click.pass_obj
def assert_cmd(
    app: App, path: Path | None, name: str | None, mode_only: bool, strict: bool, valid_config: bool
) -> None:
    """Exit 0 when the GPUs match the config, 1 (listing the differences) otherwise."""
    source, chosen, entries, warnings = _load(app, path, name, strict)
    if not valid_config:
        warnings += _host_warnings(app, source, chosen, entries, strict)
    warn(app, warnings)
    diff = (
        []
        if valid_config
        else migparted.assert_config(Scan(app.host), nvml_of(app), entries, source, mode_only=mode_only)
    )
    what = "the config is valid" if valid_config else "the GPUs match the config"
    emit(
        app,
        "mig-assert",
        {"config": chosen, "matches": not diff, "differences": diff, "warnings": warnings},
        lambda: say(what if not diff else "differences:\n  " + "\n  ".join(diff)),
    )
    if diff:
        fail_after_emit(app, VerifyFailed(f"the GPUs do not match {source} -c {chosen}"))


@click.command("export")
@click.option(
    "-l",
    "--config-label",
    "-c",
    "--config",
    "name",
    default="current",
    show_default=True,
    envvar=["MIG_PARTED_CONFIG_LABEL"],
    help="Config name to write.",
    type=NAME,
)
@click.option(
    "-o",
    "--output-format",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="Write the config as YAML or JSON.",
)
@json_option
@click.pass_obj
def export_cmd(app: App, name: str, fmt: str) -> None:
    """Print the current MIG layout as a mig-parted v1 config (every GPU, as mig-parted exports it)."""
    unread: list[Unread] = []  # a GPU NVML cannot answer for: left out, named, exit 6
    entries = migparted.export_entries(Scan(app.host), nvml_of(app), unread)
    text = config.dump(name, entries)
    if fmt == "json":
        import json

        text = json.dumps({"version": "v1", "mig-configs": {name: entries}}, indent=2) + "\n"
    else:
        text = not_read_comment(unread) + text
    doc = {"config": name, "yaml": text, "entries": entries, "unreadable": as_json(unread)}
    emit(app, "mig-export", doc, lambda: click.echo(text, nl=False))
    finish_read(app, unread)


def not_read_comment(unread: list[Unread]) -> str:
    """YAML comment lines naming the devices an export left out (applying it leaves them alone)."""
    return "".join(f"# not read, left out (applying this leaves it alone): {u.label}: {u.reason}\n" for u in unread)


@click.command("service")
@file_option
@config_option
@click.option(
    "-k",
    "--hooks-file",
    "hooks_path",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="mig-parted hooks file the unit passes to mig apply.",
)
@click.option("--install", is_flag=True, help=f"Write {service.UNIT} (and nvidia-gpu-reset.target when missing).")
@strict_option
@json_option
@dry_run_option
@click.pass_obj
def service_cmd(
    app: App, path: Path | None, name: str | None, hooks_path: Path | None, install: bool, strict: bool
) -> None:
    """Print (or --install) a systemd unit that re-applies the selected config at boot, before the
    services that use the GPUs. Enable it with: systemctl enable vgpukit-mig.service"""
    if path is None or str(path) == "-":
        raise InvalidInput("the boot unit needs a config file: give -f FILE (not stdin)")
    source, chosen, _, warnings = _load(app, path, name, strict)
    warn(app, warnings)
    text = service.unit_text(_abs(source), chosen, _abs(str(hooks_path)) if hooks_path else None, entry_point())
    if not install:
        emit(
            app,
            "mig-service",
            {"unit": service.UNIT, "text": text, "installed": False, "warnings": warnings},
            lambda: click.echo(text, nl=False),
        )
        return
    steps = [PutFile(service.UNIT, text, what=f"write {service.UNIT}")]
    if not app.host.exists(app.host.path(*service.TARGET.strip("/").split("/"))):
        steps.append(PutFile(service.TARGET, service.TARGET_TEXT, what=f"write {service.TARGET}"))
    if not app.dry_run:
        with session(app.env):
            execute(app.env, steps)
    emit(
        app,
        "mig-service",
        {"unit": service.UNIT, "text": text, "installed": not app.dry_run, "warnings": warnings},
        lambda: say(("would write " if app.dry_run else "wrote ") + ", ".join(s.path for s in steps)),
    )
