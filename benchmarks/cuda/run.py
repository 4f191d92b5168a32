"""libvgpukit-cuda benchmark on the device emulator (gcc only, no GPU). Prints a table.

    PYTHONPATH=. python benchmarks/cuda/run.py [--quick]

Rows: ns added per cuLaunchKernel and per allocation (median), bytes over the cap on every allocation
path, the tenant's usage after kill -9, preemption latency with 50 ms kernels queued (in-process drain
and through the real QoS daemon, with and without the in-flight window), and two emulated tenants at
70/30 fixed-share through the daemon with the library doing the gating. State lives in a temporary
host root; nothing under /run is touched.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from vgpukit.cuda.region import read_usage  # noqa: E402
from vgpukit.host import Host  # noqa: E402
from vgpukit.qos import control  # noqa: E402
from vgpukit.qos.demand import socket_path  # noqa: E402

PATHS = ["mem", "v1", "pitch", "managed", "async", "pool", "defpool", "vmm", "array", "array3d", "mipmap"]
CAP = 16 << 20


def row(metric: str, goal: str, got: str, ok: bool | None) -> None:
    mark = "" if ok is None else ("ok" if ok else "MISSED")
    print(f"| {metric:<58} | {goal:<10} | {got:<28} | {mark:<6} |", flush=True)


class Bench:
    def __init__(self, root: Path, quick: bool) -> None:
        self.root = root
        self.bin = root / "bin"
        self.quick = quick
        self.bin.mkdir()
        (root / "run" / "vgpukit" / "cuda").mkdir(parents=True)
        for d in ("tests/cuda/emulator", "contrib/cuda"):
            subprocess.run(["make", "-s", "-C", str(REPO / d), f"O={self.bin}"], check=True)

    def env(self, lib: bool = True, tenant: str | None = "t1", **kw: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUKIT_", "LD_PRELOAD"))}
        env["VGPUKIT_ROOT"] = str(self.root)
        if lib:
            env["LD_PRELOAD"] = str(self.bin / "libvgpukit-cuda.so")
        if tenant:
            env["VGPUKIT_CUDA_TENANT"] = tenant
        env.update(kw)
        return env

    def run(self, *args: str, **kw: Any) -> dict[str, str]:
        p = subprocess.run([str(self.bin / args[0]), *args[1:]], env=self.env(**kw), capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError(f"{args}: {p.stderr.strip()}")
        return dict(w.split("=", 1) for w in p.stdout.split() if "=" in w)

    def bench(self, **kw: Any) -> tuple[float, float]:
        runs = [self.run("launch", "bench", "20000" if self.quick else "100000", **kw) for _ in range(5)]
        return (
            statistics.median(float(r["launch_ns"]) for r in runs),
            statistics.median(float(r["alloc_free_ns"]) for r in runs),
        )

    # ------------------------------------------------------------------ rows
    def overhead(self) -> None:
        base_l, base_a = self.bench(lib=False, tenant=None)
        cases = [
            ("no configuration (pass-through)", {"tenant": None}),
            ("tenant, cap + demand notification", {"VGPUKIT_CUDA_MEMORY": "1GiB", "VGPUKIT_QOS_GPU": "gpu0"}),
            (
                "tenant, cap + demand + window N=8",
                {"VGPUKIT_CUDA_MEMORY": "1GiB", "VGPUKIT_QOS_GPU": "gpu0", "VGPUKIT_CUDA_INFLIGHT": "8"},
            ),
            (
                "tenant, cap + demand + window T=100 ms",
                {"VGPUKIT_CUDA_MEMORY": "1GiB", "VGPUKIT_QOS_GPU": "gpu0", "VGPUKIT_CUDA_INFLIGHT_MS": "100"},
            ),
        ]
        row("emulator alone: ns per launch / alloc+free pair", "", f"{base_l:.0f} / {base_a:.0f}", None)
        for name, kw in cases:
            kw.setdefault("VGPUKIT_QOS_SOCKET", str(self.root / "no-daemon.sock"))
            lat, alloc = self.bench(**kw)
            row(f"added ns per cuLaunchKernel: {name}", "< 200", f"{lat - base_l:+.0f}", lat - base_l < 200)
            row(f"added ns per alloc+free pair: {name}", "", f"{alloc - base_a:+.0f}", None)

    def exactness(self) -> None:
        worst = []
        for path in PATHS:
            out = self.run("paths", path, VGPUKIT_CUDA_MEMORY=str(CAP), VGPUKIT_CUDA_DIR=str(self.root / path))
            over = int(out["peak"]) - CAP
            ok = over == 0 and out["over"] == "2" and out["end_used"] == "0"
            worst.append((path, over, ok))
        row(
            "bytes over the cap (peak - cap), " + " ".join(p for p, _, _ in worst),
            "0 each",
            " ".join(str(o) for _, o, _ in worst),
            all(ok for *_, ok in worst),
        )

    def kill9(self) -> None:
        procs = []
        for _ in range(3):
            p = subprocess.Popen(
                [str(self.bin / "paths"), "managed", "hold", str(CAP // 4)],
                stdout=subprocess.PIPE,
                text=True,
                env=self.env(tenant="k9", VGPUKIT_CUDA_MEMORY=str(CAP)),
            )
            assert p.stdout is not None and p.stdout.readline().strip() == "held"
            procs.append(p)
        before = read_usage(Host(self.root), "k9")
        for p in procs:
            p.kill()
            p.wait()
        after = read_usage(Host(self.root), "k9")
        out = self.run("paths", "mem", tenant="k9", VGPUKIT_CUDA_MEMORY=str(CAP))
        got = f"{before.used[0] if before else '?'} -> {after.used[0] if after else '?'} B; next peak {out['peak']}"
        row(
            "tenant usage after kill -9 of 3 holders; a new process",
            "0",
            got,
            bool(after and after.used[0] == 0 and int(out["peak"]) == CAP),
        )

    def drain(self) -> None:
        for name, kw in (
            ("no window", {}),
            ("N=2", {"VGPUKIT_CUDA_INFLIGHT": "2"}),
            ("T=100 ms", {"VGPUKIT_CUDA_INFLIGHT_MS": "100"}),
        ):
            out = self.run("launch", "drain", "40", "50", **kw)
            ms = float(out["drain_ms"])
            row(
                f"work left queued when a process stops (40 x 50 ms), {name}",
                "<= window",
                f"{ms:.0f} ms",
                None if not kw else ms <= 120,
            )

    # ------------------------------------------------------------------ through the daemon
    def start_daemon(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONPATH=str(REPO), VGPUKIT_ROOT=str(self.root))
        log = open(self.root / "daemon.log", "ab")  # noqa: SIM115
        d = subprocess.Popen([sys.executable, "-m", "vgpukit", "qos", "daemon"], env=env, stdout=log, stderr=log)
        for _ in range(500):
            try:
                if control.request(Host(self.root), {"op": "ping"}, timeout=1)["ok"]:
                    return d
            except Exception:
                time.sleep(0.02)
        raise RuntimeError("daemon did not start")

    def gated(self, tenant: str, *args: str, **kw: str) -> subprocess.Popen[str]:
        env = self.env(
            tenant=None,
            VGPUKIT_QOS_TENANT=tenant,
            VGPUKIT_TEST_GATE="1",
            VGPUKIT_QOS_GPU="gpu0",
            VGPUKIT_QOS_SOCKET=str(socket_path(Host(self.root))),
            VGPUKIT_EMU_SHM=str(self.root / "dev"),
            **kw,
        )
        p = subprocess.Popen(
            [str(self.bin / args[0]), *args[1:]], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        return p

    def add(self, name: str, p: subprocess.Popen[str], cls: str, share: int) -> None:
        control.request(
            Host(self.root),
            {
                "op": "tenant-add",
                "gpu": "gpu0",
                "name": name,
                "tenant": {"class": cls, "share": share, "pids": [p.pid]},
            },
        )

    @staticmethod
    def go(*ps: subprocess.Popen[str]) -> None:
        for p in ps:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()

    @staticmethod
    def stop(*ps: subprocess.Popen[str]) -> None:
        for p in ps:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait()

    def preemption(self) -> None:
        for name, kw in (
            ("no window", {}),
            ("N=2", {"VGPUKIT_CUDA_INFLIGHT": "2"}),
            ("T=100 ms", {"VGPUKIT_CUDA_INFLIGHT_MS": "100"}),
        ):
            lat = []
            for _ in range(1 if self.quick else 3):
                (self.root / "dev").unlink(missing_ok=True)
                d = self.start_daemon()
                batch = self.gated("batch", "launch", "drain", "60", "50", **kw)
                web = self.gated("web", "launch", "probe", "1")
                try:
                    self.add("batch", batch, "offline", 50)
                    self.add("web", web, "online", 50)
                    self.go(batch)
                    time.sleep(0.5)
                    self.go(web)
                    out, _ = web.communicate(timeout=30)
                    lat.append(float(out.split("latency_ms=")[1].split()[0]))
                finally:
                    self.stop(batch, web)
                    d.send_signal(signal.SIGTERM)
                    d.wait(10)
            got = f"{statistics.median(lat):.0f} ms (median of {len(lat)})"
            row(
                f"preemption via daemon, offline queue of 50 ms kernels, {name}",
                "<= window",
                got,
                None if not kw else statistics.median(lat) <= 200,
            )

    def shares(self) -> None:
        (self.root / "dev").unlink(missing_ok=True)
        d = self.start_daemon()
        control.request(
            Host(self.root),
            {"op": "set", "gpu": "gpu0", "policy": "fixed-share", "slice_ms": int(os.environ.get("BENCH_SLICE", "20"))},
        )
        kw = {"VGPUKIT_CUDA_INFLIGHT": os.environ.get("BENCH_N", "4")}
        k = os.environ.get("BENCH_K", "2")
        a = self.gated("a", "launch", "drain", "100000", k, VGPUKIT_EMU_OWNER="0", **kw)
        b = self.gated("b", "launch", "drain", "100000", k, VGPUKIT_EMU_OWNER="1", **kw)
        try:
            self.add("a", a, "online", 70)
            self.add("b", b, "online", 30)
            self.go(a, b)
            time.sleep(1.0)
            t0, x0 = time.monotonic(), self.owner_ns()
            time.sleep(3.0 if self.quick else 8.0)
            t1, x1 = time.monotonic(), self.owner_ns()
        finally:
            self.stop(a, b)
            d.send_signal(signal.SIGTERM)
            d.wait(10)
        wall = (t1 - t0) * 1e9
        sa, sb = (x1[0] - x0[0]) / wall * 100, (x1[1] - x0[1]) / wall * 100
        err = max(abs(sa - 70), abs(sb - 30))
        split = sa / (sa + sb) * 100 if sa + sb else 0.0
        label = f"fixed-share 70/30 via daemon, {k} ms kernels, window N={kw['VGPUKIT_CUDA_INFLIGHT']}"
        row(label + ": % of device time", "err <= 1 pt", f"{sa:.1f} / {sb:.1f} % (err {err:.1f})", err <= 1)
        row(label + ": split of the busy device", "70 / 30", f"{split:.1f} / {100 - split:.1f} %", None)

    def owner_ns(self) -> tuple[int, int]:
        data = (self.root / "dev").read_bytes()
        return struct.unpack_from("<2Q", data, 8 + 24)  # emulator layout: magic, device 0 {3 x u64, owner_ns[8]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", help="run one group: overhead exactness kill9 drain preemption shares")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vgpukit-cuda-bench-") as tmp:
        b = Bench(Path(tmp), args.quick)
        print(f"| {'metric':<58} | {'goal':<10} | {'measured':<28} | {'':<6} |")
        print(f"|{'-' * 60}|{'-' * 12}|{'-' * 30}|{'-' * 8}|")
        for group in ("overhead", "exactness", "kill9", "drain", "preemption", "shares"):
            if not args.only or args.only == group:
                getattr(b, group)()
    return 0


if __name__ == "__main__":
    sys.exit(main())
