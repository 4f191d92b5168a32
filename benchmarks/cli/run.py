"""Whole-process CLI start-up timings against the start-up goals (docs/decisions.md, "Start-up").

Usage: .venv/bin/python benchmarks/cli/run.py [--runs N] [--profiles P,P] [--only read|shim|other]

Every case runs as a whole process, N times, interleaved round by round with the baselines
(``python -c pass`` and ``python -c 'import click'``), so a machine whose speed drifts (a shared CI
runner) shifts all cases alike. vgpukit runs as an installed ``vgpukit`` script would: a script
made from pyproject's ``[project.scripts]`` entry, in a temporary bin directory put first on PATH;
the mdevctl shim is ``templates/bin/mdevctl`` run by ``sh`` with that PATH and ``VGPUKIT_SIM``.
The package is byte-compiled first (as an install does): without ``.pyc`` files every run would
compile each module again, which costs more than running it.

The table: command, median and minimum ms wall, the minimum over the minimum of ``import click``,
median CPU ms (user + system) and its excess over ``import click``'s, the target and PASS/MISS, judged
on the minimum wall time (on a shared machine the run least disturbed by other work). Goals:

* read-only commands (devices, topo, sriov list, mdev list, vgpu list, mig status) on every built-in
  simulated profile: <= 60 ms over ``python -c 'import click'``;
* the mdevctl shim's read verbs (``list``, ``list --defined --dumpjson``, ``types``): <= 60 ms wall.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
READ_TARGET_MS = 60.0  # over `python -c 'import click'`
SHIM_TARGET_MS = 60.0  # wall
READS = [["devices"], ["topo"], ["sriov", "list"], ["mdev", "list"], ["vgpu", "list"], ["mig", "status"]]
SHIM = [["list"], ["list", "--defined", "--dumpjson"], ["types"]]
SHIM_PROFILES = ("t4-mdev", "qemu-guest")  # the profiles with mdev parents


def entry_point() -> tuple[str, str]:
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'^vgpukit\s*=\s*"([\w.]+):(\w+)"', text, re.M)
    assert m, "no vgpukit entry in [project.scripts]"
    return m.group(1), m.group(2)


def make_script(bindir: Path) -> Path:
    """The ``vgpukit`` script an install makes from the entry point (as pip writes it)."""
    module, func = entry_point()
    script = bindir / "vgpukit"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    script.chmod(0o755)
    return script


class Case:
    def __init__(self, name: str, cmd: list[str], env: dict[str, str], kind: str, target: float | None) -> None:
        self.name, self.cmd, self.env, self.kind, self.target = name, cmd, env, kind, target
        self.times: list[float] = []
        self.cpu: list[float] = []  # user + system seconds of the process (and its children)

    def run(self) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(self.cmd, env=self.env, check=True, stdout=subprocess.DEVNULL)
        self.times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)

    def ms(self) -> tuple[float, float, float]:
        """(median wall, minimum wall, median cpu) in ms."""
        return statistics.median(self.times) * 1e3, min(self.times) * 1e3, statistics.median(self.cpu) * 1e3


def print_table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--profiles", default="", help="comma-separated built-in profiles (default: all)")
    ap.add_argument("--only", choices=("read", "shim", "other"), help="only this group of cases")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp_name:
        tmp = Path(tmp_name)
        bindir = tmp / "bin"
        bindir.mkdir()
        vg = [str(make_script(bindir))]
        env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "vgpukit")], check=True)
        env.pop("VGPUKIT_SIM", None)
        env.pop("VGPUKIT_ROOT", None)
        listed = subprocess.run([*vg, "sim", "profiles"], env=env, check=True, capture_output=True, text=True)
        profiles = (
            args.profiles.split(",") if args.profiles else [ln.split()[0] for ln in listed.stdout.splitlines()[1:]]
        )
        hosts: dict[str, str] = {}
        for p in profiles:
            hosts[p] = str(tmp / p)
            subprocess.run(
                [*vg, "sim", "init", hosts[p], "--profile", p], env=env, check=True, stdout=subprocess.DEVNULL
            )
        bare = Case("python -c pass", [sys.executable, "-c", "pass"], env, "base", None)
        click = Case("python -c 'import click'", [sys.executable, "-c", "import click"], env, "base", None)
        cases = [bare, click]
        if args.only in (None, "other"):
            cases.append(Case("vgpukit --help", [*vg, "--help"], env, "other", None))
        for p in profiles if args.only in (None, "read") else ():
            for words in READS:
                cases.append(
                    Case(f"{' '.join(words)} <{p}>", [*vg, "--sim", hosts[p], *words], env, "read", READ_TARGET_MS)
                )
        for p in [p for p in SHIM_PROFILES if p in hosts] if args.only in (None, "shim") else ():
            shim_env = {**env, "VGPUKIT_SIM": hosts[p]}
            for words in SHIM:
                cmd = ["sh", str(REPO / "templates/bin/mdevctl"), *words]
                cases.append(Case(f"mdevctl shim: {' '.join(words)} <{p}>", cmd, shim_env, "shim", SHIM_TARGET_MS))
        for c in cases:  # one warm-up each
            c.run()
            c.times.clear()
        for _ in range(args.runs):  # interleaved rounds
            for c in cases:
                c.run()
    _, click_min, click_cpu = click.ms()
    rows = []
    for c in cases:
        med, low, cpu = c.ms()
        judged = low - click_min if c.kind == "read" else low
        target = "-" if c.target is None else f"<= {c.target:.0f}" + (" over click" if c.kind == "read" else " wall")
        verdict = "-" if c.target is None else ("PASS" if judged <= c.target else "MISS")
        rows.append(
            (
                c.name,
                f"{med:.1f}",
                f"{low:.1f}",
                f"{low - click_min:+.1f}",
                f"{cpu:.1f}",
                f"{cpu - click_cpu:+.1f}",
                target,
                verdict,
            )
        )
    print(
        f"{args.runs} runs each, interleaved, in ms. The machine may be shared: the minimum wall time is the run"
        " least disturbed by other work and is what the verdict uses; the median and the CPU time are shown beside it."
    )
    head = ("command", "wall median", "wall min", "min over click", "cpu median", "cpu over click", "target", "verdict")
    print_table(head, rows)
    return 0 if all(r[-1] != "MISS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
