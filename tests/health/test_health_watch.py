"""``health --watch`` follows the host's events (docs/engine.md, "The watch"): an error the kernel
announces is streamed while the command runs, its safety net (``--resync``) an hour away."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import Run, make_sim

ROOT = Path(__file__).resolve().parents[2]


def _interruptible() -> None:
    """SIGINT as a terminal delivers it (a shell's background job, or a test runner, may ignore it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lines(proc: subprocess.Popen[str], want: int, timeout: float) -> list[dict[str, object]]:
    """The first ``want`` JSON lines the stream printed (fewer when ``timeout`` passed first)."""
    assert proc.stdout is not None
    out: list[dict[str, object]] = []
    end = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.monotonic()))
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(json.loads(line))
    return out


def test_an_error_the_kernel_announces_is_streamed_as_it_comes(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "h")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "--json", "health", "--watch", "--resync", "3600"]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible
    )
    try:
        time.sleep(2)  # listening (nothing to stream yet: the host is healthy)
        assert run_cli(sim, "sim", "fault", "aer", "0000:03:00.0", "fatal").exit_code == 0  # gpu0: change uevents
        got = _lines(proc, 1, timeout=60)
        assert [(e["device"], e["kind"]) for e in got] == [("gpu0", "aer-fatal")], proc.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # never left running
            raise
    assert proc.returncode in (1, 4) and "Traceback" not in err, err  # the state at the end: degraded or worse
