"""``vgpukit remediate``: quarantine to release, per simulated profile.

Usage: .venv/bin/python benchmarks/remedy/run.py [--runs N]

Each case is a fresh simulated host set up as below (not timed), then one ``vgpukit remediate DEVICE``
process (timed: the whole process, and its own quarantine-to-release time, which the run records in
``/run/vgpukit/remedy/history.json``). Every run is checked: exit 0, the device released, healthy.

  hgx-a100 gpu3     MIG 3g.20gb + 2g.10gb + 1g.5gb, XID 95: 6 MIG instances down and up, nvidia-smi reset
  t4-mdev gpu0      4 legacy vGPUs (GRID T4-2Q mdevs), XID 95: 4 mdevs removed and re-created (same UUIDs)
  h100-vgpu gpu0    32 VFs, 8 of them with a vGPU (H100-4C), XID 95: vGPU types cleared, VFs down, reset,
                    32 VFs back with their drivers, 8 vGPU types set again
  qemu-guest nvme0  3 VFs on vfio-pci: VFs down, the PF's function reset (sysfs reset), VFs and bindings back

No VM holds the device here (draining is libvirt's time: a guest's shutdown, a managed save); the
drain step still looks for holders. Wall and CPU (user + system of the child) are medians; "in-run" is
the median of the run's own quarantine-to-release seconds.
"""

from __future__ import annotations

import argparse
import json
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
CASES = {
    "hgx-a100 gpu3": ("hgx-a100", "gpu3", [["partition", "gpu3", "--mig", "3g.20gb,2g.10gb,1g.5gb"]], True),
    "t4-mdev gpu0": ("t4-mdev", "gpu0", [["vgpu", "create", "gpu0", "--type", "T4-2Q", "--count", "4"]], True),
    "h100-vgpu gpu0": ("h100-vgpu", "gpu0", [["vgpu", "create", "gpu0", "--type", "H100-4C", "--count", "8"]], True),
    "qemu-guest nvme0": (
        "qemu-guest",
        "nvme0",
        [["sriov", "enable", "nvme0", "--vfs", "3", "--driver", "vfio-pci"]],
        False,
    ),
}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def vgpukit(sim: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "vgpukit", "--sim", str(sim), *args]


def timed(cmd: list[str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env(), check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vgpukit-remedy-bench-", dir=os.environ.get("TMPDIR")))
    rows = []
    try:
        for name, (profile, device, setup, xid) in CASES.items():
            template = work / f"template-{profile}"
            subprocess.run([sys.executable, "-m", "vgpukit", "sim", "init", str(template), "--profile", profile],
                           env=env(), check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            for cmd in setup:
                subprocess.run(vgpukit(template, *cmd), env=env(), check=True, stdout=subprocess.DEVNULL)
            samples, inrun, steps = [], [], 0
            for _ in range(args.runs):
                sim = work / "host"
                shutil.rmtree(sim, ignore_errors=True)
                shutil.copytree(template, sim, symlinks=True)
                if xid:
                    subprocess.run(vgpukit(sim, "sim", "fault", "xid", device, "95"), env=env(), check=True,
                                   stdout=subprocess.DEVNULL)  # fmt: skip
                wall, cpu, out = timed(vgpukit(sim, "remediate", device, "--json"))
                doc = json.loads(out)
                assert doc["plan"][-1].startswith("release"), doc["plan"]
                steps = len(doc["plan"])
                runs = json.loads((sim / "run" / "vgpukit" / "remedy" / "history.json").read_text())["runs"]
                inrun.append(runs[-1]["seconds"])
                samples.append((wall, cpu))
                assert not list((sim / "var" / "lib" / "vgpukit" / "quarantine").glob("*.json")), "left quarantined"
            wall = statistics.median(w for w, _ in samples)
            rows.append((name, steps, wall, statistics.median(c for _, c in samples), statistics.median(inrun)))
        print(f"vgpukit remediate, quarantine to release; median of {args.runs} runs (whole process)\n")
        print("| profile, device | steps | in-run s | wall s | CPU s |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, steps, wall, cpu, own in rows:
            print(f"| {name} | {steps} | {own:.2f} | {wall:.2f} | {cpu:.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
