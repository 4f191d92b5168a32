"""Run real-kernel test cases inside ONE QEMU guest, and show their outcomes as ordinary tests.

* ``target`` fixture: ``sim`` (the qemu-guest simulated host in a temp dir) and ``real`` (marked
  ``realkernel``). ``real_target``: only ``real``.
* On the host, the first ``real`` case boots the guest once (session fixture ``guest_session``): the
  guest runs the module-level ``GUEST_STEPS`` of the collected modules (fresh-guest CLI calls through
  ``python -m vgpukit``), then ``pytest`` on every collected ``real`` case. Each host-side ``real``
  case then reports what its twin did in the guest (the body is not run on the host).
* In the guest (``VGPUKIT_IN_GUEST=1``) ``real`` cases run for real against the guest kernel and
  their outcomes are written to the out share.
* A module that needs fresh guests of its own (a real reboot, libvirtd starting domains) names a
  function ``BOOTS(keep, cancel)`` that boots them and returns their runs; the same background thread
  runs it right after the shared guest, and the module's ``boots`` fixture waits for its answer. So
  every QEMU boot of the session runs beside the host-side tests, one at a time (the machine's other
  core), instead of in the middle of the session.

Deselected (not collected as tests) with VGPUKIT_SKIP_REALKERNEL=1. When QEMU / Debian's kernel cannot
be had the cases skip with the reason locally, and FAIL in CI (``CI=true``): a suite that could not run
is not a pass. When the guest produces no results, the failure shows the tail of its serial console.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .harness import GUEST_OUT, GuestRun, GuestStep, RealKernel, Unavailable, skip_or_fail, skip_reason
from .targets import RealTarget, SimTarget, Target

IN_GUEST = os.environ.get("VGPUKIT_IN_GUEST") == "1"
REAL = pytest.param("real", marks=pytest.mark.realkernel)
RESULTS = "pytest-results.json"


@dataclass
class GuestSession:
    run: GuestRun | None = None
    error: str | None = None
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodeids: list[str] = field(default_factory=list)
    mtty: bool = False

    def step(self, name: str) -> Any:
        if self.run is None:
            skip_or_fail(self.error or "the guest did not run")
        result = self.run[name]
        if result.rc is None:
            pytest.fail(
                f"guest step {name} never finished (the guest died or timed out); console tail:\n"
                + self.run.console_tail(),
                pytrace=False,
            )
        return result


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """VGPUKIT_SKIP_REALKERNEL=1 (on the host): the real-kernel cases are deselected, not skipped."""
    if IN_GUEST or not skip_reason():
        return
    keep = [i for i in items if i.get_closest_marker("realkernel") is None]
    dropped = [i for i in items if i.get_closest_marker("realkernel") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


class GuestProxy:
    """Stands for the guest inside a host-side ``real`` case; the case reports the guest's outcome."""

    def __init__(self, session: GuestSession) -> None:
        self.session = session


