"""The real-GPU path: ``ptxspin`` (tests/cuda/emulator/ptxspin.c) dlopens only ``libcuda.so.1``,
JIT-compiles its embedded PTX spin kernel with cuModuleLoadData and runs the interception tests (caps,
demand, in-flight window) through libvgpukit-cuda.so.

Against the device emulator always (its libcuda.so.1 put first on the library path): the CI proof
that the program, its PTX handling and the tests work. Against the host's NVIDIA driver as well when
``VGPUKIT_REAL_CUDA=1``; without that variable the real variant is not collected at all (a CI run
shows no skips), and with it set a host without a driver is a failure, not a skip.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Cuda
from .test_runtime import states

BACKENDS = ["emulator"] + (["real"] if os.environ.get("VGPUKIT_REAL_CUDA") == "1" else [])
CAP = 64 << 20
K, MS = 20, 50  # 1 s of 50 ms kernels

Spin = Callable[..., dict[str, str]]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, cuda: Cuda) -> dict[str, str]:
    """The environment that makes ptxspin's dlopen find the emulator, or (real) the driver."""
    return {"LD_LIBRARY_PATH": str(cuda.bin)} if request.param == "emulator" else {}


@pytest.fixture
def spin(cuda: Cuda, backend: dict[str, str]) -> Spin:
    """Runs ptxspin against the emulator or the real driver; ``out["backend"]`` says which."""
    extra = backend

    def run(*args: str, **env: object) -> dict[str, str]:
        out = cuda.run("ptxspin", *args, **extra, **env)
        out["backend"] = "emulator" if extra else "real"
        return out

    return run


def test_the_ptx_module_is_jit_compiled_and_found(spin: Spin) -> None:
    out = spin("info", preload=False)
    assert out["jit"] == "ok" and int(out["total"]) > 0
    if out["backend"] == "emulator":
        assert out["device"] == "vgpukit_emulated_GPU_0"
    check = spin("check", preload=False)
    assert check["unknown"] == "500" and check["badimage"] != "0"  # CUDA_ERROR_NOT_FOUND; a refused image


def test_the_spin_kernel_runs_the_requested_time(spin: Spin) -> None:
    out = spin("time", str(MS), "5")  # through the library (no cap, no window): passed through
    assert 0.95 * MS <= float(out["kernel_ms"]) <= 1.2 * MS
    assert float(out["wall_ms"]) >= float(out["kernel_ms"]) - 1


def test_memory_cap(spin: Spin) -> None:
    out = spin("cap", VGPUKIT_CUDA_MEMORY=str(CAP))
    assert int(out["total"]) == CAP and int(out["free"]) == CAP  # what frameworks size their pools from
    assert (out["big"], out["one"]) == ("0", "2")  # the cap allocated; one byte more: OUT_OF_MEMORY
    assert int(out["end_free"]) == CAP


def test_without_the_library_there_is_no_cap(spin: Spin) -> None:
    out = spin("cap", preload=False, VGPUKIT_CUDA_MEMORY=str(CAP))
    assert int(out["total"]) > CAP
    if out["backend"] == "emulator":
        assert out["big"] == "0"  # the emulator's 1 GiB is all free; a real GPU keeps some for itself


def test_demand_is_notified(spin: Spin, tmp_path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "d.sock"))
    out = spin(
        "bursts",
        "2",
        VGPUKIT_QOS_SOCKET=str(tmp_path / "d.sock"),
        VGPUKIT_QOS_GPU="gpu0",
        VGPUKIT_QOS_IDLE_MS="40",
    )
    assert out["launched"] == "40"
    seen = states(sock)
    assert [busy for _, _, busy in seen][:4] == [True, False, True, False]


def test_without_a_window_the_queue_is_all_the_work(spin: Spin) -> None:
    out = spin("drain", str(K), str(MS))
    assert float(out["drain_ms"]) > 0.9 * K * MS


@pytest.mark.parametrize("window", [{"VGPUKIT_CUDA_INFLIGHT": "2"}, {"VGPUKIT_CUDA_INFLIGHT_MS": "100"}])
def test_the_window_bounds_what_is_left_queued(spin: Spin, window: dict[str, str]) -> None:
    out = spin("drain", str(K), str(MS), **window)
    assert float(out["drain_ms"]) <= 2 * MS + 60
    assert float(out["launch_ms"]) > (K - 3) * MS  # the program was paced by the device instead


def test_the_daemon_preempts_an_offline_tenant_within_the_window(
    cuda: Cuda, tmp_path: Path, backend: dict[str, str]
) -> None:
    """Through the real QoS daemon: two ptxspin processes on one device (the emulator's shared one, or
    the GPU), the offline one's queue bounded by N=2: the online kernel waits for that window only."""
    from .test_daemon import MS as DAEMON_MS
    from .test_daemon import preemption_ms

    latency = preemption_ms(cuda, tmp_path, {"VGPUKIT_CUDA_INFLIGHT": "2"}, "ptxspin", **backend)
    assert latency < 2 * DAEMON_MS + 100 + 50
