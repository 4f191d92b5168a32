"""Stand-in GPU tenants for the QoS benchmark: CPU-bound work on one pinned core.

tenant.py spin   [--notify SOCK GPU NAME] [--phases busy:2,idle:1,...]
tenant.py online --rate R --work-ms 2 --duration S --out FILE [--notify SOCK GPU NAME] [--launcher-cpu N]
tenant.py cmd    [--notify SOCK GPU NAME]   # spins 50 ms per 'b' byte on stdin
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from vgpukit.qos.demand import DemandClient


def cpu() -> float:
    return time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)


def work(seconds: float) -> None:
    """Burn ``seconds`` of CPU time (not wall time: a frozen tenant makes no progress)."""
    end = cpu() + seconds
    while cpu() < end:
        for _ in range(200):
            pass


class Notifier:
    def __init__(self, spec: list[str] | None) -> None:
        self.c = DemandClient(spec[0], spec[1], spec[2]) if spec else None

    def busy(self) -> None:
        if self.c:
            self.c.busy()

    def idle(self) -> None:
        if self.c:
            self.c.idle()


def spin(n: Notifier, phases: str | None) -> None:
    if not phases:
        while True:  # repeat the state: a datagram sent before the tenant was added is lost
            n.busy()
            work(0.25)
    plan = [(p.split(":")[0], float(p.split(":")[1])) for p in phases.split(",")]
    for kind, secs in plan:
        end = time.monotonic() + secs
        if kind == "busy":
            last = 0.0
            while time.monotonic() < end:
                if time.monotonic() - last > 0.25:
                    n.busy()
                    last = time.monotonic()
                work(0.001)
        else:
            n.idle()
            time.sleep(max(0.0, end - time.monotonic()))
    n.idle()
    while True:
        time.sleep(3600)


def launcher(spec: list[str], arrivals: list[float], cpu_no: int) -> None:
    """The app's CPU side, in a child process off the stand-in core: at each request it announces
    demand, as the launch hook does from the thread that calls cuLaunchKernel on a GPU host (that
    thread runs on a host core, not on the shared device). Not in the tenant's pid set, so never
    frozen; it replays the worker's arrival schedule."""
    os.sched_setaffinity(0, {cpu_no})
    n = Notifier(spec)
    for t in arrivals:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        n.busy()
    os._exit(0)


def online(
    n: Notifier, rate: float, work_ms: float, duration: float, out: str, seed: int,
    spec: list[str] | None = None, launcher_cpu: int | None = None,
) -> None:  # fmt: skip
    rng = random.Random(seed)
    start = time.monotonic() + 0.2
    arrivals, t = [], start
    while t < start + duration:
        t += rng.expovariate(rate)
        arrivals.append(t)
    if spec and launcher_cpu is not None and os.fork() == 0:
        launcher(spec, arrivals, launcher_cpu)
    lat, i, busy_cpu = [], 0, 0.0
    n.idle()
    while i < len(arrivals):
        now = time.monotonic()
        if arrivals[i] > now:
            time.sleep(arrivals[i] - now)
            continue
        n.busy()
        c0 = cpu()
        while i < len(arrivals) and arrivals[i] <= time.monotonic():
            work(work_ms / 1000)
            lat.append(time.monotonic() - arrivals[i])
            i += 1
        busy_cpu += cpu() - c0
        n.idle()
    with open(out, "w") as fh:
        json.dump({"latencies": lat, "cpu": busy_cpu, "span": time.monotonic() - start}, fh)


def cmd(n: Notifier) -> None:
    n.idle()
    while True:
        b = os.read(0, 256)
        if not b:
            return
        n.busy()
        work(0.05 * len(b))
        n.idle()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["spin", "online", "cmd"])
    ap.add_argument("--notify", nargs=3, metavar=("SOCK", "GPU", "NAME"))
    ap.add_argument("--phases")
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--work-ms", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--launcher-cpu", type=int, help="online: announce demand from a child on this CPU")
    a = ap.parse_args()
    n = Notifier(a.notify)
    if a.mode == "spin":
        spin(n, a.phases)
    elif a.mode == "online":
        online(n, a.rate, a.work_ms, a.duration, a.out, a.seed, a.notify, a.launcher_cpu)
    else:
        cmd(n)


if __name__ == "__main__":
    main()