def _is_real_case(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return params.get("target") == "real" or params.get("real_target") == "real"


def _guest_steps(rk: RealKernel, items: list[pytest.Item], nodeids: list[str]) -> list[GuestStep]:
    """``GUEST_STEPS`` of every collected module, in collection order: ``(name, kind, args[,
    timeout])``; kinds: ``vgpukit`` (its arguments), ``python`` (the guest's interpreter's arguments:
    ``-m tests.realkernel.MODULE``), ``sh`` (a shell command), ``sh-vgpukit`` (a shell
    command in which the word VGPUKIT stands for the guest's ``python -m vgpukit`` and
    INSTALL_MDEVCTL for the command installing Debian's mdevctl)."""
    steps: list[GuestStep] = []
    seen: set[str] = set()
    for item in items:
        module = getattr(item, "module", None)
        for spec in getattr(module, "GUEST_STEPS", ()):
            name, kind, args, *rest = spec
            if name in seen:
                continue
            seen.add(name)
            if kind == "vgpukit":
                cmd = rk.vgpukit_command(*args)
            elif kind == "python":
                cmd = rk.python_command(*args)
            elif kind == "sh-vgpukit":
                cmd = args[0].replace("VGPUKIT", rk.vgpukit_command())
                if "INSTALL_MDEVCTL" in cmd:
                    cmd = cmd.replace("INSTALL_MDEVCTL", _install_mdevctl(rk))
            else:
                cmd = args[0]
            steps.append(GuestStep(name, cmd, *rest))
    if nodeids:
        pytest_cmd = rk.python_command(
            "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(rk.config.checkout)
        )
        steps.append(GuestStep("pytest", pytest_cmd + " " + " ".join(shlex.quote(n) for n in nodeids), timeout=900))
    return steps


def _install_mdevctl(rk: RealKernel) -> str:
    try:
        return rk.install_mdevctl_command()
    except Unavailable as exc:  # the step fails, saying why (the case that reads it fails in CI)
        return f"(echo {shlex.quote(f'mdevctl unavailable: {exc}')} >&2; false)"


@dataclass
class _Boots:
    """A module's own boots (its ``BOOTS``), run in the background thread after the shared guest."""

    fn: Any
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None  # raised again by the module's ``boots`` fixture (a skip too)
    seconds: float | None = None


class _Background:
    """The guest runs of this session, started in a thread as soon as the cases are collected, so
    QEMU boots and runs while the rest of the suite runs on the host: first the shared guest (the first
    real case waits for it), then each collected module's own ``BOOTS``, one after another."""

    def __init__(self, nodeids: list[str], steps_of: list[pytest.Item], boots: dict[str, Any]) -> None:
        self.session = GuestSession(nodeids=nodeids)
        self.unavailable: str | None = None
        self.crashed: BaseException | None = None
        self.seconds: float | None = None
        self.prepare_seconds: float | None = None  # the kernel, initrd, mtty and packages (cached after the first)
        self.cancel = threading.Event()
        self.keep = Path(tempfile.mkdtemp(prefix="vgpukit-guest."))  # removed when the session ends
        self._items = steps_of
        self.shared_done = threading.Event()  # the shared guest's outcome is known
        self.boots = {name: _Boots(fn) for name, fn in boots.items()}
        self.thread = threading.Thread(target=self._run, name="realkernel-guest", daemon=True)

    def _run(self) -> None:
        try:
            self._shared()
        finally:
            self.shared_done.set()
        for name, boots in self.boots.items():
            t0 = time.monotonic()
            try:
                if self.cancel.is_set():
                    raise RuntimeError("the session ended before this module's boots")
                keep = self.keep / name
                keep.mkdir()
                boots.result = boots.fn(keep, self.cancel)
            except BaseException as exc:  # a skip or failure too: the module's fixture raises it again
                boots.error = exc
            finally:
                boots.seconds = time.monotonic() - t0
                boots.done.set()

    def _shared(self) -> None:
        try:
            rk = RealKernel()
            rk.config.timeout = max(rk.config.timeout, 1500.0)  # every module's steps + the in-guest cases, under TCG
            began = time.monotonic()
            try:
                assets = rk.prepare()
            except Unavailable as exc:
                self.unavailable = f"real kernel unavailable: {exc}"
                return
            self.prepare_seconds = time.monotonic() - began
            session = self.session
            session.mtty = assets.mtty
            steps = _guest_steps(rk, self._items, session.nodeids)
            if not steps:  # only modules with boots of their own were collected
                session.error = "no shared guest in this session (no real case and no GUEST_STEPS collected)"
                return
            t0 = time.monotonic()
            run = rk.run(
                steps,
                keep_dir=self.keep,
                env={"VGPUKIT_GUEST_MTTY": "1" if assets.mtty else "0"},
                cancel=self.cancel,
            )
            session.run = run
            results = run.out_dir / RESULTS
            if results.exists():
                session.outcomes = json.loads(results.read_text())
            elif session.nodeids:
                pytest_step = run.steps["pytest"].describe() + "\n" if "pytest" in run.steps else ""
                session.error = f"the guest's pytest wrote no results:\n{pytest_step}--- guest console (tail)\n" + (
                    run.console_tail()
                )
            self.seconds = time.monotonic() - t0
        except BaseException as exc:  # reported by the first real case, not lost in the thread
            self.crashed = exc


_GUEST = pytest.StashKey[_Background]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the guest now (in the background) when real cases were collected and can run."""
    if IN_GUEST or skip_reason():
        return
    items = [i for i in session.items if _is_real_case(i)]
    steps_only = [i for i in session.items if "guest" in getattr(i, "fixturenames", ())]  # read GUEST_STEPS
    boots: dict[str, Any] = {}
    for item in session.items:
        module = getattr(item, "module", None)
        if "boots" in getattr(item, "fixturenames", ()) and hasattr(module, "BOOTS"):
            boots.setdefault(module.__name__.rsplit(".", 1)[-1], module.BOOTS)
    if not items and not steps_only and not boots:  # a module of guest steps alone boots the guest too
        return
    bg = _Background([i.nodeid for i in items], list(session.items), boots)
    session.config.stash[_GUEST] = bg
    bg.thread.start()


@pytest.fixture(scope="session")
def guest_session(request: pytest.FixtureRequest) -> GuestSession:
    reason = skip_reason()
    if reason:
        skip_or_fail(reason)
    bg = request.config.stash.get(_GUEST, None)
    if bg is None:  # no real case was collected at the start (cannot happen for a real case's fixture)
        skip_or_fail("the guest was not started")
    bg.shared_done.wait()
    if bg.unavailable:
        skip_or_fail(bg.unavailable)
    if bg.crashed is not None:
        raise bg.crashed
    if bg.seconds is not None:
        request.config.stash[_SECONDS] = _timings(bg)
    return bg.session


_SECONDS = pytest.StashKey[str]()


@pytest.fixture(scope="module")
def boots(request: pytest.FixtureRequest) -> Any:
    """What the module's ``BOOTS`` returned: its own guests, booted in the session's background thread
    after the shared guest (this waits for them)."""
    reason = skip_reason()
    if reason:
        skip_or_fail(reason)
    bg = request.config.stash.get(_GUEST, None)
    name = request.module.__name__.rsplit(".", 1)[-1]
    job = bg.boots.get(name) if bg is not None else None
    if job is None:  # a module without BOOTS (or not collected at the start)
        pytest.fail(f"{name} uses the boots fixture: it needs a module-level BOOTS function", pytrace=False)
    job.done.wait()
    request.config.stash[_SECONDS] = _timings(bg)
    if job.error is not None:
        raise job.error
    return job.result


def _timings(bg: _Background) -> str:
    """Where the guest's time went (the session's critical path when the rest of the suite is faster)."""
    run = bg.session.run
    parts = [f"prepare {bg.prepare_seconds or 0:.1f} s"]
    if bg.seconds is not None:
        parts.append(f"shared QEMU boot {bg.seconds:.1f} s")
    if run is not None:
        if run.boot_seconds is not None:
            parts.append(f"first step at {run.boot_seconds:.0f} s of guest uptime")
        steps = sorted((r for r in run.steps.values() if r.seconds is not None), key=lambda r: -(r.seconds or 0))
        parts.append("slowest steps " + ", ".join(f"{r.name} {r.seconds:.0f} s" for r in steps[:4]))
    own = [f"{name} {job.seconds:.0f} s" for name, job in bg.boots.items() if job.seconds is not None]
    if own:
        parts.append("modules' own boots (after it, in the background) " + ", ".join(own))
    return "; ".join(parts)


def _make_target(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target | GuestProxy]:
    if kind == "sim":
        t: Target = SimTarget(tmp_path / "guest")
        yield t
        return
    if not IN_GUEST:
        yield GuestProxy(request.getfixturevalue("guest_session"))
        return
    t = RealTarget()
    t.reset()
    try:
        yield t
    finally:
        t.reset()


@pytest.fixture(params=["sim", REAL])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target | GuestProxy]:
    yield from _make_target(request.param, request, tmp_path)


@pytest.fixture(params=[REAL])
def real_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target | GuestProxy]:
    yield from _make_target(request.param, request, tmp_path)


@pytest.fixture
def guest(request: pytest.FixtureRequest) -> GuestSession:
    """Host side only: the session's guest run (for GUEST_STEPS results)."""
    if IN_GUEST:
        pytest.skip("host-side check")
    return request.getfixturevalue("guest_session")  # type: ignore[no-any-return]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    proxy = next((v for v in pyfuncitem.funcargs.values() if isinstance(v, GuestProxy)), None)
    if proxy is None:
        return None
    session = proxy.session
    if session.error and not session.outcomes:
        pytest.fail(session.error, pytrace=False)
    outcome = session.outcomes.get(pyfuncitem.nodeid)
    if outcome is None:
        tail = session.run.console_tail() if session.run else ""
        pytest.fail(f"no outcome from the guest for {pyfuncitem.nodeid}\n{tail}", pytrace=False)
    if outcome["outcome"] == "skipped":
        skip_or_fail(f"in the guest: {outcome['message']}")
    if outcome["outcome"] != "passed":
        pytest.fail(f"in the real-kernel guest:\n{outcome['message']}", pytrace=False)
    return True


# ----------------------------------------------------------------------------- guest side
_outcomes: dict[str, dict[str, Any]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not IN_GUEST:
        return
    entry = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "message": "", "seconds": 0.0})
    entry["seconds"] += report.duration
    if report.failed:
        entry["outcome"] = "failed"
        entry["message"] += f"[{report.when}] {report.longreprtext}\n"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        longrepr = report.longrepr
        entry["message"] = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)


def pytest_sessionfinish(session: pytest.Session) -> None:
    bg = session.config.stash.get(_GUEST, None)
    if bg is not None and bg.thread.is_alive():  # the session ended first (-x, ^C): no QEMU left behind
        bg.cancel.set()
        bg.thread.join(timeout=30)
    if bg is not None and not bg.thread.is_alive():
        shutil.rmtree(bg.keep, ignore_errors=True)
    if IN_GUEST:
        out = Path(os.environ.get("VGPUKIT_GUEST_OUT", GUEST_OUT))
        (out / RESULTS).write_text(json.dumps(_outcomes, indent=1))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    timings = config.stash.get(_SECONDS, None)
    if timings is not None:
        terminalreporter.write_line(f"real-kernel guest: {timings}")
