"""Run ``vgpukit ARGS...`` with the simulator's work bracketed by marker syscalls.

The simulated kernel (:class:`vgpukit.sim.kernel.SimKernel`) and the simulated NVIDIA driver
(:class:`vgpukit.sim.nvml.SimNvml`) run inside the vgpukit process; to tell their syscalls from the
product's under ``strace``, each of their entry points is wrapped between ``access(MARK_IN)`` and
``access(MARK_OUT)`` (paths that never exist), and, in a run with ``VGPUKIT_BENCH_SIM_CPU`` set (never
the counted one: reading the clock is a syscall too), the CPU time they take is added up and written to
the file it names.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

MARK_IN = "/.vgpukit-bench-sim-in"
MARK_OUT = "/.vgpukit-bench-sim-out"
SIM_CPU_ENV = "VGPUKIT_BENCH_SIM_CPU"  # a file: the CPU seconds spent in the simulator are written there
_depth = [0]
_timing = [False]  # a run that adds up the simulator's CPU time (SIM_CPU_ENV set); the counted run does not
_sim_cpu = [0.0]


def bracket(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        timing = _timing[0] and not _depth[0]  # the clock is read only in a timed run, never under strace
        t0 = time.process_time() if timing else 0.0
        os.access(MARK_IN, os.F_OK)
        _depth[0] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            _depth[0] -= 1
            os.access(MARK_OUT, os.F_OK)
            if timing:
                _sim_cpu[0] += time.process_time() - t0

    return wrapper


def main() -> int:
    _timing[0] = bool(os.environ.get(SIM_CPU_ENV))
    from vgpukit.sim.kernel import SimKernel
    from vgpukit.sim.nvml import SimNvml

    SimKernel.write = bracket(SimKernel.write)  # type: ignore[method-assign]
    for name, value in list(vars(SimNvml).items()):
        if callable(value) and (name == "__init__" or not name.startswith("__")):
            setattr(SimNvml, name, bracket(value))
    from vgpukit.cli.main import main as vgpukit_main

    try:
        return vgpukit_main(sys.argv[1:])
    finally:
        if os.environ.get(SIM_CPU_ENV):
            with open(os.environ[SIM_CPU_ENV], "w") as fh:
                fh.write(f"{_sim_cpu[0]}\n")


if __name__ == "__main__":
    raise SystemExit(main())
