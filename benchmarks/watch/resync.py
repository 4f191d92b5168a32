"""What one safety-net full re-read (the watch's ``--resync``) costs each door, in CPU milliseconds.

Usage: .venv/bin/python benchmarks/watch/resync.py [--samples N] [--hosts hgx-a100,1024-vf]

Each door's views (the device plugin's, the DRA plugin's, the exporter's: as their commands build them)
over one simulated host, in this process: one full refresh first (the door's start), then ``--samples``
full refreshes (``Touch.everything``, what the safety net does), each timed by the process's CPU clock
(user + system, the host's simulated files read through the host door). Prints p50 and max per door and
what that costs per hour at a given ``--resync``; beside it, an NVML-only pass (the views that depend on NVML
recomputed over the kept PCI snapshot).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "watch"))

import run as watch_bench  # type: ignore[import-not-found]  # noqa: E402

from vgpukit.clikit.context import App  # noqa: E402
from vgpukit.clikit.watch import opener  # noqa: E402
from vgpukit.health.watched import health_views  # noqa: E402
from vgpukit.k8s.cli_host import _options  # noqa: E402
from vgpukit.k8s.watched import device_plugin_views, dra_views  # noqa: E402
from vgpukit.node.inventory import Options  # noqa: E402
from vgpukit.node.views import inventory_views  # noqa: E402
from vgpukit.watch.model import HostModel, View  # noqa: E402
from vgpukit.watch.touch import Touch  # noqa: E402
from vgpukit.wiring import Wiring  # noqa: E402


def doors() -> dict[str, dict[str, View]]:
    exporter = {**inventory_views(lambda _host: Options(replicas=0)), **health_views(save=False)}
    exporter.pop("held")
    return {
        "device plugin": device_plugin_views(lambda h: _options(h, 4)),
        "DRA plugin": dra_views(),
        "exporter": exporter,
    }


def read_ms(sim: Path, views: dict[str, View], samples: int) -> tuple[list[float], list[float]]:
    """CPU ms of ``samples`` full re-reads, and of as many NVML-only passes (the views that depend on NVML
    recomputed over the kept PCI snapshot: what a MIG change by another tool needs)."""
    app = App(sim_dir=sim, wiring=Wiring())
    model = HostModel(opener(app), views)
    touch = Touch()
    touch.everything("start")
    model.refresh(touch)
    full, nvml = [], []
    for _ in range(samples):
        touch = Touch()
        touch.everything("resync")
        cpu = time.process_time()
        model.refresh(touch)
        full.append((time.process_time() - cpu) * 1000)
        cpu = time.process_time()
        model.refresh(Touch(kinds={"nvml"}))
        nvml.append((time.process_time() - cpu) * 1000)
    app.close()
    return full, nvml


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--hosts", default="hgx-a100,1024-vf")
    args = ap.parse_args()
    print("| host | door | full re-read CPU ms p50 | max | % of a core at --resync 300 | at 3600 | NVML-only ms p50 |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="resync") as d:
        for name in args.hosts.split(","):
            base = Path(d) / name
            base.mkdir()
            sim = base / "sim"
            watch_bench.HOSTS[name].make(sim, base)
            for door, views in doors().items():
                ms, nvml = read_ms(sim, views, args.samples)
                p50 = statistics.median(ms)
                print(
                    f"| {name} | {door} | {p50:.0f} | {max(ms):.0f} | "
                    f"{p50 / 3000:.3f} % | {p50 / 36000:.4f} % | {statistics.median(nvml):.0f} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
