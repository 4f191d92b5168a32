"""Cost at scale: whole-process vgpukit commands on simulated hosts of growing size.

Usage: .venv/bin/python benchmarks/scale/run.py [--runs N] [--quick] [--cases a,b] [--save F] [--before F]

For each case and size it prints the wall time (the fastest of --runs runs: the least disturbed by
other load on the machine), the CPU time (user + system, also the least of the runs) and, from one
run under ``strace -f``, the syscall counts: all of them, the simulator's share (the simulated kernel and
NVIDIA driver run inside the vgpukit process; benchmarks/scale/probe.py marks where they start
and end), and the product's own: readlink, open, stat family, getdents, and how often a file under
the host's /sys was opened or readlink'ed again after its first time ("re-reads", and the most any
one path was). The simulator's CPU share ("sim cpu") comes from a run of the probe.
Then per case the cost exponent k of the best least-squares fit cost(n) = a + b * n**k
for the wall time, the CPU time and the syscall count: the fixed price of starting the CLI goes
into a, so a linear command scores 1.0; "flat" when the largest size costs under twice the smallest.
The verdict judges the product's share (simulator excluded); the simulator's is shown next to it.

Cases (sizes are VFs, mdev instances or GPUs):
  sriov-enable   one PF with N VFs possible: ``sriov enable PF --vfs N --driver vfio-pci``
  topo, devices, sriov-list   4 PFs with N/4 VFs each enabled at boot (N VFs on the host)
  mdev-create    N/16 Tesla T4 parents: ``mdev create --type nvidia-222 --count N`` (16 x 1 GB each)
  mdev-list      the host that mdev-create left (N instances)
  mig-apply      N A100s: ``mig apply`` of a mixed 4-instance config to all of them (with --reset)
  mig-status     the host that mig-apply left
  startup        read-only commands on the small qemu-guest host, next to ``python -c pass`` and to
                 importing click and the standard modules every command uses (vgpukit's own share)
--save writes the results as JSON; --before F adds F's wall time and syscalls to the table.
The simulated hosts live in /dev/shm (--dir to change): in memory, as /sys is on a real host; on a
disk file system creating a VF's files and links costs ~0.5 ms each in the kernel, which would swamp
what is measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hosts import MIG_CONFIG, mdev_host, mig_host, sriov_host, write_profile
from probe import MARK_IN, MARK_OUT, SIM_CPU_ENV

REPO = Path(__file__).resolve().parents[2]
SIZES = [16, 64, 256, 1024]
GPU_SIZES = [8, 16, 32, 64]
TARGET_EXPONENT = 1.05
SYSCALL_RE = re.compile(r"^\d+\s+(\w+)\(")
PATH_RE = re.compile(r'^\d+\s+(openat|readlink|readlinkat)\((?:AT_FDCWD, |\d+<?[^,]*>?, )?"([^"]+)"(.*)$')
STAT = {"stat", "lstat", "newfstatat", "fstatat64", "statx", "access", "faccessat", "faccessat2"}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.pop("PYTHONDONTWRITEBYTECODE", None)  # installed code has its bytecode cached; let ours be too
    e.pop("VGPUKIT_SIM", None)
    e.pop("VGPUKIT_ROOT", None)
    return e


def vg(*args: str) -> list[str]:
    return [sys.executable, "-m", "vgpukit", *args]


def run(cmd: list[str], check: bool = True) -> None:
    res = subprocess.run(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check and res.returncode != 0:
        raise SystemExit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}")


def sim_init(where: Path, profile: dict[str, Any] | str) -> Path:
    name = profile if isinstance(profile, str) else str(write_profile(where.with_suffix(".json"), profile))
    run(vg("sim", "init", str(where), "--profile", name, "--force"))
    return where


def fresh(pristine: Path, work: Path) -> None:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(pristine, work, symlinks=True)


def syscalls(cmd: list[str], sys_root: Path, log: Path) -> dict[str, int]:
    """Counts from one run under strace; the simulator's share is what runs between the probe's marks."""
    subprocess.run(["strace", "-f", "-qq", "-o", str(log), *cmd], env=env(), stdout=subprocess.DEVNULL, check=True)
    names: Counter[str] = Counter()
    paths: Counter[str] = Counter()
    prefix = str(sys_root) + "/"
    sim = depth = 0
    with open(log, errors="replace") as fh:
        for line in fh:
            m = SYSCALL_RE.match(line)
            if not m:
                continue
            if MARK_IN in line or MARK_OUT in line:
                depth += 1 if MARK_IN in line else -1
                continue
            if depth:
                sim += 1
                continue
            names[m.group(1)] += 1
            p = PATH_RE.match(line)
            if p and p.group(2).startswith(prefix) and not re.search(r"O_WRONLY|O_RDWR|O_CREAT", p.group(3)):
                paths[p.group(2)] += 1
    log.unlink()
    return {
        "syscalls": sum(names.values()) + sim,
        "sim": sim,
        "readlink": names["readlink"] + names["readlinkat"],
        "open": names["openat"] + names["open"],
        "stat": sum(names[s] for s in STAT),
        "getdents": names["getdents64"] + names["getdents"],
        "rereads": sum(paths.values()) - len(paths),
        "max_per_path": max(paths.values(), default=0),
    }


def measure(cmd: list[str], runs: int, tmp: Path, root: Path | None, prepare: Callable[[], None] | None) -> dict:
    probe = str(Path(__file__).resolve().parent / "probe.py")
    probed = [sys.executable, probe, *cmd[3:]] if cmd[1:3] == ["-m", "vgpukit"] else cmd
    walls, cpus, sims = [], [], []
    for _ in range(runs):
        if prepare:
            prepare()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        run(cmd)
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        if probed is not cmd:  # the simulator's CPU share, from a probed run
            if prepare:
                prepare()
            out = tmp / "simcpu"
            os.environ[SIM_CPU_ENV] = str(out)
            try:
                run(probed)
            finally:
                del os.environ[SIM_CPU_ENV]
            sims.append(float(out.read_text()))
    if prepare:
        prepare()
    counts = syscalls(probed, (root or tmp) / "sys", tmp / "strace.log")
    return {"wall": min(walls), "cpu": min(cpus), "sim_cpu": min(sims, default=0.0), **counts}


def sized_cases(tmp: Path, runs: int, sizes: list[int], gpu_sizes: list[int], only: set[str]) -> list[dict]:
    out: list[dict] = []

    def want(case: str) -> bool:
        return not only or case in only

    def add(case: str, n: int, res: dict) -> None:
        out.append({"case": case, "n": n, **res})
        print(f"  {case:13} n={n:<5} {res['wall']:.3f} s  {res['syscalls']} syscalls", file=sys.stderr, flush=True)

    for n in sizes:
        if want("sriov-enable"):
            pristine = sim_init(tmp / f"sriov1-{n}", sriov_host(1, n))
            work = tmp / "work"
            cmd = vg("--sim", str(work), "sriov", "enable", "0000:10:00.0", "--vfs", str(n), "--driver", "vfio-pci")
            add("sriov-enable", n, measure(cmd, runs, tmp, work, lambda p=pristine, w=work: fresh(p, w)))
            shutil.rmtree(pristine)
        if want("topo") or want("devices") or want("sriov-list"):
            host = sim_init(tmp / f"sriov4-{n}", sriov_host(4, max(1, n // 4), max(1, n // 4)))
            for case, args in (("topo", ["topo"]), ("devices", ["devices"]), ("sriov-list", ["sriov", "list"])):
                if want(case):
                    add(case, n, measure(vg("--sim", str(host), *args), runs, tmp, host, None))
            shutil.rmtree(host)
        if want("mdev-create") or want("mdev-list"):
            pristine = sim_init(tmp / f"t4-{n}", mdev_host(max(1, n // 16)))
            work = tmp / "work"
            cmd = vg("--sim", str(work), "mdev", "create", "--type", "nvidia-222", "--count", str(n))
            add("mdev-create", n, measure(cmd, runs, tmp, work, lambda p=pristine, w=work: fresh(p, w)))
            if want("mdev-list"):  # work now holds the n instances the strace run created
                add("mdev-list", n, measure(vg("--sim", str(work), "mdev", "list"), runs, tmp, work, None))
            shutil.rmtree(pristine)
    cfg = tmp / "mig.yaml"
    cfg.write_text(MIG_CONFIG)
    for g in gpu_sizes:
        if want("mig-apply") or want("mig-status"):
            pristine = sim_init(tmp / f"a100-{g}", mig_host(g))
            work = tmp / "work"
            cmd = vg("--sim", str(work), "mig", "apply", "-f", str(cfg), "--reset")
            add("mig-apply", g, measure(cmd, runs, tmp, work, lambda p=pristine, w=work: fresh(p, w)))
            if want("mig-status"):
                add("mig-status", g, measure(vg("--sim", str(work), "mig", "status"), runs, tmp, work, None))
            shutil.rmtree(pristine)
    return out


STARTUP = [
    ("python -c pass", None),
    ("python -c 'import click'", ["-c", "import click"]),
    ("python: click + stdlib used", ["-c", "import click, dataclasses, json, logging, pathlib, typing"]),
    ("vgpukit --version", ["--version"]),
    ("devices", ["devices"]),
    ("topo", ["topo"]),
    ("sriov list", ["sriov", "list"]),
    ("mdev list", ["mdev", "list"]),
    ("vgpu list", ["vgpu", "list"]),
    ("mig status", ["mig", "status"]),
]


def startup_cases(tmp: Path, runs: int) -> list[dict]:
    host = sim_init(tmp / "guest", "qemu-guest")
    out = []
    for name, args in STARTUP:
        if args is None or args[0] == "-c":
            cmd = [sys.executable, *(args or ["-c", "pass"])]
        else:
            cmd = vg(*(args if args[0].startswith("--") else ["--sim", str(host), *args]))
        res = measure(cmd, max(runs, 9), tmp, host, None)
        out.append({"case": "startup", "n": name, **res})
        print(f"  startup {name:18} {res['wall'] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    return out


def exponent(points: list[tuple[int, float]]) -> float | None:
    """The k of the best least-squares fit cost(n) = a + b * n**k (b > 0), by a search over k: the
    constant a (starting the CLI) drops out, so a linear command scores 1.0 however slow it starts."""
    if len(points) < 3:
        return None
    best: tuple[float, float] | None = None
    for step in range(60, 601):
        k = step / 200
        xs = [n**k for n, _ in points]
        ys = [y for _, y in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        den = sum((x - mx) ** 2 for x in xs)
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den
        if b <= 0:
            continue
        err = sum((my + b * (x - mx) - y) ** 2 for x, y in zip(xs, ys, strict=True))
        if best is None or err < best[0]:
            best = (err, k)
    return best[1] if best else None


def growth(points: list[tuple[int, float]]) -> float | None:
    """The exponent, or None ("flat") when the cost at the largest size is under twice the cost at the
    smallest: then the start of the process dominates and no exponent can be told from the noise."""
    if points[-1][1] < 2 * points[0][1]:
        return None
    return exponent(points)


def _exp(e: float | None) -> str:
    return "flat" if e is None else f"{e:.2f}"


def show(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))


def report(results: list[dict], before: list[dict] | None) -> None:
    old = {(r["case"], str(r["n"])): r for r in before or []}
    head = ["case", "n", "wall s", "cpu s", "sim cpu", "syscalls", "in sim", "readlink", "open", "stat", "getdents"]
    head += ["re-reads", "max/path"]
    if before is not None:
        head += ["before wall", "before cpu", "before syscalls"]
    rows = [head]
    for r in results:
        row = [r["case"], str(r["n"]), f"{r['wall']:.3f}", f"{r['cpu']:.3f}", f"{r.get('sim_cpu', 0):.3f}"]
        row += [str(r["syscalls"]), str(r["sim"])]
        row += [str(r[k]) for k in ("readlink", "open", "stat", "getdents", "rereads", "max_per_path")]
        if before is not None:
            b = old.get((r["case"], str(r["n"])))
            row += [f"{b['wall']:.3f}", f"{b.get('cpu', 0):.3f}", str(b["syscalls"])] if b else ["-", "-", "-"]
        rows.append(row)
    show(rows)
    bare = next((r for r in results if r["case"] == "startup" and r["n"] == "python -c pass"), None)
    click = next((r for r in results if r["case"] == "startup" and r["n"].endswith("'import click'")), None)
    floor = next((r for r in results if r["case"] == "startup" and r["n"].endswith("stdlib used")), None)
    print()
    rows = [["case", "sizes", "exponent: cpu", "product cpu", "syscalls", "product syscalls", "target", "verdict"]]
    for case in dict.fromkeys(r["case"] for r in results if r["case"] != "startup"):
        rs = [r for r in results if r["case"] == case]
        series = {
            "cpu": [(r["n"], r["cpu"]) for r in rs],
            "product cpu": [(r["n"], r["cpu"] - r.get("sim_cpu", 0)) for r in rs],
            "syscalls": [(r["n"], r["syscalls"]) for r in rs],
            "product syscalls": [(r["n"], r["syscalls"] - r["sim"]) for r in rs],
        }
        exps = {k: growth(v) for k, v in series.items()}
        ok = all(e is None or e <= TARGET_EXPONENT for k, e in exps.items() if k.startswith("product"))
        rows.append([case, f"{rs[0]['n']}..{rs[-1]['n']}", *(_exp(e) for e in exps.values()),
                     f"<= {TARGET_EXPONENT}", "PASS" if ok else "MISS"])  # fmt: skip
    show(rows)
    print()
    checks: list[tuple[str, float, float]] = []
    for r in results:
        if r["case"] == "sriov-enable" and r["n"] == 256:
            checks += [("sriov enable 256 vfio: readlinks per VF", r["readlink"] / 256, 4.0)]
            checks += [("sriov enable 256 vfio: syscalls", r["syscalls"], 20000)]
            checks += [("sriov enable 256 vfio: syscalls outside the simulator", r["syscalls"] - r["sim"], 20000)]
        if r["case"] == "topo" and r["n"] == 1024:
            checks += [("topo on the 1024-VF host: seconds", r["wall"], 0.15)]
        # the start-up goal (docs/decisions.md, "Start-up"; benchmarks/cli/run.py measures every profile)
        if r["case"] == "startup" and click and not r["n"].startswith("python") and r["n"] != "vgpukit --version":
            checks += [(f"{r['n']} over import click: ms", (r["wall"] - click["wall"]) * 1e3, 60.0)]
    if bare and click:
        print(f"importing click alone costs {(click['wall'] - bare['wall']) * 1e3:.1f} ms over python -c pass")
    if bare and floor:
        print(f"importing click, dataclasses, json, logging, pathlib and typing costs "
              f"{(floor['wall'] - bare['wall']) * 1e3:.1f} ms over python -c pass\n")  # fmt: skip
    rows = [["goal", "measured", "target", "verdict"]]
    rows += [[g, f"{v:.1f}", f"<= {t:g}", "PASS" if v <= t else "MISS"] for g, v, t in checks]
    show(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="sizes 16..256 and 8..32 GPUs")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--save", type=Path, help="write the results as JSON")
    ap.add_argument("--before", type=Path, help="results saved by an earlier run, to compare")
    ap.add_argument("--dir", type=Path, help="where the simulated hosts live (default: /dev/shm, in memory as /sys is)")
    args = ap.parse_args()
    if shutil.which("strace") is None:
        raise SystemExit("strace is needed to count syscalls (apt-get install -y strace)")
    only = {c for c in args.cases.split(",") if c}
    sizes, gpu_sizes = (SIZES[:-1], GPU_SIZES[:-1]) if args.quick else (SIZES, GPU_SIZES)
    where = args.dir or (Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None)
    with tempfile.TemporaryDirectory(prefix="vgpukit-scale-", dir=where) as t:
        tmp = Path(t)
        results = startup_cases(tmp, args.runs) if not only or "startup" in only else []
        results += sized_cases(tmp, args.runs, sizes, gpu_sizes, only)
    if args.save:
        args.save.write_text(json.dumps(results, indent=1))
    report(results, json.loads(args.before.read_text()) if args.before else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
