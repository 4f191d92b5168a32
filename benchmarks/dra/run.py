"""DRA driver timings: prepare/unprepare per kind, ResourceSlice republish delay, memory at ~1,000 devices.

Usage: .venv/bin/python benchmarks/dra/run.py [--calls N] [--changes N] [--interval S] [--quick] [--hosts H,...]

As a node runs it: ``vgpukit k8s dra-plugin`` is its own process on a simulated host, the API-server
stub of the tests (tests/k8s/apiserver.py) holds the ResourceClaims and receives the ResourceSlice,
and the kubelet-side peer of the tests (tests/k8s/drakubelet.py) registers the plugin and calls
``NodePrepareResources`` / ``NodeUnprepareResources`` over its Unix socket, one claim of one device
at a time (a claim made for each call: the first prepare of a claim, not the recorded answer).

* prepare / unprepare: one row per kind (``KINDS``), the device chosen from the published slice by
  its attributes, as a DeviceClass would.
* republish: another door changes the host (``CHANGES``: ``vgpukit partition``, ``vgpukit sriov``, a
  process of its own) at a random point of the polling period, once the plugin has published all it
  saw; the delay is from the command's exit to the API server holding every slice of the pool at
  the next generation.
* memory: the plugin's RSS (and peak) once it published every VF of a 1,024-VF host (4 PFs x 256 VFs
  on vfio-pci, benchmarks/scale/hosts.py), and the time to that first publish.

Rows are data: a kind made on demand, or a sharing configuration, is one more entry. The hosts in
``PARTITIONABLE`` are served with ``--partitionable on``: their kinds made on demand are picked among
the published slice parts by ``onDemand``, and each prepare creates the MIG slice or the vGPU that
its unprepare destroys (the timings include that); on a Hopper GPU with MIG mode off, each prepare also
turns MIG mode on and each unprepare turns it off. The API-server stand-in answers as Kubernetes 1.37
(``RELEASE`` names a host served as 1.34), with partitionable devices on; a refused write ends the run.
The hosts in ``SHARED`` are served with ``--share-by-capacity gpu`` and run the QoS daemon of the
simulated host: a kind with ``share`` is a share
of a GPU shared by capacity (the allocation's shareID and consumed capacity in the claim, reserved for a
pod whose cgroup the host has): each prepare adds its QoS tenant and memory cap, each unprepare removes it.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "scale"))

from hosts import sriov_host, write_profile  # type: ignore[import-not-found]  # noqa: E402

from tests.conftest import sim_host  # noqa: E402
from tests.k8s.apiserver import ApiServer  # noqa: E402
from tests.k8s.drakubelet import DraKubelet  # noqa: E402
from tests.k8s.test_dra_capacity import pod_cgroup  # noqa: E402
from tests.qos.conftest import DaemonProc  # noqa: E402
from vgpukit.k8s.dra.devices import DRIVER  # noqa: E402
from vgpukit.k8s.dra.server import registry_socket  # noqa: E402

NODE = "node-1"
SLICE = f"{NODE}-{DRIVER}"
# simulated hosts: profile, then the commands that make their devices
HOSTS: dict[str, tuple[str, list[list[str]]]] = {
    "hgx-a100": (
        "hgx-a100",
        [["partition", "gpu0", "--mig", "3g.20gb,3g.20gb"], ["partition", "gpu2", "--mig", "3g.20gb"],
         ["sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci"], ["sriov", "enable", "nic1", "--vfs", "4"],
         ["sriov", "enable", "nic2", "--vfs", "1", "--driver", "vfio-pci"]],
    ),
    "qemu-guest": ("qemu-guest", [["mdev", "create", "mtty", "--type", "mtty-2"]]),
    "t4-mdev": ("t4-mdev", [["vgpu", "create", "gpu0", "--type", "GRID T4-4Q"]]),
    "h100-vgpu": ("h100-vgpu", [["vgpu", "create", "gpu0", "--type", "H100-20C"]]),
    # served with --partitionable on: gpu1 in MIG mode and empty (a 1g.5gb made and destroyed), no vGPU yet
    "hgx-a100-on-demand": ("hgx-a100", [["partition", "gpu1", "--mig", "1g.5gb"], ["mig", "destroy", "gpu1", "--all"]]),
    "t4-mdev-on-demand": ("t4-mdev", []),
    # served with --partitionable on: 8 Hopper GPUs with MIG mode off (each GPU: the whole GPU and its slices)
    "hgx-h100-on-demand": ("hgx-h100", []),
    "hgx-h100-on-demand-1.34": ("hgx-h100", []),  # the same, to an API server of 1.34 (counters beside devices)
    "hgx-a100-shared": ("hgx-a100", []),  # served with --share-by-capacity gpu
}  # fmt: skip
# files put on a host after `sim init`: the CUDA interception library a memory cap needs (a stand-in: nothing
# here loads it; the prepare only checks it is installed)
FILES = {
    name: {"usr/lib/vgpukit/libvgpukit-cuda.so": "a stand-in for contrib/cuda's library\n"}
    for name in ("hgx-a100", "hgx-a100-shared")
}
# hosts whose plugin publishes devices made on demand
PARTITIONABLE = {"hgx-a100-on-demand", "t4-mdev-on-demand", "hgx-h100-on-demand", "hgx-h100-on-demand-1.34"}
RELEASE = {"hgx-h100-on-demand-1.34": "1.34"}  # the API server's release (else 1.37), its gates turned on
SHARED = {"hgx-a100-shared"}  # hosts whose plugin shares its GPUs by capacity (a QoS daemon runs there)
POD = "bench-pod"  # the pod a share is reserved for (its cgroup made on the host)


V1 = {"apiVersion": "vgpukit.io/v1"}


@dataclass(frozen=True)
class Kind:
    label: str
    host: str
    select: dict[str, str | bool]  # published attribute -> value ("*": present)
    config: dict[str, Any] | None = None  # the driver's opaque parameters in the claim (a sharing configuration)
    share: dict[str, str] | None = None  # a share of a device shared by capacity: its consumed capacity


KINDS = [
    Kind("whole GPU", "hgx-a100", {"kind": "gpu"}),
    Kind("MIG slice 3g.20gb", "hgx-a100", {"kind": "mig", "migProfile": "3g.20gb"}),
    Kind("VF on vfio-pci", "hgx-a100", {"kind": "vf", "driver": "vfio-pci"}),
    Kind("VF bound to vfio-pci at prepare", "hgx-a100", {"kind": "vf", "driver": "mlx5_core"}),
    Kind("mdev (mtty)", "qemu-guest", {"kind": "mdev"}),
    Kind("vGPU mdev (GRID T4-4Q)", "t4-mdev", {"kind": "mdev", "vgpuType": "*"}),
    Kind("MIG slice 3g.20gb made on demand (created/destroyed)", "hgx-a100-on-demand",
         {"onDemand": True, "migProfile": "3g.20gb"}),
    Kind("vGPU mdev T4-4Q made on demand (created/removed)", "t4-mdev-on-demand",
         {"onDemand": True, "kind": "mdev", "vgpuType": "T4-4Q"}),
    Kind("MIG slice 3g.20gb made on demand, MPS (slice and daemon)", "hgx-a100-on-demand",
         {"onDemand": True, "migProfile": "3g.20gb"}, {**V1, "kind": "MpsConfig", "activeThreadPercentage": 50}),
    Kind("whole GPU, memory cap", "hgx-a100", {"kind": "gpu"}, {**V1, "kind": "MemoryCapConfig", "limit": "4Gi"}),
    Kind("whole GPU, MPS (daemon started/stopped)", "hgx-a100", {"kind": "gpu"},
         {**V1, "kind": "MpsConfig", "activeThreadPercentage": 50}),
    Kind("vGPU on a VF (H100-20C, vendor VFIO)", "h100-vgpu", {"kind": "vf", "vgpuType": "*"}),
    Kind("MIG slice 3g.40gb made on demand on a Hopper GPU, MIG mode turned on / off (first and last slice)",
         "hgx-h100-on-demand", {"onDemand": True, "migProfile": "3g.40gb"}),
    Kind("whole Hopper GPU published with its slices (one counter set)", "hgx-h100-on-demand", {"kind": "gpu"}),
    Kind("share of a GPU shared by capacity (QoS tenant, memory cap)", "hgx-a100-shared", {"kind": "shared-gpu"},
         share={"memory": "8Gi", "computeShare": "25"}),
    Kind("share of a GPU shared by capacity, online class (QosClassConfig)", "hgx-a100-shared",
         {"kind": "shared-gpu"}, {**V1, "kind": "QosClassConfig", "class": "online"},
         share={"memory": "4Gi", "computeShare": "50"}),
]  # fmt: skip


@dataclass(frozen=True)
class Change:
    label: str
    host: str
    there: list[str]  # the command that changes the device list; `back` changes it back
    back: list[str]


CHANGES = [
    Change("vgpukit partition (a MIG slice more / less)", "hgx-a100",
           ["partition", "gpu2", "--mig", "3g.20gb=2"], ["partition", "gpu2", "--mig", "3g.20gb=1", "--replace"]),
    Change("vgpukit sriov enable (a VF more / less)", "hgx-a100",
           ["sriov", "enable", "nic2", "--vfs", "2", "--driver", "vfio-pci"],
           ["sriov", "enable", "nic2", "--vfs", "1", "--driver", "vfio-pci"]),
    Change("vgpukit partition on a partitionable GPU (the placements offered change)", "hgx-a100-on-demand",
           ["partition", "gpu1", "--mig", "1g.5gb"], ["mig", "destroy", "gpu1", "--all"]),
    Change("vgpukit partition on a Hopper GPU of 8, 1.37 layout (1 counter slice, 8 device slices)",
           "hgx-h100-on-demand", ["partition", "gpu1", "--mig", "1g.10gb"], ["mig", "destroy", "gpu1", "--all"]),
    Change("vgpukit partition on a Hopper GPU of 8, 1.34 layout (8 slices, counters beside devices)",
           "hgx-h100-on-demand-1.34", ["partition", "gpu1", "--mig", "1g.10gb"], ["mig", "destroy", "gpu1", "--all"]),
]  # fmt: skip


def vg(sim: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "vgpukit", "--sim", str(sim), *args], check=True, stdout=subprocess.DEVNULL)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


class Node:
    """One simulated host served by its own ``vgpukit k8s dra-plugin`` process, registered with the peer."""

    def __init__(
        self, sim: Path, api: ApiServer, kubeconfig: Path, interval: float, partitionable: str, args: list[str]
    ) -> None:
        self.sim, self.api = sim, api
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "dra-plugin", "--node", NODE]
        cmd += ["--kubeconfig", str(kubeconfig), "--interval", str(interval), "--partitionable", partitionable, *args]
        self.started = time.monotonic()
        self.log = sim.parent / f"plugin-{sim.name}.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
        host = sim_host(sim)
        deadline = time.monotonic() + 120
        while not registry_socket(host).exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the plugin did not start on {sim}")
            time.sleep(0.02)
        resolve = lambda shown: host.socket_address(host.path(*shown.strip("/").split("/")))  # noqa: E731
        self.kubelet = DraKubelet(registry_socket(host).parent, resolve)
        self.kubelet.register()

    def generation(self) -> int:
        """The pool's generation once every slice of it holds it (a pool is written one slice at a time)."""
        with self.api.changed:  # the stub's lock (re-entrant): not while a handler stores a slice
            docs = list(self.api.slices.values())
            return min(int(doc["spec"]["pool"]["generation"]) for doc in docs) if SLICE in self.api.slices else 0

    def settle(self, interval: float) -> None:
        """Wait until the plugin has published what it saw (no new generation for 1.5 polling periods): a
        publication still on its way (after the last unprepare, or a second one after a read in the middle
        of a change) must not be taken for the answer to the next change, nor let two changes cancel out
        within one poll."""
        while True:
            now = self.generation()
            if not self.api.wait(lambda g=now: self.generation() != g, timeout=1.5 * interval + 0.2):
                return

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])

    def devices(self) -> list[dict[str, Any]]:
        """Every device of the node's pool (several slices beyond 128 devices)."""
        return [d for doc in list(self.api.slices.values()) for d in doc["spec"].get("devices") or []]

    def memory_kib(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) of the plugin process."""
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])

    def close(self) -> None:
        self.kubelet.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.api.slices.clear()


@contextmanager
def serving(sim: Path, base: Path, interval: float) -> Iterator[Node]:
    api = ApiServer(NODE, RELEASE.get(sim.name, "1.37"))
    api.partitionable = True
    api.schema_check = False  # the stand-in's JSON-schema check (~60 ms a slice) is the test's cost, not the plugin's
    api.http.handle_error = lambda *_: None  # type: ignore[method-assign]  # the plugin hanging up at its end
    mode = "on" if sim.name in PARTITIONABLE else "off"
    args = ["--share-by-capacity", "gpu"] if sim.name in SHARED else []
    qos = DaemonProc(sim, sim=True).start() if sim.name in SHARED else None
    node = Node(sim, api, api.kubeconfig(base / f"kubeconfig-{sim.name}"), interval, mode, args)
    try:
        if not api.wait(lambda: SLICE in api.slices, timeout=120):
            raise SystemExit("no ResourceSlice published")
        yield node
        if api.refused or api.pool_problems():
            raise SystemExit(f"{sim.name}: a write refused or a pool the scheduler cannot use: {api.refused[:1]}")
    finally:
        node.close()
        api.close()
        if qos is not None:
            qos.stop()


def claim(uid: str, device: str, config: dict[str, Any] | None, share: dict[str, str] | None) -> dict[str, Any]:
    result = {"request": "r0", "driver": DRIVER, "pool": NODE, "device": device}
    if share:  # as the scheduler allocates a share: a new shareID, the consumed capacity
        result.update(shareID=str(uuid.uuid4()), consumedCapacity=dict(share))
    devices: dict[str, Any] = {"results": [result]}
    if config:
        devices["config"] = [{"opaque": {"driver": DRIVER, "parameters": config}, "requests": ["r0"]}]
    meta = {"name": uid, "namespace": "bench", "uid": uid}
    status: dict[str, Any] = {"allocation": {"devices": devices}}
    if share:
        status["reservedFor"] = [{"resource": "pods", "name": POD, "uid": POD}]
    return {"metadata": meta, "status": status}


def prepare_times(node: Node, kind: Kind, calls: int) -> tuple[list[float], list[float]]:
    def fits(attrs: dict[str, Any]) -> bool:
        # an attribute's value is its one typed field ({"string": ...}, {"bool": ...}, {"int": ...})
        return all(k in attrs and (v == "*" or [v] == list(attrs[k].values())) for k, v in kind.select.items())

    # a pool of several slices (the partitionable parts): each may land a moment after the first
    node.api.wait(lambda: any(fits(d["attributes"]) for d in node.devices()), timeout=60)
    device = next(d["name"] for d in node.devices() if fits(d["attributes"]))
    prep, unprep = [], []
    for i in range(calls):
        uid = f"{kind.host}-{device}-{i}"[-60:]
        node.api.claims[("bench", uid)] = claim(uid, device, kind.config, kind.share)
        ref = ("bench", uid, uid)
        t0 = time.perf_counter()
        out = node.kubelet.prepare(ref).claims[uid]
        t1 = time.perf_counter()
        if out.error:
            raise SystemExit(f"{kind.label}: prepare failed: {out.error}")
        done = node.kubelet.unprepare(ref).claims[uid]
        t2 = time.perf_counter()
        if done.error:
            raise SystemExit(f"{kind.label}: unprepare failed: {done.error}")
        prep.append(t1 - t0)
        unprep.append(t2 - t1)
    return prep, unprep


def republish_delays(node: Node, change: Change, count: int, interval: float) -> list[float]:
    rng = random.Random(23)
    out = []
    for i in range(count):
        node.settle(interval)
        before = node.generation()
        time.sleep(rng.uniform(0, interval))  # the change comes at any point of the polling period
        vg(node.sim, *(change.there if i % 2 == 0 else change.back))
        t0 = time.monotonic()
        if not node.api.wait(lambda b=before: node.generation() > b, timeout=max(30, 10 * interval)):
            raise SystemExit(f"{change.label}: no new generation; the plugin's log ends:\n{node.log_tail()}")
        out.append(time.monotonic() - t0)
    return out


def row(label: str, xs: list[float]) -> str:
    ms = [x * 1000 for x in xs]
    return f"| {label} | {len(ms)} | {pct(ms, 50):.1f} | {pct(ms, 99):.1f} | {max(ms):.1f} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=30, help="claims prepared and unprepared per kind")
    ap.add_argument("--changes", type=int, default=10, help="host changes per door")
    ap.add_argument("--interval", type=float, default=1.0, help="the plugin's --interval for the republish rows")
    ap.add_argument("--vfs", type=int, default=256, help="VFs per PF (4 PFs) of the memory row")
    ap.add_argument("--quick", action="store_true", help="5 calls, 2 changes, 16 VFs per PF")
    ap.add_argument("--hosts", default=",".join([*HOSTS, "vfs"]),
                    help="the hosts whose rows to run, comma-separated (vfs: the many-VF host)")  # fmt: skip
    a = ap.parse_args(argv)
    if a.quick:
        a.calls, a.changes, a.vfs = 5, 2, 16
    only = set(a.hosts.split(","))
    if only - {*HOSTS, "vfs"}:
        raise SystemExit(f"--hosts: unknown host(s) {', '.join(sorted(only - {*HOSTS, 'vfs'}))}")
    lines = ["| measurement | n | p50 ms | p99 ms | max ms |", "| --- | ---: | ---: | ---: | ---: |"]
    later: list[str] = []  # the republish rows, after every kind's
    with tempfile.TemporaryDirectory(prefix="drab", dir="/dev/shm") as d:  # short: Unix socket paths
        base = Path(d)
        sims = {}
        for name, (profile, commands) in HOSTS.items():
            if name not in only:
                continue
            sims[name] = base / name
            subprocess.run([sys.executable, "-m", "vgpukit", "sim", "init", str(sims[name]), "--profile", profile],
                           check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            for rel, text in FILES.get(name, {}).items():
                (sims[name] / rel).parent.mkdir(parents=True, exist_ok=True)
                (sims[name] / rel).write_text(text)
            for cmd in commands:
                vg(sims[name], *cmd)
            if name in SHARED:
                pod_cgroup(sims[name], POD)
        for name, sim in sims.items():
            kinds = [k for k in KINDS if k.host == name]
            changes = [c for c in CHANGES if c.host == name]
            with serving(sim, base, a.interval) as node:
                for k in kinds:
                    prep, unprep = prepare_times(node, k, a.calls)
                    lines += [row(f"prepare, {k.label}", prep), row(f"unprepare, {k.label}", unprep)]
                for c in changes:
                    later.append(row(f"republish after {c.label}, --interval {a.interval:g}",
                                     republish_delays(node, c, a.changes, a.interval)))  # fmt: skip
        if "vfs" not in only:
            print("\n".join([*lines, *later]))
            return 0
        big = base / "vfs"
        profile = write_profile(base / "vfs.json", sriov_host(4, a.vfs))
        subprocess.run([sys.executable, "-m", "vgpukit", "sim", "init", str(big), "--profile", str(profile)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        for pf in range(4):
            vg(big, "sriov", "enable", f"0000:{0x10 + 8 * pf:02x}:00.0", "--vfs", str(a.vfs), "--driver", "vfio-pci")
        with serving(big, base, 5.0) as node:
            node.api.wait(lambda: len(node.devices()) >= 4 * a.vfs, timeout=120)  # every slice of the pool
            first = time.monotonic() - node.started
            rss, hwm = node.memory_kib()
            n = len(node.devices())
            vf = Kind(f"VF on vfio-pci, host of {n} VFs", "vfs", {"kind": "vf"})
            prep, unprep = prepare_times(node, vf, max(3, a.calls // 3))
            lines += [row(f"prepare, {vf.label}", prep), row(f"unprepare, {vf.label}", unprep)]
    lines += later
    lines.append("")
    lines.append(f"| plugin process, {n} devices published | RSS MiB | peak RSS MiB | start to first publish s |")
    lines.append("| --- | ---: | ---: | ---: |")
    lines.append(f"| `vgpukit k8s dra-plugin` | {rss / 1024:.1f} | {hwm / 1024:.1f} | {first:.1f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
