"""mig-parted's hooks file: hooks run as real processes, in mig-parted's order, with its environment."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import invoke
from vgpukit.errors import InvalidInput
from vgpukit.mig import hooks
from vgpukit.sim import nvml as simdrv
from vgpukit.sim.build import init_sim
from vgpukit.sim.nvml import SimNvml

from .test_cli import layout

REPO = Path(__file__).resolve().parents[2]
CONFIG = """\
version: v1
mig-configs:
  all-3g:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
  all-7g:
    - devices: all
      mig-enabled: true
      mig-devices: {"7g.40gb": 1}
"""
# each hook appends one JSON line: its name and the environment it got
RECORD = (
    "import json, os, sys; "
    "open(os.environ['LOG'], 'a').write(json.dumps([sys.argv[1], dict(os.environ)]) + '\\n'); "
    "sys.exit(int(os.environ.get('FAIL_' + sys.argv[1].replace('-', '_'), '0')))"
)
NAMES = hooks.HOOK_NAMES


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    root = tmp_path / "mixed"
    init_sim(root, "mixed-a100-t4")
    return root


def hooks_file(tmp_path: Path, log: Path, extra: str = "", fail: str = "") -> Path:
    lines = ["version: v1", "hooks:"]
    for name in NAMES:
        envs = {"LOG": str(log), **({f"FAIL_{fail.replace('-', '_')}": "3"} if fail == name else {})}
        lines += [
            f"  {name}:",
            f"    - command: {sys.executable}",
            f"      args: [-c, {json.dumps(RECORD)}, {name}]",
            f"      envs: {json.dumps(envs)}",
            f"      workdir: {tmp_path}",
        ]
    p = tmp_path / "hooks.yaml"
    p.write_text("\n".join(lines) + "\n" + extra)
    return p


def ran(log: Path) -> list[tuple[str, dict[str, str]]]:
    if not log.exists():
        return []
    return [tuple(json.loads(line)) for line in log.read_text().splitlines()]  # type: ignore[misc]


def test_hooks_run_in_mig_parteds_order_with_its_environment(tmp_path: Path, mixed: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    log = tmp_path / "log"
    hk = hooks_file(tmp_path, log)
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g", "-k", str(hk))
    assert r.exit_code == 0, r.stderr
    assert [n for n, _ in ran(log)] == list(NAMES)  # mode and devices both changed: every hook
    env = ran(log)[0][1]
    assert env["MIG_PARTED_CONFIG_FILE"] == str(cfg) and env["MIG_PARTED_SELECTED_CONFIG"] == "all-3g"
    assert env["MIG_PARTED_HOOKS_FILE"] == str(hk) and env["MIG_PARTED_MODE_CHANGE_ONLY"] == "false"
    assert env["MIG_PARTED_SKIP_RESET"] == "false" and env["VGPUKIT_MIG_SELECTED_CONFIG"] == "all-3g"
    assert env["LOG"] == str(log) and env["VGPUKIT_SIM"] == str(mixed)
    assert "PATH" not in env or env["PATH"] != os.environ.get("PATH")  # only what mig-parted gives
    # a second apply: nothing differs, so only apply-start and apply-exit
    log.unlink()
    assert invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g", "-k", str(hk)).exit_code == 0
    assert [n for n, _ in ran(log)] == ["apply-start", "apply-exit"]
    # devices change, mode does not: no mode hooks
    log.unlink()
    assert invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-7g", "-k", str(hk)).exit_code == 0
    assert [n for n, _ in ran(log)] == ["apply-start", "pre-apply-config", "post-apply-config", "apply-exit"]
    # --mode-only: the mode phase only
    log.unlink()
    off = tmp_path / "off.yaml"
    off.write_text("version: v1\nmig-configs:\n  off:\n    - devices: all\n      mig-enabled: false\n")
    assert invoke(mixed, "mig", "apply", "-f", str(off), "-k", str(hk), "-m").exit_code == 0
    assert [n for n, _ in ran(log)] == ["apply-start", "pre-apply-mode", "post-apply-mode", "apply-exit"]
    assert ran(log)[0][1]["MIG_PARTED_MODE_CHANGE_ONLY"] == "true"


@pytest.mark.parametrize(
    ("fail", "expect"),
    [
        ("apply-start", ["apply-start"]),  # nothing else, not even apply-exit (mig-parted's defer comes after)
        ("pre-apply-mode", ["apply-start", "pre-apply-mode", "apply-exit"]),
        ("pre-apply-config", ["apply-start", "pre-apply-mode", "post-apply-mode", "pre-apply-config", "apply-exit"]),
        ("apply-exit", list(NAMES)),
    ],
)
def test_a_failing_hook_stops_the_apply_and_apply_exit_still_runs(
    tmp_path: Path, mixed: Path, fail: str, expect: list[str]
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    log = tmp_path / "log"
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g", "-k", str(hooks_file(tmp_path, log, fail=fail)))
    assert r.exit_code == 1 and f"the {fail} hook at" in r.stderr and "exited with status 3" in r.stderr
    assert [n for n, _ in ran(log)] == expect
    changed = fail in ("pre-apply-config", "apply-exit")
    assert SimNvml(mixed).mig_mode(0)[0] is changed  # the mode phase ran before pre-apply-config failed
    assert bool(layout(mixed, 0)) is (fail == "apply-exit")


def test_hooks_stop_and_restart_gpu_clients_around_the_reset(tmp_path: Path, mixed: Path) -> None:
    """The nvidia-mig-manager pattern: a client holds the GPU, pre-apply-mode stops it so the reset
    can happen, apply-exit starts it again; all through real vgpukit processes in the hooks."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    pid = simdrv.add_client(mixed, 0, "nvidia-persistenced")
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g")
    assert r.exit_code == 4 and "nvidia-persistenced" in r.stderr  # without hooks: refused, nothing done
    env = json.dumps({"PYTHONPATH": str(REPO)})
    vg = f"{sys.executable}"
    hk = tmp_path / "hooks.yaml"
    hk.write_text(
        f"""\
version: v1
hooks:
  pre-apply-mode:
    - command: {vg}
      args: [-m, vgpukit, sim, client, remove, "{pid}"]
      envs: {env}
  apply-exit:
    - command: {vg}
      args: [-m, vgpukit, sim, client, add, "0", nvidia-persistenced]
      envs: {env}
"""
    )
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g", "-k", str(hk))
    assert r.exit_code == 0, r.stderr
    assert SimNvml(mixed).mig_mode(0) == (True, True) and len(layout(mixed, 0)) == 2
    assert [p.name for p in SimNvml(mixed).processes(0)] == ["nvidia-persistenced"]  # started again


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v1\nhooks:\n  post-apply: []\n", "hooks.yaml:3: unknown key in hooks"),
        ("version: v1\nhooks:\n  apply-start:\n    - args: [x]\n", "hooks.yaml:4: a hook lacks 'command'"),
        (
            "version: v1\nhooks:\n  apply-start:\n    - {command: x, timeout: 3}\n",
            "hooks.yaml:4: unknown key in a hook",
        ),
        ("version: v2\nhooks: {}\n", "hooks.yaml:1: version must be v1"),
    ],
)
def test_hooks_file_is_parsed_strictly(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        hooks.parse(text, "hooks.yaml")


def test_mig_parteds_own_hooks_files_parse(tmp_path: Path) -> None:
    data = REPO / "tests/data/mig-parted"
    default = hooks.parse((data / "deployments_systemd_hooks-default.yaml").read_text(), "default")
    assert list(default.by_name) == ["apply-start", "pre-apply-mode", "pre-apply-config", "apply-exit"]
    assert (
        len(default.by_name["apply-exit"]) == 2
        and default.by_name["apply-start"][0].workdir == "/etc/nvidia-mig-manager"
    )
    minimal = hooks.parse((data / "deployments_systemd_hooks-minimal.yaml").read_text(), "minimal")
    assert minimal.by_name["apply-start"][0].args[-1] == "source hooks.sh; apply-start ${MIG_PARTED_SELECTED_CONFIG}"
