"""Memory QoS scenarios with real processes (tests/cuda/emulator/memqos.c), the real QoS daemon and the
device emulator shared between them: used by test_memqos.py and benchmarks/cuda/memory.py."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.qos.conftest import DaemonProc

MIB = 1 << 20


@dataclass
class Proc:
    """A memqos process whose output lines are read by a thread into a queue."""

    p: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.put(line.strip())
        self.lines.put("")

    def send(self, cmd: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def wait_for(self, prefix: str, timeout: float = 30) -> str:
        """The next line starting with prefix (other lines are kept in .seen)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if line.startswith(prefix):
                return line
            if line == "" and self.p.poll() is not None:
                break
        raise AssertionError(f"no {prefix!r} line (rc {self.p.poll()})")

    def rounds(self, seconds: float) -> list[float]:
        """The round times (ms) an offline process prints over the next ``seconds`` (earlier ones dropped,
        and the round in progress too)."""
        while not self.lines.empty():
            self.lines.get_nowait()
        self.wait_for("it=")
        out, end = [], time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.05)
            except queue.Empty:
                continue
            if line.startswith("it="):
                out.append(float(line.split("ms=")[1]))
        return out

    def kill(self) -> None:
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGCONT)
            self.p.kill()
        self.p.wait()


def kv(line: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


@dataclass
class Scene:
    """A shared emulated GPU, the daemon, and tenants started with the library preloaded."""

    bin: Path
    root: Path
    device: int = 256 * MIB
    env: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    daemon: DaemonProc | None = None
    program: str = "memqos"  # or memreal (the real-GPU program: dlopen, PTX)

    def __post_init__(self) -> None:
        (self.root / "run" / "vgpukit" / "cuda").mkdir(parents=True, exist_ok=True)
        self.env = {
            "VGPUKIT_EMU_SHM": str(self.root / "device"),
            "VGPUKIT_EMU_MEMORY": str(self.device),
            **self.env,
        }

    def start_daemon(self, memory: dict[str, Any] | None = None) -> DaemonProc:
        emulated = {"LD_LIBRARY_PATH": str(self.bin)} if "VGPUKIT_EMU_SHM" in self.env else {}  # its checkpoint API
        self.daemon = DaemonProc(self.root, env={**self.env, **emulated}).start()
        if memory is not None:
            self.daemon.req(op="set", gpu="gpu0", policy="best-effort", memory=memory)
        return self.daemon

    def start(self, tenant: str, cls: str, args: list[str], add: bool = True, **lib: str) -> Proc:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUKIT_", "LD_PRELOAD"))}
        env.update(self.env)
        env.update(
            VGPUKIT_ROOT=str(self.root),
            LD_PRELOAD=str(self.bin / "libvgpukit-cuda.so"),
            VGPUKIT_QOS_TENANT=tenant,
            VGPUKIT_QOS_GPU="gpu0",
            VGPUKIT_CUDA_CLASS=cls,
            VGPUKIT_QOS_SOCKET=str(self.root / "run" / "vgpukit" / "qos" / "demand.sock"),
            **lib,
        )
        p = Proc(
            subprocess.Popen(
                [str(self.bin / self.program), *args],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
        self.procs.append(p)
        if add and self.daemon is not None:
            doc: dict[str, Any] = {"class": cls, "share": 50, "pids": [p.p.pid], "demand": "notify"}
            if "VGPUKIT_CUDA_MEMORY" in lib:
                doc["memory"] = int(lib["VGPUKIT_CUDA_MEMORY"])
            if "VGPUKIT_CUDA_MEMORY_BURST" in lib:
                doc["memory_burst"] = int(lib["VGPUKIT_CUDA_MEMORY_BURST"])
            self.daemon.req(op="tenant-add", gpu="gpu0", name=tenant, tenant=doc)
        return p

    def offline(
        self, size: int, count: int, kernel_ms: float = 2, cap: int = 64 * MIB, burst: int = 1024 * MIB
    ) -> Proc:
        p = self.start(
            "batch",
            "offline",
            ["offline", str(size), str(count), str(kernel_ms)],
            VGPUKIT_CUDA_MEMORY=str(cap),
            VGPUKIT_CUDA_MEMORY_BURST=str(burst),
        )
        p.wait_for("held")
        return p

    def online(self, size: int, count: int, cap: int = 1024 * MIB, **lib: str) -> Proc:
        p = self.start("web", "online", ["online", str(size), str(count)], VGPUKIT_CUDA_MEMORY=str(cap), **lib)
        p.wait_for("ready")
        return p

    def close(self) -> None:
        for p in self.procs:
            p.kill()
        if self.daemon is not None and self.daemon.proc is not None and self.daemon.proc.poll() is None:
            self.daemon.stop()


def allocations(p: Proc, count: int) -> list[dict[str, str]]:
    return [kv(p.wait_for("alloc=")) for _ in range(count)]
