"""Runtime-style programs (entry points only through cuGetProcAddress or dlsym) are capped and seen."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from vgpukit.qos.demand import decode

from .conftest import Cuda

MODES = ["getproc", "getproc1", "ptsz", "dlsym"]


def states(sock: socket.socket) -> list[tuple[str, str, bool]]:
    out = []
    sock.settimeout(0.5)
    while True:
        try:
            m = decode(sock.recv(512))
        except TimeoutError:
            return out
        out.append((m.gpu, m.tenant, m.busy))


@pytest.mark.parametrize("mode", MODES)
def test_runtime_style_program_is_capped_and_notifies_demand(cuda: Cuda, tmp_path: Path, mode: str) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "d.sock"))
    out = cuda.run(
        "runtime",
        mode,
        "2",
        VGPUKIT_CUDA_MEMORY="1MiB",
        VGPUKIT_QOS_SOCKET=str(tmp_path / "d.sock"),
        VGPUKIT_QOS_GPU="gpu0",
        VGPUKIT_QOS_IDLE_MS="40",
    )
    assert int(out["total"]) == 1 << 20
    assert (out["big"], out["over"], out["one"]) == ("0", "2", "2")  # cuMemAlloc and cuMemAllocAsync refused
    seen = states(sock)
    assert [busy for _, _, busy in seen][:4] == [True, False, True, False]
    assert {(g, t) for g, t, _ in seen} == {("gpu0", cuda.tenant)}


@pytest.mark.parametrize("mode", MODES)
def test_runtime_style_program_without_the_library_is_not_capped(cuda: Cuda, mode: str) -> None:
    out = cuda.run("runtime", mode, "1", preload=False, VGPUKIT_CUDA_MEMORY="1MiB")
    assert int(out["total"]) == 1 << 30 and out["big"] == "0"


def test_no_daemon_no_harm(cuda: Cuda, tmp_path: Path) -> None:
    out = cuda.run("runtime", "getproc", "1", VGPUKIT_QOS_SOCKET=str(tmp_path / "none.sock"), VGPUKIT_QOS_GPU="gpu0")
    assert out["launched"] == "20"
