"""mdevctl's read verbs answered without click (vgpukit.mdev.cli_shim) print exactly what the click
command line prints, for every combination of their options and for hostile values; anything the fast
path does not know goes to click (docs/decisions.md, "Start-up")."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke
from vgpukit.cli import entry
from vgpukit.cli import main as full
from vgpukit.mdev.cli_shim import parse


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vgpukit.sim.build import init_sim

    sim = tmp_path_factory.mktemp("shim") / "t4"
    init_sim(sim, "t4-mdev")
    for args in (
        ("mdev", "create", "0000:3b:00.0", "nvidia-222", "--define"),
        ("mdev", "create", "0000:3b:00.0", "nvidia-222"),
        ("mdev", "define", "-p", "0000:d8:00.0", "-t", "nvidia-222", "--auto"),
    ):
        assert invoke(sim, *args).exit_code == 0
    return sim


def run(fn: object, args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = fn(args)  # type: ignore[operator]
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


WORDS = ["-d", "--defined", "--dumpjson", "-v", "--verbose", "-u", "--uuid", "-p", "--parent", "--json", "-x"]
VALUES = ["0000:3b:00.0", "0000:d8:00.0", "mtty", "", "a\nb", "not-a-uuid", "x" * 300, "3B:00.0", "gpu0"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    verb=st.sampled_from(["list", "types"]),
    words=st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(VALUES)), max_size=5),
)
def test_fast_path_prints_what_click_prints(host: Path, verb: str, words: list[str]) -> None:
    args = ["--sim", str(host), "mdev", "--mdevctl", verb, *words]
    assert run(entry.main, args) == run(full.main, args)


@pytest.mark.parametrize(
    "words",
    [["list"], ["list", "--defined", "--dumpjson"], ["list", "-d", "-v"], ["types"], ["types", "--dumpjson"],
     ["list", "--parent=0000:3b:00.0"], ["list", "--dumpjson", "-u", "UUID"], ["list", "-u", "UUID", "-d"]],
)  # fmt: skip
def test_plain_reads_take_the_fast_path_and_match(host: Path, words: list[str]) -> None:
    uid = run(full.main, ["--sim", str(host), "mdev", "--mdevctl", "list"])[1].split()[0]
    words = [uid if w == "UUID" else w for w in words]
    args = ["--sim", str(host), "mdev", "--mdevctl", *words]
    assert parse(args) is not None
    rc, out, err = run(entry.main, args)
    assert (rc, err) == (0, "") and out.endswith("\n")
    assert (rc, out, err) == run(full.main, args)


@pytest.mark.parametrize(
    "args",
    [["mdev", "--mdevctl", "list", "-d", "-d"], ["mdev", "--mdevctl", "list", "--libvirt", "none"],
     ["mdev", "--mdevctl", "types", "-p", "mtty"], ["mdev", "--mdevctl", "start", "-u", "x"],
     ["mdev", "list"], ["--debug", "mdev", "--mdevctl", "list"], ["mdev", "--mdevctl", "list", "-u"]],
)  # fmt: skip
def test_other_forms_go_to_click(args: list[str]) -> None:
    assert parse(args) is None
