"""Memory QoS end to end: real processes with the library preloaded, the real QoS daemon, one emulated GPU
shared by them (its unified memory, contents and checkpoint API are the emulator's own facts)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median

import pytest

from vgpukit.cuda import region

from ..qos.conftest import proc_state, wait_for
from .memqos import MIB, Scene, allocations, kv

SIZE = 32 * MIB


@pytest.fixture
def scene(build: Path, tmp_path: Path) -> Iterator[Scene]:
    s = Scene(build, tmp_path)
    yield s
    s.close()


def device_used(s: Scene, p) -> int:  # type: ignore[no-untyped-def]
    p.send("stats")
    return int(kv(p.wait_for("devused="))["devused"])


def test_online_gets_every_allocation_and_offline_gets_its_memory_back(scene: Scene) -> None:
    """An offline tenant holds 192 MiB of the 256 MiB card (64 MiB guaranteed, the rest a burst); an online
    tenant then asks for 128 MiB: every allocation succeeds within bounded time, the offline tenant moves
    only what is missing (largest first) and keeps running, slower; when the online tenant frees its
    memory and the pressure has been gone restore_ms, the offline tenant's memory comes back, intact."""
    d = scene.start_daemon(memory={"restore_ms": 300})
    off = scene.offline(SIZE, 6)
    before = off.rounds(0.4)
    on = scene.online(SIZE, 4)
    on.send("go")
    allocs = allocations(on, 4)
    assert [a["rc"] for a in allocs] == ["0"] * 4  # 0 refused
    assert max(int(a["ns"]) for a in allocs) < 2e9  # bounded (the benchmark measures it)
    during = off.rounds(0.4)
    assert during and median(during) > 1.5 * median(before)  # it continues, reading moved memory remotely
    # exactly what was missing (recorded once the moves are synchronised: the memory is free a bit before)
    assert wait_for(lambda: region.read_usage(d.host, "batch").evicted == (2 * SIZE,))  # type: ignore[union-attr]
    web = d.status()["batch"]
    assert (web["memory_state"], web["memory_evicted"], web["memory_resident"]) == ("evicted", 2 * SIZE, 4 * SIZE)
    on.send("free")
    on.wait_for("freed")
    assert wait_for(lambda: region.read_usage(d.host, "batch").evicted == (0,), timeout=5)  # type: ignore[union-attr]
    after = off.rounds(0.4)
    assert after and median(after) < 0.75 * median(during)
    off.send("check")
    assert kv(off.wait_for("intact="))["intact"] == "1"
    assert d.status()["batch"]["memory_state"] == "resident"


def test_without_memory_qos_the_online_allocation_is_refused(scene: Scene) -> None:
    """The control: the same tenants with no burst (no memory QoS): the card is full, the online tenant's
    third allocation fails. Each refused allocation waits its reclaim window in vain first: 2.5 s here,
    longer than the 2 s within which memory QoS answers every allocation (the first test), so the
    refusal is not a window too short; the default 10 s would only make the control slower."""
    scene.start_daemon()
    off = scene.start("batch", "offline", ["offline", str(SIZE), "6", "2"], VGPUKIT_CUDA_MEMORY=str(1024 * MIB))
    off.wait_for("held")
    on = scene.online(SIZE, 4, VGPUKIT_CUDA_RECLAIM_MS="2500")
    on.send("go")
    assert [a["rc"] for a in allocations(on, 4)] == ["0", "0", "2", "2"]


def test_free_memory_under_the_watermark_is_pressure_too(scene: Scene) -> None:
    """With a 64 MiB watermark, an online allocation that succeeds but leaves 32 MiB free makes its library
    report "low": the offline tenant moves 32 MiB, and the card has the watermark free again."""
    d = scene.start_daemon(memory={"watermark": 64 * MIB, "restore_ms": 5000})
    scene.offline(SIZE, 6)
    on = scene.start("web", "online", ["online", str(SIZE), "1"], VGPUKIT_CUDA_MEMORY=str(1024 * MIB),
                     VGPUKIT_CUDA_WATERMARK=str(64 * MIB))  # fmt: skip
    on.wait_for("ready")
    on.send("go")
    assert [a["rc"] for a in allocations(on, 1)] == ["0"]
    assert wait_for(lambda: region.read_usage(d.host, "batch").evicted == (SIZE,))  # type: ignore[union-attr]
    assert 256 * MIB - device_used(scene, on) == 64 * MIB


