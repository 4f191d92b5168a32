"""``vgpukit apply`` on a simulated HGX A100 host: whole process, median of --runs runs.

Usage: .venv/bin/python benchmarks/fleet/run.py [--runs N]

Cases (each a fresh ``vgpukit`` process; the host config is benchmarks/fleet's CONFIG):
  full apply     a fresh hgx-a100 host: 4 ConnectX-6 PFs x 8 VFs (2 of them on vfio-pci), nvme0 on
                 vfio-pci, MIG on all 8 A100s (3g.20gb + 2g.10gb + 1g.5gb x 2), a QoS config;
                 the host is re-created before each run (not timed)
  no-op apply    the same config on the host it produced: plans everything, changes nothing
  diff           the same, read-only (no lock, no journal)
  export         the host as a document
  startup        ``python -c pass``, for scale
Wall time and CPU time (user + system of the child) are the medians of the runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = """\
version: vgpukit.host/v1
configs:
  a100-node:
    sriov:
      - device: nic0
        vfs: 8
        driver: vfio-pci
      - device: nic1
        vfs: 8
        driver: vfio-pci
      - device: nic2
        vfs: 8
      - device: nic3
        vfs: 8
    vfio:
      - device: nvme0
    mig: mixed
    qos:
      gpus:
        pool:                  # a label, not a GPU: every A100 is in MIG mode here (docs/qos.md, GPU keys)
          policy: fixed-share
          tenants:
            a: {share: 70, cgroup: /sys/fs/cgroup/a}
            b: {share: 30, cgroup: /sys/fs/cgroup/b}
mig-configs:
  mixed:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}
"""


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def vgpukit() -> list[str]:
    return [sys.executable, "-m", "vgpukit"]


def timed(cmd: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env(), check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vgpukit-fleet-bench-", dir=os.environ.get("TMPDIR")))
    try:
        cfg = work / "host.yaml"
        cfg.write_text(CONFIG)
        template = work / "template"
        subprocess.run(
            [*vgpukit(), "sim", "init", str(template), "--profile", "hgx-a100"],
            env=env(),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        sim = work / "host"
        apply = [*vgpukit(), "--sim", str(sim), "apply", "-f", str(cfg), "-c", "a100-node"]
        rows: dict[str, list[tuple[float, float]]] = {k: [] for k in ("full apply", "no-op apply", "diff", "export")}
        steps = 0
        for _ in range(args.runs):
            shutil.rmtree(sim, ignore_errors=True)
            shutil.copytree(template, sim, symlinks=True)
            rows["full apply"].append(timed(apply))
            rows["no-op apply"].append(timed(apply))
            rows["diff"].append(timed([*vgpukit(), "--sim", str(sim), "diff", "-f", str(cfg), "-c", "a100-node"]))
            rows["export"].append(timed([*vgpukit(), "--sim", str(sim), "export"]))
        shutil.rmtree(sim, ignore_errors=True)
        shutil.copytree(template, sim, symlinks=True)
        out = subprocess.run([*apply, "--dry-run", "--json"], env=env(), check=True, capture_output=True, text=True)
        steps = out.stdout.count('"area":')
        rows["startup (python -c pass)"] = [timed([sys.executable, "-c", "pass"]) for _ in range(args.runs)]
        print(f"hgx-a100, full apply = {steps} steps; median of {args.runs} runs (whole process)\n")
        print("| case | wall ms | CPU ms |")
        print("| --- | ---: | ---: |")
        for name, samples in rows.items():
            wall = statistics.median(w for w, _ in samples) * 1000
            cpu = statistics.median(c for _, c in samples) * 1000
            print(f"| {name} | {wall:.0f} | {cpu:.0f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
