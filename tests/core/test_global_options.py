"""The global options are accepted after the command, at any position, as before it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim
from vgpukit.cli.main import cli
from vgpukit.clikit.globalopts import hoist

COMMANDS = [("topo",), ("sriov", "list"), ("recover",), ("devices", "--class", "gpu"), ("mig", "status")]
OPTIONS = [("--json",), ("--dry-run",), ("--debug",), ("--wait", "5"), ("--wait=5",)]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sim(tmp_path_factory.mktemp("g") / "host", "mixed-a100-t4")


def test_recover_dry_run_after_the_command(sim: Path) -> None:
    r = invoke(sim, "recover", "--dry-run")
    assert r.exit_code == 0, r.stderr


def test_root_and_sim_after_the_command(sim: Path) -> None:
    want = invoke(sim, "topo", "--json")
    assert want.exit_code == 0
    assert invoke(None, "topo", "--sim", str(sim), "--json").stdout == want.stdout
    assert invoke(None, "topo", "--json", f"--sim={sim}").stdout == want.stdout
    r = invoke(None, "sriov", "list", "--root", str(sim), "--sim", str(sim))
    assert r.exit_code == 2 and "exclude each other" in r.stderr


def test_values_and_words_after_double_dash_stay() -> None:
    args = ["qos", "tenant", "add", "gpu0", "t", "--cgroup", "--json", "--share", "5"]
    assert hoist(cli, args) == args  # --json is --cgroup's value here
    args = ["sim", "init", "--", "--json"]
    assert hoist(cli, args) == args
    assert hoist(cli, ["recover", "--dry-run", "--discard"]) == ["--dry-run", "recover", "--discard"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cmd=st.sampled_from(COMMANDS), opt=st.sampled_from(OPTIONS), where=st.integers(0, 5))
def test_any_position_equals_the_front(sim: Path, cmd: tuple[str, ...], opt: tuple[str, ...], where: int) -> None:
    front = invoke(sim, *opt, *cmd)
    at = min(where, len(cmd) - 1) + 1  # anywhere after the command's first word
    after = invoke(sim, *cmd[:at], *opt, *cmd[at:])
    assert (after.exit_code, after.stdout) == (front.exit_code, front.stdout), (cmd, opt, at, after.stderr)
