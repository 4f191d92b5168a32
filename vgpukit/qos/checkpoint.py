"""Suspending a CUDA process whole through the driver's checkpoint facility (docs/qos.md, "Memory QoS").

Two ways, tried in this order:

* the driver API of CUDA 12.8+ (``libcuda.so.1``, driver version >= 12080):
  ``cuCheckpointProcessLock(pid, args)`` (further CUDA calls of the process block; ``args.timeoutMs``),
  ``cuCheckpointProcessCheckpoint(pid, NULL)`` (device memory copied to host memory and released),
  ``cuCheckpointProcessRestore(pid, NULL)``, ``cuCheckpointProcessUnlock(pid, NULL)`` and
  ``cuCheckpointProcessGetState(pid, &state)`` (0 running, 1 locked, 2 checkpointed, 3 failed); called
  from this (the controller's) process, loaded with ctypes;
* NVIDIA's ``cuda-checkpoint`` utility (driver R550+), ``--toggle --pid PID`` and ``--get-state``.

A suspension is lock + checkpoint; a resume is restore + unlock. The target must not be stopped
(SIGSTOP, a frozen cgroup): the driver serves the request with a thread inside it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import HostIOError, NoCapacity, Unsupported
from ..host import Host

MIN_DRIVER = 12080
STATES = ("running", "locked", "checkpointed", "failed")
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
LOCK_TIMEOUT_MS = 5000


class Checkpointer(Protocol):
    name: str

    def suspend(self, pid: int) -> None: ...

    def resume(self, pid: int) -> None: ...

    def state(self, pid: int) -> str: ...


class _LockArgs(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


@dataclass
class DriverCheckpoint:
    """The checkpoint API of the driver's libcuda.so.1."""

    lib: ctypes.CDLL
    name: str = "driver"

    @classmethod
    def load(cls) -> DriverCheckpoint | None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            version = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value < MIN_DRIVER:
                return None
            for sym in ("Lock", "Checkpoint", "Restore", "Unlock", "GetState"):
                getattr(lib, f"cuCheckpointProcess{sym}")
        except (OSError, AttributeError):
            return None
        return cls(lib)

    def _call(self, what: str, pid: int, arg: object = None) -> None:
        fn = getattr(self.lib, f"cuCheckpointProcess{what}")
        r = fn(ctypes.c_int(pid), arg)
        if r == CUDA_ERROR_NOT_INITIALIZED:
            self.lib.cuInit(0)
            r = fn(ctypes.c_int(pid), arg)
        if r == CUDA_ERROR_OUT_OF_MEMORY:
            raise NoCapacity(f"process {pid}: not enough device memory to restore it yet")
        if r != 0:
            raise HostIOError(f"process {pid}: cuCheckpointProcess{what} failed (CUDA error {r})")

    def state(self, pid: int) -> str:
        st = ctypes.c_int(-1)
        self._call("GetState", pid, ctypes.byref(st))
        return STATES[st.value] if 0 <= st.value < len(STATES) else "failed"

    def suspend(self, pid: int) -> None:
        args = _LockArgs(LOCK_TIMEOUT_MS, 0)
        self._call("Lock", pid, ctypes.byref(args))
        try:
            self._call("Checkpoint", pid)
        except HostIOError:
            self._call("Unlock", pid)
            raise

    def resume(self, pid: int) -> None:
        if self.state(pid) == "checkpointed":
            self._call("Restore", pid)
        if self.state(pid) == "locked":
            self._call("Unlock", pid)


@dataclass
class UtilityCheckpoint:
    """NVIDIA's cuda-checkpoint utility, run through the host door."""

    host: Host
    tool: Path
    name: str = "cuda-checkpoint"

    def _run(self, *args: str) -> str:
        res = self.host.run_program(self.tool, list(args), None, timeout=60)
        if res.rc != 0:
            if "error 2" in res.stderr and "restore" in res.stderr.lower():
                raise NoCapacity(f"{self.host.display(self.tool)}: not enough device memory to restore yet")
            raise HostIOError(f"{self.host.display(self.tool)} {' '.join(args)} failed (exit {res.rc} {res.error})")
        return res.stdout

    def state(self, pid: int) -> str:
        out = self._run("--get-state", "--pid", str(pid)).strip()
        return out if out in STATES else "failed"

    def suspend(self, pid: int) -> None:
        if self.state(pid) == "running":
            self._run("--toggle", "--pid", str(pid))

    def resume(self, pid: int) -> None:
        if self.state(pid) == "checkpointed":
            self._run("--toggle", "--pid", str(pid))


def find(host: Host) -> Checkpointer:
    """The way this host checkpoints CUDA processes; Unsupported when it has none."""
    driver = DriverCheckpoint.load()
    if driver is not None:
        return driver
    for tool in host.cuda_checkpoint_tools():
        if host.is_file(tool):
            return UtilityCheckpoint(host, tool)
    raise Unsupported(
        f"no CUDA checkpoint facility: needs libcuda.so.1 of CUDA {MIN_DRIVER // 1000}.{MIN_DRIVER % 1000 // 10}+"
        " or the cuda-checkpoint utility (driver R550+)"
    )
