"""Device plugin timings: Allocate / GetPreferredAllocation latency and ListAndWatch update delay.

Usage: .venv/bin/python benchmarks/k8s/run.py [--calls N] [--changes N]

A simulated hgx-a100 (4 ConnectX-6 with 16 VFs each on vfio-pci = 64 VFs, gpu0/gpu1 in MIG with
2x 3g.20gb each, CDI specs written) is served by ``vgpukit k8s device-plugin`` as its own process,
and the kubelet-side peer of the tests (tests/k8s/kubelet.py) registers it and calls it as the
kubelet does. Update delay: a VM takes a VF (``vgpukit sim hold``'s mechanism) -> the kubelet has
the ListAndWatch update marking it Unhealthy, the VM starting at a random point of the polling
period; measured with --interval 1 (the default) and 0.1.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.k8s.kubelet import Kubelet  # noqa: E402
from vgpukit.k8s.v1beta1 import api_pb2 as api  # noqa: E402
from vgpukit.sim.holders import hold, release  # noqa: E402

VF_POOL = "vgpukit.io/vf-15b3-101b"
MIG = "vgpukit.io/mig-3g.20gb"


def vg(sim: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "vgpukit", "--sim", str(sim), *args], check=True, stdout=subprocess.DEVNULL)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def setup(sim: Path) -> None:
    subprocess.run([sys.executable, "-m", "vgpukit", "sim", "init", str(sim), "--profile", "hgx-a100"], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    for nic in ("nic0", "nic1", "nic2", "nic3"):
        vg(sim, "sriov", "enable", nic, "--vfs", "16", "--driver", "vfio-pci")
    for gpu in ("gpu0", "gpu1"):
        vg(sim, "partition", gpu, "--mig", "3g.20gb,3g.20gb")
    vg(sim, "cdi", "generate")


def start_plugin(sim: Path, interval: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "device-plugin", "--interval", str(interval)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def rpc_times(fn: object, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return out


def update_delays(sim: Path, kubelet: Kubelet, changes: int, interval: float) -> list[float]:
    ep = kubelet.endpoints[VF_POOL]
    vf = sorted(ep.devices)[-1]  # never allocated (Allocate marks a device as the pod's, healthy while held)
    group = os.path.basename(os.readlink(sim / "sys/bus/pci/devices" / vf / "iommu_group"))
    out = []
    rng = random.Random(15)
    for _ in range(changes):
        time.sleep(rng.uniform(0, interval))  # the VM starts at any point of the polling period
        t0 = time.monotonic()
        pid = hold(sim, group)
        assert kubelet.wait(lambda: ep.devices.get(vf) == "Unhealthy", timeout=30)
        out.append(ep.updates[-1][0] - t0)
        release(sim, pid)
        assert kubelet.wait(lambda: ep.devices.get(vf) == "Healthy", timeout=30)
    return out


def ready(kubelet: Kubelet) -> bool:
    vfs = kubelet.endpoints.get(VF_POOL)
    mig = kubelet.endpoints.get(MIG)
    return vfs is not None and len(vfs.devices) == 64 and mig is not None and len(mig.devices) == 4


def rpc_rows(kubelet: Kubelet, calls: int) -> list[tuple[str, list[float]]]:
    vf, mig = kubelet.endpoints[VF_POOL].stub, kubelet.endpoints[MIG].stub

    def alloc(device: str) -> api.AllocateRequest:
        return api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=[device])])

    one, one_mig = alloc("0000:05:00.2"), alloc(sorted(kubelet.endpoints[MIG].devices)[0])
    ids = sorted(kubelet.endpoints[VF_POOL].devices)
    wanted = api.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=4)
    pref = api.PreferredAllocationRequest(container_requests=[wanted])
    return [
        ("Allocate, 1 VF", rpc_times(lambda: vf.Allocate(one, timeout=5), calls)),
        ("Allocate, 1 MIG slice", rpc_times(lambda: mig.Allocate(one_mig, timeout=5), calls)),
        ("GetPreferredAllocation, 4 of 64 VFs", rpc_times(lambda: vf.GetPreferredAllocation(pref, timeout=5), calls)),
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--changes", type=int, default=10)
    args = ap.parse_args()
    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory(prefix="k8sb", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        sim = Path(tmp) / "h"
        setup(sim)
        for interval in (1.0, 0.1):
            kubelet = Kubelet(sim / "var/lib/kubelet/device-plugins").start()
            plugin = start_plugin(sim, interval)
            try:
                assert kubelet.wait(lambda k=kubelet: ready(k), timeout=60)  # type: ignore[misc]
                if interval == 1.0:
                    rows += rpc_rows(kubelet, args.calls)
                name = f"ListAndWatch update after a VM takes a VF (--interval {interval:g})"
                rows.append((name, update_delays(sim, kubelet, args.changes, interval)))
            finally:
                plugin.terminate()
                plugin.wait(10)
                kubelet.stop()
    print("| measurement | n | p50 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, xs in rows:
        p50, p99, top = (1000 * v for v in (statistics.median(xs), pct(xs, 99), max(xs)))
        print(f"| {name} | {len(xs)} | {p50:.2f} | {p99:.2f} | {top:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
