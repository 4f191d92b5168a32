"""KubeVirt timings on simulated hosts: the device plugin's KubeVirt-mode inventory, and a DRA prepare and
unprepare of a VF (bound to vfio-pci at prepare) with and without the KEP-5304 device metadata.

Usage: .venv/bin/python benchmarks/kubevirt/run.py [--calls N] [--quick]

* collect: ``vgpukit.k8s.kubevirt.collect`` (what the device plugin reads when the host changed) on
  hgx-a100 with 16 VFs of nic0 and 4 GPUs on vfio-pci, and on qemu-guest with 3 VFs and 8 mtty mdevs;
* prepare / unprepare: the DRA driver in this process (``Driver.prepare`` / ``unprepare``), one claim of
  one VF at a time on a host driver, ``--device-metadata`` off and on (two more files per request).

Prints a markdown table (milliseconds).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.conftest import invoke, make_sim, sim_host  # noqa: E402
from tests.k8s.test_dra_plugin import NODE, claim, opener  # noqa: E402
from vgpukit.k8s import kubevirt  # noqa: E402
from vgpukit.k8s.dra.devices import dra_devices  # noqa: E402
from vgpukit.k8s.dra.server import Driver  # noqa: E402
from vgpukit.k8s.dra_v1 import api_pb2 as dra  # noqa: E402


def ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def row(label: str, xs: list[float]) -> str:
    ms = [x * 1000 for x in xs]
    return f"| {label} | {len(ms)} | {pct(ms, 50):.1f} | {pct(ms, 99):.1f} | {max(ms):.1f} |"


def timed(fn: object, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="10 calls per row")
    args = ap.parse_args(argv)
    calls = 10 if args.quick else args.calls
    rows = ["| row | calls | p50 ms | p99 ms | max ms |", "| --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory(prefix="kvbench", dir="/dev/shm") as d:
        hgx = make_sim(Path(d) / "hgx")
        ok(hgx, "sriov", "enable", "nic0", "--vfs", "16", "--driver", "vfio-pci")
        for gpu in ("gpu4", "gpu5", "gpu6", "gpu7"):
            ok(hgx, "bind", gpu, "--driver", "vfio-pci")
        rows.append(row("collect, hgx-a100: 16 VFs + 4 GPUs", timed(lambda: kubevirt.collect(sim_host(hgx)), calls)))
        q = make_sim(Path(d) / "q", "qemu-guest")
        ok(q, "sriov", "enable", "0000:00:02.0", "--vfs", "3", "--driver", "vfio-pci")
        ok(q, "mdev", "create", "--type", "mtty-1", "--count", "8")
        rows.append(row("collect, qemu-guest: 3 VFs + 8 mdevs", timed(lambda: kubevirt.collect(sim_host(q)), calls)))
        ok(hgx, "sriov", "enable", "nic1", "--vfs", "2")  # on mlx5_core: bound to vfio-pci at prepare
        _env, collect, close = opener(hgx)()
        vf = next(n for n, dev in sorted(dra_devices(collect()).items()) if dev.host_driver)
        close()
        for meta in (False, True):
            prep: list[float] = []
            unprep: list[float] = []
            for i in range(calls):
                uid = f"bench-{int(meta)}-{i}"
                driver = Driver(
                    NODE, opener(hgx), lambda *_, u=uid: claim(u, f"c{u}", vf), lambda: {}, device_metadata=meta
                )
                ref = dra.Claim(namespace="default", name=f"c{uid}", uid=uid)
                t0 = time.perf_counter()
                assert driver.prepare(ref).error == ""
                prep.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                assert driver.unprepare(ref).error == ""
                unprep.append(time.perf_counter() - t0)
            label = "with device metadata" if meta else "without metadata"
            rows += [row(f"DRA prepare VF (bind), {label}", prep), row(f"DRA unprepare VF, {label}", unprep)]
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
