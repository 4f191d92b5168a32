"""Memory QoS benchmark on the device emulator (gcc only, no GPU): the scenarios of tests/cuda/test_memqos.py
with real processes, the real QoS daemon and one emulated 256 MiB GPU they share. Prints a table.

    PYTHONPATH=. python benchmarks/cuda/memory.py [--quick]

An offline tenant holds 192 MiB (64 MiB guaranteed, a 1 GiB burst of unified memory); an online tenant then
allocates 4 x 32 MiB: the last two only fit once the offline tenant has moved 64 MiB to the host. Measured:
the online tenant's allocations refused, the time from its allocation call to success (p50/p99 over the
trials, at the emulator's default PCIe rate of 12 GB/s and at 1 GB/s), the bytes moved, the offline tenant's
round time before, during and after, how long its memory takes to come back once the online tenant frees
its memory, suspension through checkpoint (the online wait, the contents after restore), and what a
tenant killed with kill -9 mid-eviction leaves behind. State lives in temporary host roots.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.cuda.memqos import MIB, Scene, allocations, kv  # noqa: E402
from tests.qos.conftest import wait_for  # noqa: E402
from vgpukit.cuda import region  # noqa: E402

SIZE = 32 * MIB


def row(metric: str, goal: str, got: str, ok: bool | None) -> None:
    mark = "" if ok is None else ("ok" if ok else "MISSED")
    print(f"| {metric:<62} | {goal:<10} | {got:<30} | {mark:<6} |", flush=True)


def pct(values: list[float], q: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, int(q * len(data)))]


def moved(scene: Scene, p) -> int:  # type: ignore[no-untyped-def]
    p.send("stats")
    return int(kv(p.wait_for("devused="))["moved_to_host"])


def trial(build: Path, work: Path, mbps: int | None, rounds: bool) -> dict[str, object]:
    env = {"VGPUKIT_EMU_PCIE_MBPS": str(mbps)} if mbps else {}
    scene = Scene(build, work, env=env)
    try:
        d = scene.start_daemon(memory={"restore_ms": 300})
        off = scene.offline(SIZE, 6)
        before = off.rounds(0.3) if rounds else []
        on = scene.online(SIZE, 4)
        on.send("go")
        allocs = allocations(on, 4)
        out: dict[str, object] = {
            "refused": sum(a["rc"] != "0" for a in allocs),
            "waits_ms": [int(a["ns"]) / 1e6 for a in allocs[2:]],
            "moved": moved(scene, on),
        }
        if rounds:
            out["during"] = off.rounds(0.3)
            on.send("free")
            on.wait_for("freed")
            t0 = time.monotonic()
            back = wait_for(lambda: region.read_usage(d.host, "batch").evicted == (0,), timeout=10)  # type: ignore[union-attr]
            out["back_ms"] = (time.monotonic() - t0) * 1000 if back else float("inf")
            out["after"] = off.rounds(0.3)
            out["before"] = before
            off.send("check")
            out["intact"] = kv(off.wait_for("intact="))["intact"] == "1"
        return out
    finally:
        scene.close()


def suspend_trial(build: Path, work: Path) -> dict[str, object]:
    scene = Scene(build, work)
    try:
        d = scene.start_daemon(memory={"suspend": "checkpoint", "restore_ms": 300})
        off = scene.start("batch", "offline", ["ckpt", str(96 * MIB)], VGPUKIT_CUDA_MEMORY=str(1024 * MIB))
        off.wait_for("held")
        on = scene.online(SIZE, 4)
        on.send("go")
        allocs = allocations(on, 4)
        on.send("free")
        on.wait_for("freed")
        wait_for(lambda: d.status()["batch"]["memory_state"] == "resident", timeout=10)
        off.send("check")
        got = kv(off.wait_for("intact="))
        return {
            "refused": sum(a["rc"] != "0" for a in allocs),
            "wait_ms": int(allocs[2]["ns"]) / 1e6,
            "intact": got["intact"] == "1" and got["mismatch"] == "0",
        }
    finally:
        scene.close()


def kill_trial(build: Path, work: Path) -> int:
    """kill -9 of the offline tenant while it moves 32 MiB at 200 MB/s: bytes it leaves accounted."""
    scene = Scene(build, work, env={"VGPUKIT_EMU_PCIE_MBPS": "200"})
    try:
        d = scene.start_daemon(memory={"restore_ms": 300, "reclaim_ms": 3000})
        off = scene.offline(SIZE, 6)
        on = scene.online(SIZE, 4)
        on.send("go")
        allocations(on, 2)
        time.sleep(0.08)
        os.kill(off.p.pid, signal.SIGKILL)
        off.p.wait()
        allocations(on, 2)
        wait_for(lambda: d.status().get("batch") is None, timeout=5)
        u = region.read_usage(d.host, "batch")
        left = 0 if u is None else sum(u.used) + u.moved_out
        on.send("stats")
        dev = int(kv(on.wait_for("devused="))["devused"])
        return left + max(0, dev - 4 * SIZE)
    finally:
        scene.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer trials")
    args = ap.parse_args()
    n = 5 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="vgpukit-memqos-") as tmp:
        base = Path(tmp)
        build = base / "bin"
        build.mkdir()
        for d in ("tests/cuda/emulator", "contrib/cuda"):
            subprocess.run(["make", "-s", "-C", str(REPO / d), f"O={build}"], check=True)

        def work(name: str) -> Path:
            path = base / name
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            return path

        print(f"| {'metric':<62} | {'goal':<10} | {'measured':<30} | {'':<6} |")
        print(f"|{'-' * 64}|{'-' * 12}|{'-' * 32}|{'-' * 8}|")
        first = trial(build, work("t0"), None, rounds=True)
        fast = [first] + [trial(build, work(f"t{i}"), None, rounds=False) for i in range(1, n)]
        slow = [trial(build, work(f"s{i}"), 1000, rounds=False) for i in range(max(3, n // 2))]
        refused = sum(int(t["refused"]) for t in fast + slow)  # type: ignore[call-overload]
        row(
            "online allocations refused (card full of offline memory)",
            "0",
            f"{refused} of {4 * len(fast + slow)}",
            refused == 0,
        )
        for label, ts in (("12 GB/s", fast), ("1 GB/s", slow)):
            waits = [w for t in ts for w in t["waits_ms"]]  # type: ignore[attr-defined]
            got = f"{pct(waits, 0.5):.1f} / {pct(waits, 0.99):.1f} ms"
            row(f"online allocation call -> success, p50/p99, PCIe {label}", "< 1 s", got, pct(waits, 0.99) < 1000)
        mb = statistics.median(int(t["moved"]) for t in fast) / MIB  # type: ignore[call-overload]
        row("bytes moved to the host per trial (64 MiB missing)", "64 MiB", f"{mb:.0f} MiB", mb == 64)
        b, dur, a = (statistics.median(first[k]) for k in ("before", "during", "after"))  # type: ignore[call-overload]
        row("offline round time before / during / after (ms)", "continues", f"{b:.1f} / {dur:.1f} / {a:.1f}", dur > 0)
        row(
            "offline memory back after the online tenant frees it",
            "",
            f"{first['back_ms']:.0f} ms (restore 300 ms)",
            None,
        )
        row(
            "offline contents after eviction and return",
            "intact",
            "intact" if first["intact"] else "DIFFER",
            bool(first["intact"]),
        )
        sus = [suspend_trial(build, work(f"c{i}")) for i in range(max(2, n // 3))]
        waits = [float(s["wait_ms"]) for s in sus]  # type: ignore[arg-type]
        row(
            "suspend via checkpoint: online refused",
            "0",
            str(sum(int(s["refused"]) for s in sus)),
            all(not s["refused"] for s in sus),
        )  # type: ignore[call-overload]
        row("suspend via checkpoint: online wait p50/max", "", f"{pct(waits, 0.5):.1f} / {max(waits):.1f} ms", None)
        ok = all(s["intact"] for s in sus)
        row(
            "suspend/resume: contents bit for bit (192 MiB)",
            "intact",
            f"{sum(bool(s['intact']) for s in sus)}/{len(sus)} intact",
            ok,
        )
        left = [kill_trial(build, work(f"k{i}")) for i in range(max(2, n // 4))]
        row("kill -9 mid-eviction: bytes left accounted", "0", str(max(left)), max(left) == 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
