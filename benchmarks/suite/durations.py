"""Where the test suite's time goes: pytest's ``--durations=0`` report summed per test directory.

    python -m pytest -q -p no:cacheprovider --durations=0 > run.log   (add -vv to keep the short ones)
    python benchmarks/suite/durations.py run.log [after.log]

One log: seconds per directory (setup, call, teardown, total) and its share of the session. Two logs:
the same per directory, before and after, and the difference. The last line is pytest's own
``in N s`` of each log (the wall time). Setup times of the first case of a module include its module
and session fixtures; a case that waits for the background guest shows the wait there.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S+?)::")
WALL = re.compile(r" in ([0-9.]+)s")


def sums(path: Path) -> tuple[dict[str, dict[str, float]], float | None]:
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    wall = None
    for line in path.read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m:
            seconds, phase, file = float(m[1]), m[2], m[3]
            parts = file.split("/")
            where = "/".join(parts[:2]) if parts[0] == "tests" and len(parts) > 2 else file
            per[where][phase] += seconds
            continue
        w = WALL.search(line)
        if w and ("passed" in line or "failed" in line):
            wall = float(w[1])
    return per, wall


def total(d: dict[str, float]) -> float:
    return sum(d.values())


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [sums(Path(a)) for a in argv]
    dirs = sorted({d for per, _ in runs for d in per}, key=lambda d: -total(runs[0][0].get(d, {})))
    if len(runs) == 1:
        per, wall = runs[0]
        grand = sum(total(v) for v in per.values()) or 1.0
        print(f"{'directory':<22} {'setup':>8} {'call':>8} {'teardown':>9} {'total':>8} {'share':>6}")
        for d in dirs:
            v = per[d]
            print(f"{d:<22} {v['setup']:8.1f} {v['call']:8.1f} {v['teardown']:9.1f} {total(v):8.1f} "
                  f"{100 * total(v) / grand:5.1f}%")  # fmt: skip
        print(f"{'sum':<22} {'':>8} {'':>8} {'':>9} {grand:8.1f}")
        print(f"pytest wall time: {wall if wall is not None else '?'} s")
        return 0
    (before, wall_b), (after, wall_a) = runs
    print(f"{'directory':<22} {'before':>8} {'after':>8} {'diff':>8}")
    for d in dirs:
        b, a = total(before.get(d, {})), total(after.get(d, {}))
        print(f"{d:<22} {b:8.1f} {a:8.1f} {a - b:+8.1f}")
    sb, sa = sum(total(v) for v in before.values()), sum(total(v) for v in after.values())
    print(f"{'sum':<22} {sb:8.1f} {sa:8.1f} {sa - sb:+8.1f}")
    print(f"pytest wall time: before {wall_b} s, after {wall_a} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
