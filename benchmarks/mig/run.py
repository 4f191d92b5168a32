"""MIG timings: the planner (8 GPUs, mixed requests; the worst single request) and whole-process
``partition`` / ``mig apply`` / ``mig status`` on a simulated hgx-a100.

Usage: .venv/bin/python benchmarks/mig/run.py [--runs N]
Prints a table: case, median / p90 / min milliseconds over N runs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vgpukit.mig.planner import Occupant, plan, search
from vgpukit.nvml.table import model

REQUESTS = [  # one per GPU of an 8-GPU host: (existing layout, request)
    ([], ["1g.5gb"] * 7),
    ([], ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]),
    ([], ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]),
    ([("1g.5gb", 1), ("1g.5gb", 5)], ["2g.10gb", "1g.10gb", "1g.5gb"]),
    ([], ["4g.20gb", "2g.10gb", "1g.5gb"]),
    ([("3g.20gb", 4)], ["1g.10gb", "1g.5gb", "1g.5gb"]),
    ([], ["1g.10gb"] * 4),
    ([], ["7g.40gb"]),
]


def stats(ts: list[float]) -> tuple[str, str, str]:
    ts = sorted(ts)
    return f"{statistics.median(ts) * 1e3:.2f}", f"{ts[int(0.9 * (len(ts) - 1))] * 1e3:.2f}", f"{ts[0] * 1e3:.2f}"


def repeat(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=11)
    args = ap.parse_args()
    profiles = model("A100-SXM4-40GB").profiles
    by = {p.name: p for p in profiles}
    cases = [([Occupant(by[n].id, s, by[n].size, n) for n, s in occ], [by[n] for n in req]) for occ, req in REQUESTS]

    def plan_8() -> None:
        for occ, req in cases:
            plan(profiles, occ, req)

    rows = [("planner: 8 GPUs, mixed requests", *stats(repeat(plan_8, args.runs * 10)))]
    multisets = [
        [p for p, n in zip(profiles, counts, strict=True) for _ in range(n)]
        for counts in itertools.product(*(range(p.max_count + 1) for p in profiles))
    ]

    def all_multisets() -> None:
        for req in multisets:
            search(profiles, [], req)

    rows.append((f"planner: all {len(multisets)} A100 multisets", *stats(repeat(all_multisets, 3))))
    slowest = max(multisets, key=lambda req: min(repeat(lambda: search(profiles, [], req), 3)))
    name = ",".join(p.name for p in slowest)
    rows.append(
        (f"planner: slowest multiset ({name})", *stats(repeat(lambda: search(profiles, [], slowest), args.runs)))
    )

    vg = [sys.executable, "-m", "vgpukit"]
    # installed packages have their bytecode cached: let the child processes cache theirs too
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([*vg, "--help"], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        sim = str(Path(tmp) / "hgx")
        subprocess.run([*vg, "sim", "init", sim, "--profile", "hgx-a100"], check=True, stdout=subprocess.DEVNULL)
        part, again, status = [], [], []
        for i in range(args.runs):
            gpu = f"gpu{i % 8}"
            if i >= 8:  # start over on a fresh host once all 8 GPUs are carved
                subprocess.run([*vg, "sim", "init", sim, "--force"], check=True, stdout=subprocess.DEVNULL)
            cmd = [*vg, "--sim", sim, "partition", gpu, "--mig", "3g.20gb,2g.10gb,1g.5gb=2", "--reset"]
            part += repeat(lambda c=cmd: subprocess.run(c, check=True, stdout=subprocess.DEVNULL), 1)
            again += repeat(lambda c=cmd: subprocess.run(c, check=True, stdout=subprocess.DEVNULL), 1)
            status += repeat(
                lambda: subprocess.run(
                    [*vg, "--sim", sim, "mig", "status", "--json"], check=True, stdout=subprocess.DEVNULL
                ),
                1,
            )
        rows.append(("partition gpuN --mig 3g.20gb,2g.10gb,1g.5gb=2 --reset (process)", *stats(part)))
        rows.append(("same again: nothing to do (process)", *stats(again)))
        rows.append(("mig status --json, 8 GPUs (process)", *stats(status)))
        cfg = Path(tmp) / "c.yaml"
        cfg.write_text(
            "version: v1\nmig-configs:\n  mixed:\n    - devices: all\n      mig-enabled: true\n"
            '      mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}\n'
        )
        apply_t = []
        for _ in range(max(3, args.runs // 3)):
            subprocess.run([*vg, "sim", "init", sim, "--force"], check=True, stdout=subprocess.DEVNULL)
            cmd = [*vg, "--sim", sim, "mig", "apply", "-f", str(cfg), "--reset"]
            apply_t += repeat(lambda c=cmd: subprocess.run(c, check=True, stdout=subprocess.DEVNULL), 1)
        rows.append(("mig apply, 8 GPUs x 4 instances (process)", *stats(apply_t)))

    widths = [max(len(r[i]) for r in [("case", "median ms", "p90 ms", "min ms"), *rows]) for i in range(4)]
    for r in [("case", "median ms", "p90 ms", "min ms"), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
