"""Memory QoS with ``memreal`` (tests/cuda/emulator/memreal.c): the driver's libcuda.so.1 through dlopen and
a PTX kernel that reads and rewrites its buffers, so the same scenario runs on a real GPU.

Against the device emulator always (the CI proof that the program and the test work); against the host's
NVIDIA driver as well when ``VGPUKIT_REAL_CUDA=1`` (not collected otherwise; with it set, a host without
a driver is a failure). On a GPU the sizes follow the card: the offline tenant fills what is free but
two chunks of 256 MiB (and 512 MiB for its own context), the online tenant then allocates four.
The checkpoint case needs a driver of CUDA 12.8+ (R570) or the cuda-checkpoint utility.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from vgpukit.cuda import region

from ..qos.conftest import wait_for
from .memqos import MIB, Scene, allocations, kv

BACKENDS = ["emulator"] + (["real"] if os.environ.get("VGPUKIT_REAL_CUDA") == "1" else [])


@pytest.fixture(params=BACKENDS)
def scene(request: pytest.FixtureRequest, build: Path, tmp_path: Path) -> Iterator[Scene]:
    env = {"LD_LIBRARY_PATH": str(build)} if request.param == "emulator" else {}
    s = Scene(build, tmp_path, device=512 * MIB, env=env, program="memreal")
    if request.param == "real":  # the emulator's variables mean nothing to the driver
        s.env = {}
    yield s
    s.close()


def sizes(scene: Scene) -> tuple[int, int]:
    """(chunk, offline chunks): the card's free memory less two chunks (and, on a GPU, room for contexts)."""
    env = {**os.environ, **scene.env}
    out = subprocess.run([str(scene.bin / "memreal"), "info"], env=env, capture_output=True, text=True, check=True)
    free = int(kv(out.stdout)["free"])
    real = "LD_LIBRARY_PATH" not in scene.env
    chunk = 256 * MIB if real else 64 * MIB
    return chunk, (free - (512 * MIB if real else 0)) // chunk - 2


def test_online_gets_every_allocation_on_the_card(scene: Scene) -> None:
    chunk, n = sizes(scene)
    d = scene.start_daemon(memory={"restore_ms": 300})
    off = scene.start(
        "batch",
        "offline",
        ["offline", str(chunk), str(n)],
        VGPUKIT_CUDA_MEMORY=str(chunk),
        VGPUKIT_CUDA_MEMORY_BURST=str(4 * n * chunk),
    )
    off.wait_for("held")
    on = scene.start("web", "online", ["online", str(chunk), "4"], VGPUKIT_CUDA_MEMORY=str(8 * chunk))
    on.wait_for("ready")
    on.send("go")
    allocs = allocations(on, 4)
    assert [a["rc"] for a in allocs] == ["0"] * 4, allocs
    print("waits_ms", [int(a["ns"]) / 1e6 for a in allocs])  # pasted into docs/qos.md from a GPU host
    usage = region.read_usage(d.host, "batch")
    assert usage is not None and usage.moved_out >= chunk
    off.wait_for("it=")  # the offline tenant keeps running
    on.send("free")
    on.wait_for("freed")
    assert wait_for(lambda: region.read_usage(d.host, "batch").moved_out == 0, timeout=10)  # type: ignore[union-attr]
    off.send("check")
    assert kv(off.wait_for("intact="))["intact"] == "1"


def test_suspend_and_resume_through_checkpoint_bit_for_bit(scene: Scene) -> None:
    chunk, n = sizes(scene)
    d = scene.start_daemon(memory={"suspend": "checkpoint", "restore_ms": 300})
    half = n // 2 * chunk
    off = scene.start("batch", "offline", ["ckpt", str(half)], VGPUKIT_CUDA_MEMORY=str(4 * half))
    off.wait_for("held")
    on = scene.start("web", "online", ["online", str(chunk), "4"], VGPUKIT_CUDA_MEMORY=str(8 * chunk))
    on.wait_for("ready")
    on.send("go")
    assert [a["rc"] for a in allocations(on, 4)] == ["0"] * 4
    assert d.status()["batch"]["memory_state"] == "suspended"
    on.send("free")
    on.wait_for("freed")
    assert wait_for(lambda: d.status()["batch"]["memory_state"] == "resident", timeout=30)
    off.send("check")
    assert kv(off.wait_for("intact=", timeout=60))["intact"] == "1"
