"""Cost of one exporter scrape on a large simulated host.

Usage: .venv/bin/python benchmarks/exporter/run.py [--scrapes N] [--quick]

Hosts (built in /dev/shm, as /sys is in memory on a real host):
  1024-vf        4 ConnectX-6 PFs with 256 VFs each, all bound to vfio-pci (1024 slices, 1024 health devices)
  8gpu-64tenants the hgx-a100 profile with a QoS daemon running 64 tenants (8 per GPU, each a real process)
For each it prints the scrape's wall time (p50, p99) and the CPU time one scrape costs the exporter
(p50, p99: user + system of the process, measured around the scrape), the number of series, and the
read system calls of one scrape (in proportion to the devices: each file read once).
The scrape runs in-process, as it does in the long-running exporter (the CLI start-up is not counted).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "scale"))

from hosts import sriov_host, write_profile  # noqa: E402

from vgpukit.cli.main import main  # noqa: E402
from vgpukit.clikit.context import App  # noqa: E402
from vgpukit.metrics.collector import HostCollector, text  # noqa: E402
from vgpukit.wiring import Wiring  # noqa: E402


def _cli(sim: Path, *args: str) -> None:
    with open(os.devnull, "w") as null, redirect_stdout(null):
        rc = main(["--sim", str(sim), *args])
    if rc != 0:
        raise SystemExit(f"vgpukit {' '.join(args)}: exit {rc}")


def vf_host(base: Path, quick: bool) -> Path:
    per_pf = 16 if quick else 256
    sim = base / "vf"
    profile = write_profile(base / "vf.json", sriov_host(4, per_pf))
    _cli(sim, "sim", "init", str(sim), "--profile", str(profile))
    for k in range(4):
        _cli(sim, "sriov", "enable", f"0000:{0x10 + 8 * k:02x}:00.0", "--vfs", str(per_pf), "--driver", "vfio-pci")
    return sim


@contextmanager
def qos_host(base: Path, quick: bool) -> Iterator[Path]:
    per_gpu = 1 if quick else 8
    sim = base / "qos"
    _cli(sim, "sim", "init", str(sim), "--profile", "hgx-a100")
    env = dict(os.environ, PYTHONPATH=str(REPO), VGPUKIT_SIM=str(sim))
    log = open(base / "daemon.log", "wb")  # noqa: SIM115
    daemon = subprocess.Popen([sys.executable, "-m", "vgpukit", "qos", "daemon"], env=env, stdout=log, stderr=log)
    tenants: list[subprocess.Popen[bytes]] = []
    try:
        sock = sim / "run/vgpukit/qos/control.sock"
        end = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < end:
            time.sleep(0.05)
        for gpu in range(8):
            for t in range(per_gpu):
                p = subprocess.Popen(["sleep", "3600"])
                tenants.append(p)
                args = ["--class", "offline", "--share", "10", "--pid", str(p.pid), "--demand", "sample"]
                _cli(sim, "qos", "tenant", "add", f"gpu{gpu}", f"t{gpu}-{t}", *args)
        yield sim
    finally:
        daemon.terminate()
        daemon.wait()
        log.close()
        for p in tenants:
            p.kill()
            p.wait()


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _opens(fn: Callable[[], str]) -> tuple[str, int]:
    """fn's result and the read system calls it made (``syscr`` of /proc/self/io: a small file is
    one read, so this stands for the files read; the simulated driver's own reads are included)."""
    before = _syscr()
    out = fn()
    return out, _syscr() - before


def _syscr() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    return 0


def measure(sim: Path, scrapes: int) -> tuple[list[float], list[float], int, int]:
    app = App.from_env(
        None, str(sim), json=False, dry_run=False, debug=False, wait=30.0, command="bench", wiring=Wiring()
    )
    collector = HostCollector(app.host, lambda: app.nvml)
    text(collector)  # warm: imports, NVML opened once as in the long-running exporter
    walls, cpus, reads, series = [], [], 0, 0
    for _ in range(scrapes):
        c0, w0 = _cpu(), time.perf_counter()
        out, reads = _opens(lambda: text(collector))
        walls.append(time.perf_counter() - w0)
        cpus.append(_cpu() - c0)
        series = sum(1 for line in out.splitlines() if line and not line.startswith("#"))
    app.close()
    return walls, cpus, series, reads


def _q(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=30)
    ap.add_argument("--quick", action="store_true", help="small hosts, 5 scrapes (a smoke run)")
    args = ap.parse_args(argv)
    scrapes = 5 if args.quick else args.scrapes
    rows = []
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        base = Path(tmp)
        rows.append(("1024-vf" if not args.quick else "64-vf", *measure(vf_host(base, args.quick), scrapes)))
        with qos_host(base, args.quick) as sim:
            name = "8gpu-64tenants" if not args.quick else "8gpu-8tenants"
            rows.append((name, *measure(sim, scrapes)))
    print(f"{'host':<16} {'wall p50':>9} {'wall p99':>9} {'cpu p50':>9} {'cpu p99':>9} {'series':>7} {'reads':>7}")
    for name, walls, cpus, series, reads in rows:
        print(
            f"{name:<16} {_q(walls, 0.5) * 1000:>7.1f}ms {_q(walls, 0.99) * 1000:>7.1f}ms"
            f" {_q(cpus, 0.5) * 1000:>7.1f}ms {_q(cpus, 0.99) * 1000:>7.1f}ms {series:>7} {reads:>7}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
