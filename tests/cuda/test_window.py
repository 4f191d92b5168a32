"""The in-flight window bounds the work a process leaves queued on the device (preemption latency)."""

from __future__ import annotations

import pytest

from .conftest import Cuda

KERNELS, MS = 40, 50  # 2 s of 50 ms kernels


def test_without_a_window_the_queue_is_all_the_work(cuda: Cuda) -> None:
    out = cuda.run("launch", "drain", str(KERNELS), str(MS))
    assert float(out["launch_ms"]) < 100  # launches return at once: everything is queued
    assert float(out["drain_ms"]) > 0.9 * KERNELS * MS  # a frozen process's queue keeps the device ~2 s


@pytest.mark.parametrize("how", ["kernel", "coop", "ex", "graph"])
def test_window_of_n_launches(cuda: Cuda, how: str) -> None:
    out = cuda.run("launch", "drain", str(KERNELS), str(MS), VGPUKIT_CUDA_INFLIGHT="2", VGPUKIT_TEST_LAUNCH=how)
    assert float(out["drain_ms"]) <= 2 * MS + 50  # at most 2 kernels left behind (+ wake-up slack)
    assert float(out["launch_ms"]) > (KERNELS - 3) * MS  # the program was paced by the device instead


def test_window_of_t_ms(cuda: Cuda) -> None:
    out = cuda.run("launch", "drain", str(KERNELS), str(MS), VGPUKIT_CUDA_INFLIGHT_MS="100")
    assert float(out["drain_ms"]) <= 100 + MS + 50


def test_window_from_the_tenant_config(cuda: Cuda) -> None:
    from vgpukit.cuda.region import write_config

    write_config(cuda.host, cuda.tenant, inflight=1)
    out = cuda.run("launch", "drain", "10", str(MS))
    assert float(out["drain_ms"]) <= MS + 50
