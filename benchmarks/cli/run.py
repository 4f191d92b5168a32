"""Whole-process CLI timings against the targets of the foundation issue.

Usage: .venv/bin/python benchmarks/cli/run.py [--runs N]
Prints a table: command, median / p90 / min seconds over N runs, target, verdict.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def print_table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    vg = [sys.executable, "-m", "vgpukit"]
    with tempfile.TemporaryDirectory() as tmp:
        sim = str(Path(tmp) / "hgx")
        subprocess.run([*vg, "sim", "init", sim, "--profile", "hgx-a100"], check=True, stdout=subprocess.DEVNULL)
        cases = [
            ("vgpukit --help", [*vg, "--help"], 0.15),
            ("vgpukit --sim <hgx-a100> topo --json", [*vg, "--sim", sim, "topo", "--json"], 0.30),
            ("vgpukit --sim <hgx-a100> topo --matrix", [*vg, "--sim", sim, "topo", "--matrix"], None),
            ("vgpukit --sim <hgx-a100> devices", [*vg, "--sim", sim, "devices"], None),
            ("vgpukit sim init (hgx-a100)", [*vg, "sim", "init", sim, "--force"], None),
        ]
        rows = []
        for name, cmd, target in cases:
            ts = sorted(timed(cmd, args.runs))
            med = statistics.median(ts)
            p90 = ts[int(0.9 * (len(ts) - 1))]
            verdict = "-" if target is None else ("PASS" if med <= target else "MISS")
            rows.append(
                (name, f"{med:.3f}", f"{p90:.3f}", f"{ts[0]:.3f}", "-" if target is None else f"<= {target}", verdict)
            )
    print_table(("command", "median s", "p90 s", "min s", "target", "verdict"), rows)
    return 0 if all(r[-1] != "MISS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