def test_the_guarantee_is_not_lent(scene: Scene) -> None:
    """Only unified memory beyond the offline tenant's cap is lent: with 160 MiB guaranteed of its 192,
    the online tenant gets 32 MiB more and then waits in vain (suspend off): refused after reclaim_ms."""
    d = scene.start_daemon(memory={"reclaim_ms": 400})
    scene.offline(SIZE, 6, cap=160 * MIB)
    on = scene.online(SIZE, 4)
    on.send("go")
    assert [a["rc"] for a in allocations(on, 4)] == ["0", "0", "0", "2"]
    assert wait_for(lambda: region.read_usage(d.host, "batch").evicted == (SIZE,))  # type: ignore[union-attr]


@pytest.mark.parametrize("how", ["driver", "utility"])
def test_suspend_and_resume_through_checkpoint_bit_for_bit(scene: Scene, how: str) -> None:
    """An offline tenant without a burst (plain device memory and managed memory) is suspended whole when
    nothing can be lent: its device memory is released (checkpoint), the online tenant gets its 128 MiB;
    when the pressure ends it is restored and its buffers hold what they held, to the bit (the program
    compares, and the emulator hashes every restored buffer against its checkpoint)."""
    env = {}
    if how == "utility":  # a driver older than 12.8: the daemon runs cuda-checkpoint instead
        tool = scene.root / "usr" / "bin"
        tool.mkdir(parents=True)
        shutil.copy(scene.bin / "cuda-checkpoint", tool / "cuda-checkpoint")
        (tool / "libcuda.so.1").symlink_to(scene.bin / "libcuda.so.1")
        env["VGPUKIT_EMU_DRIVER_VERSION"] = "12040"
    scene.env.update(env)
    d = scene.start_daemon(memory={"suspend": "checkpoint", "restore_ms": 300})
    off = scene.start("batch", "offline", ["ckpt", str(96 * MIB)], VGPUKIT_CUDA_MEMORY=str(1024 * MIB))
    off.wait_for("held")
    on = scene.online(SIZE, 4)
    on.send("go")
    assert [a["rc"] for a in allocations(on, 4)] == ["0"] * 4
    st = d.status()["batch"]
    assert (st["memory_state"], st["memory_suspended"], st["memory_resident"]) == ("suspended", 192 * MIB, 0)
    assert device_used(scene, on) == 128 * MIB  # the offline tenant holds nothing on the device
    on.send("free")
    on.wait_for("freed")
    assert wait_for(lambda: d.status()["batch"]["memory_state"] == "resident", timeout=5)
    off.send("check")
    assert kv(off.wait_for("intact=")) == {"intact": "1", "mismatch": "0"}
    assert device_used(scene, on) == 192 * MIB


def test_without_checkpoint_the_tenant_is_frozen_and_keeps_its_memory(scene: Scene) -> None:
    """No checkpoint facility (an old driver, no utility): the offline tenant is frozen instead, keeps its
    memory, and the online allocation fails when its wait ends; the freeze ends with the pressure."""
    scene.env["VGPUKIT_EMU_DRIVER_VERSION"] = "12040"
    d = scene.start_daemon(memory={"suspend": "checkpoint", "restore_ms": 300, "reclaim_ms": 500})
    off = scene.start("batch", "offline", ["ckpt", str(96 * MIB)], VGPUKIT_CUDA_MEMORY=str(1024 * MIB))
    off.wait_for("held")
    on = scene.online(SIZE, 4)
    on.send("go")
    assert [a["rc"] for a in allocations(on, 4)] == ["0", "0", "2", "2"]
    assert d.status()["batch"]["memory_state"] == "suspended"
    assert wait_for(lambda: proc_state(off.p.pid) == "T" or d.status()["batch"]["memory_state"] != "suspended")
    assert wait_for(lambda: proc_state(off.p.pid) != "T", timeout=5)  # pressure over: thawed
    off.send("check")
    assert kv(off.wait_for("intact="))["intact"] == "1"


