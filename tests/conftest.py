"""Shared fixtures: real simulated hosts in temp dirs (no patching of open/os anywhere)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from vgpukit.cli.main import cli
from vgpukit.host import Host
from vgpukit.sim.build import init_sim
from vgpukit.sim.kernel import SimKernel


def make_sim(path: Path, profile: str = "hgx-a100") -> Path:
    init_sim(path, profile)
    return path


@pytest.fixture
def sim_dir(tmp_path: Path) -> Path:
    """A fresh simulated hgx-a100 host."""
    return make_sim(tmp_path / "host")


@pytest.fixture
def qemu_sim(tmp_path: Path) -> Path:
    """A fresh simulated host mirroring the real-kernel QEMU guest (NVMe SR-IOV PF + mtty)."""
    return make_sim(tmp_path / "guest", "qemu-guest")


@pytest.fixture(autouse=True)
def _no_watch_outlives_its_test() -> Iterator[None]:
    """A watch a test started is closed by its end (``with start_watch(...)``): one left listening
    failed a later test when its host was removed (CI, 2026-11-29). Its NVML thread ends by itself."""
    before = {t.ident for t in threading.enumerate()}
    yield
    left = [t for t in threading.enumerate() if t.name == "vgpukit-watch" and t.ident not in before]
    for t in left:
        t.join(2)
    assert not [t for t in left if t.is_alive()], "the test left a watch listening: close it"


@contextmanager
def short_dir(prefix: str) -> Iterator[Path]:
    """A directory of our own with a short path, removed afterwards: Unix socket paths are limited to
    107 bytes. It lies in the suite's temporary directory (``TMPDIR``: scripts/test.sh picks tmpfs
    when it has room), or in /tmp when that path is long."""
    base = tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix=prefix, dir=base if len(base) <= 12 else "/tmp") as d:
        yield Path(d)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """:func:`short_dir` as a fixture."""
    with short_dir("vk") as d:
        yield d


_TMP_BEFORE = pytest.StashKey[set[str]]()
_SESSION_CACHES: list[Path] = []
# podman's lock of its containers' state: always /dev/shm/libpod_lock, whatever TMPDIR says
_NOT_OURS = {"libpod_lock"}


def remove_at_session_end(path: Path) -> None:
    """PATH, a cache the whole session shares in the temporary directory, is removed when it ends."""
    _SESSION_CACHES.append(path)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_TMP_BEFORE] = set(os.listdir(tempfile.gettempdir()))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Nothing the suite made is left in the temporary directory (pytest's own ``pytest-of-*``
    aside, which keeps only failed tests' directories). A CI run's tmpfs filled up with what tests
    left there (2026-11-29); with ``CI`` set, anything left fails the run."""
    before = session.stash.get(_TMP_BEFORE, None)
    if before is None:
        return
    for path in _SESSION_CACHES:
        shutil.rmtree(path, ignore_errors=True)
    base = tempfile.gettempdir()
    left = sorted(n for n in set(os.listdir(base)) - before - _NOT_OURS if not n.startswith("pytest-of-"))
    if not left:
        return
    ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}  # elsewhere another job may have made them
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    entries = "an entry" if len(left) == 1 else f"{len(left)} entries"
    line = f"LEFT BEHIND: the session left {entries} in {base}: " + " ".join(left[:20])
    line += " (a failure under CI)" if ci else " (made by another process? a failure only under CI)"
    if tr is not None:
        tr.write("\n")  # after the progress line, which the reporter ends at its summary
        tr.write_line(line, red=True)
    if ci:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def sim_host(path: Path) -> Host:
    return Host(path, kernel=SimKernel(path))


Run = Callable[..., Result]  # the type of the run_cli fixture


def invoke(sim: Path | None, *args: str, stdin: str | None = None) -> Result:
    """Run the vgpukit CLI in-process, as the ``vgpukit`` command would (errors mapped to exit codes):
    ``invoke(sim_dir, "topo", "--json")``; ``sim=None`` for no ``--sim``; ``stdin``: its standard
    input. ``.exit_code``, ``.stdout`` and ``.stderr`` are what the command produced."""
    from vgpukit.cli.entry import main  # the installed command's entry point (mdevctl's fast reads too)

    full = (["--sim", str(sim)] if sim is not None else []) + list(args)
    return CliRunner().invoke(_Main(main), full, input=stdin, catch_exceptions=False)


@pytest.fixture
def run_cli() -> Callable[..., Result]:
    """The one CLI harness of the test suite: :func:`invoke` as a fixture."""
    return invoke


class _Main:
    """Adapter so CliRunner drives ``main()`` (which maps errors to exit codes) rather than the raw group."""

    def __init__(self, main: Callable[[list[str]], int]) -> None:
        self.main_fn = main
        self.name = "vgpukit"

    def main(self, args: list[str], prog_name: str | None = None, **_: object) -> None:
        import sys

        sys.exit(self.main_fn(list(args)))


def as_json(result: Result) -> dict:  # type: ignore[type-arg]
    return json.loads(result.stdout)


__all__ = ["Run", "as_json", "cli", "invoke", "make_sim", "sim_host"]


# The slow directories last, each whole (a module's fixtures are set up once): their background work
# (the real-kernel guest's QEMU boot, the shipping tests' debootstrap) starts when collection ends and
# runs beside every other test instead of being waited for in the middle of the session.
LAST = ("ship", "realkernel")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent

    def rank(item: pytest.Item) -> int:
        parts = item.path.relative_to(tests).parts if item.path.is_relative_to(tests) else ()
        return LAST.index(parts[0]) + 1 if parts and parts[0] in LAST else 0

    items.sort(key=rank)  # stable: the order within each part is pytest's
