"""Run ``vgpukit ARGS...`` with the simulator's work bracketed by marker syscalls.

The simulated kernel (:class:`vgpukit.sim.kernel.SimKernel`) and the simulated NVIDIA driver
(:class:`vgpukit.nvml.sim.SimNvml`) run inside the vgpukit process; to tell their syscalls from the
product's under ``strace``, each of their entry points is wrapped between ``access(MARK_IN)`` and
``access(MARK_OUT)`` (paths that never exist). Used only for the ``strace`` run of a case.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

MARK_IN = "/.vgpukit-bench-sim-in"
MARK_OUT = "/.vgpukit-bench-sim-out"


def bracket(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        os.access(MARK_IN, os.F_OK)
        try:
            return fn(*args, **kwargs)
        finally:
            os.access(MARK_OUT, os.F_OK)

    return wrapper


def main() -> int:
    from vgpukit.nvml.sim import SimNvml
    from vgpukit.sim.kernel import SimKernel

    SimKernel.write = bracket(SimKernel.write)  # type: ignore[method-assign]
    for name, value in list(vars(SimNvml).items()):
        if callable(value) and (name == "__init__" or not name.startswith("__")):
            setattr(SimNvml, name, bracket(value))
    from vgpukit.cli.main import main as vgpukit_main

    return vgpukit_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