# ------------------------------------------------------------------ kill -9 matrix
def _no_trace(scene: Scene, dead: str) -> None:
    """A killed tenant leaves no accounting: its region counts nothing, the device holds only what the live
    processes hold, the daemon shows nothing moved or suspended for it."""
    assert scene.daemon is not None
    usage = region.read_usage(scene.daemon.host, dead)
    assert usage is None or (sum(usage.used), usage.moved_out, usage.processes) == (0, 0, 0)
    st = scene.daemon.status().get(dead)
    assert st is None or (st["memory_evicted"], st["memory_suspended"]) == (0, 0)


@pytest.mark.parametrize(
    "victim", ["offline-mid-eviction", "online-waiting", "daemon-mid-eviction", "offline-suspended"]
)
def test_kill_9_during_eviction_leaves_nothing_behind(scene: Scene, victim: str) -> None:
    scene.env["VGPUKIT_EMU_PCIE_MBPS"] = "200"  # 32 MiB take 160 ms to move: time to kill mid-way
    suspend = victim == "offline-suspended"
    d = scene.start_daemon(
        memory={"restore_ms": 300, "reclaim_ms": 3000, "suspend": "checkpoint" if suspend else "off"}
    )
    if suspend:
        off = scene.start("batch", "offline", ["ckpt", str(96 * MIB)], VGPUKIT_CUDA_MEMORY=str(1024 * MIB))
        off.wait_for("held")
    else:
        off = scene.offline(SIZE, 6)
    on = scene.online(SIZE, 4)
    on.send("go")
    allocations(on, 2)  # the free part of the card
    time.sleep(0.08)  # the third allocation waits; the offline tenant is moving (or being checkpointed)
    if victim == "daemon-mid-eviction":
        assert d.proc is not None
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        d2 = scene.start_daemon(memory={"restore_ms": 300})  # its run-time record brings both tenants back
        assert [a["rc"] for a in allocations(on, 2)] == ["0", "0"]  # the waiting allocation is served
        on.send("free")
        on.wait_for("freed")
        assert wait_for(lambda: region.read_usage(d2.host, "batch").evicted == (0,), timeout=5)  # type: ignore[union-attr]
        assert region.read_request(d2.host, "batch")[1] == 0  # nothing stranded on the host
        return
    killed = off if victim.startswith("offline") else on
    if suspend:
        assert wait_for(lambda: d.status()["batch"]["memory_state"] == "suspended", timeout=5)
    os.kill(killed.p.pid, signal.SIGKILL)
    killed.p.wait()
    if killed is off:
        rest = allocations(on, 2)
        assert [a["rc"] for a in rest] == ["0", "0"]  # the dead tenant's memory was the driver's to free
        assert device_used(scene, on) == 128 * MIB
        assert wait_for(lambda: d.status().get("batch") is None, timeout=5)  # the daemon dropped it
        _no_trace(scene, "batch")
    else:
        assert wait_for(lambda: d.status().get("web") is None, timeout=5)
        _no_trace(scene, "web")
        assert wait_for(lambda: region.read_usage(d.host, "batch").evicted == (0,), timeout=5)  # type: ignore[union-attr]


def test_a_frozen_offline_tenant_is_thawed_to_move_its_memory(scene: Scene) -> None:
    """While the online tenant is busy the time-slice scheduler keeps the offline one frozen (SIGSTOP); a
    frozen process cannot move its memory, so the daemon thaws it for the round and freezes it again."""
    from vgpukit.qos.demand import DemandClient

    d = scene.start_daemon(memory={"restore_ms": 300})
    off = scene.offline(SIZE, 6)
    on = scene.online(SIZE, 4)
    client = DemandClient.for_host(d.host, "gpu0", "web")
    assert client.busy()
    assert wait_for(lambda: proc_state(off.p.pid) == "T")  # preempted by the busy online tenant
    on.send("go")
    assert [a["rc"] for a in allocations(on, 4)] == ["0"] * 4
    assert wait_for(lambda: region.read_usage(d.host, "batch").evicted == (2 * SIZE,))  # type: ignore[union-attr]
    assert wait_for(lambda: proc_state(off.p.pid) == "T")  # frozen again: the online tenant is still busy
    client.idle()
    client.close()
