"""The watch: how fast a change reaches the long-running doors, what they cost idle, what a scrape costs.

Usage: .venv/bin/python benchmarks/watch/run.py [--samples N] [--idle SECONDS] [--quick] [--checkout DIR]
                                               [--hosts hgx-a100,1024-vf]

As a node runs them, each its own process with its default options on one simulated host: the device
plugin (``vgpukit k8s device-plugin``) registered with the kubelet-side peer of the tests
(tests/k8s/kubelet.py), the DRA plugin (``vgpukit k8s dra-plugin``) publishing to the API-server stub
(tests/k8s/apiserver.py), and the exporter (``vgpukit exporter``).

* latency: another command changes the host (VFs created, a driver bound, a MIG slice made); from
  the moment the host showed the change (its last write of it, seen by the benchmark's own inotify:
  the last VF's link in ``drivers/vfio-pci``, the simulated driver's state file) to the device plugin's
  ListAndWatch update that shows it, and to the ResourceSlice write that shows it. The command goes on
  after that (the CDI specs, its journal); the samples' times (``--json``) also say when its change
  engine committed and when it exited. Between two samples the change is undone (not timed), both doors
  are waited for to show the undo (a poller could otherwise miss both and have nothing new to say), and
  a random wait (0.5 to 5.5 s) puts the change at any phase of a poller's period.
* idle: the three processes' CPU time (user + system, from /proc) over ``--idle`` seconds (default 600,
  as issue 34 asks) on the quiet host, in percent of one core. Every host's doors run until the end and
  are measured over one window at once (each host's latency first, then one idle window, then the
  scrapes), so a full run with both hosts takes one idle period, not two.
* scrape: the exporter process's CPU time per ``GET /metrics``, from /proc over 10 scrapes in a row
  (its clock ticks are 10 ms) (p50, p99 of ``--samples`` such means); on hgx-a100 with a QoS daemon
  running 64 tenants (on its 5 GPUs not in MIG mode, each a real process, as benchmarks/exporter/run.py does), measured
  after the idle run (a daemon slicing 64 tenants is no quiet host).

Hosts: hgx-a100 (nic0-nic2 with 16 VFs on vfio-pci, nic3 with 16 on mlx5_core: 64 VFs; gpu0 and gpu1
in MIG with 2x 3g.20gb, gpu2 with one 3g.20gb (the MIG change makes its second); CDI specs written) and
1024-vf (4 ConnectX-6 PFs with 256 VFs on vfio-pci each, a fifth with 16 on mlx5_core, a sixth without
VFs). ``--checkout DIR`` runs the doors
of another checkout (say the main branch, for the numbers before a change) with this benchmark.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "scale"))

from hosts import sriov_host, write_profile  # type: ignore[import-not-found]  # noqa: E402

from tests.k8s.apiserver import ApiServer  # noqa: E402
from tests.k8s.kubelet import Kubelet  # noqa: E402
from vgpukit.host import Host  # noqa: E402
from vgpukit.host.notify import IN_CLOSE_WRITE, IN_CREATE, IN_DELETE, IN_MODIFY, IN_MOVED_FROM, IN_MOVED_TO, Inotify  # noqa: E402

NODE = "node-1"
SCRAPES = 10  # scrapes in a row per sample of the exporter's CPU
TENANTS = 64  # QoS tenants of hgx-a100 during its scrapes, on its GPUs not in MIG mode (gpu3-gpu7)
WHOLE_GPUS = ("gpu3", "gpu4", "gpu5", "gpu6", "gpu7")  # a GPU in MIG mode takes no whole-GPU time slices
PHASE = random.Random(34)  # the wait before each timed change (reproducible)
LOADS: list[str] = []  # the load average around each idle measurement
MISSES: list[str] = []  # changes a door did not follow (the benchmark goes on, the table says so)
RAW: list[dict[str, object]] = []  # each latency sample's times (monotonic), for --json
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Change:
    name: str
    do: list[str]  # the command timed (vgpukit arguments)
    undo: list[str]  # the command that puts the host back between samples (not timed)
    resource: str  # the device plugin resource that shows it
    dp: Callable[[set[str]], bool]  # the device plugin's ids of that resource show it
    dra: Callable[[dict[str, str]], bool]  # the published devices (name -> attributes as JSON text) show it
    shows: tuple[str, Callable[[str], bool]]  # where the host shows it done: a directory, the names that say it


@dataclass(frozen=True)
class HostSpec:
    name: str
    make: Callable[[Path, Path], None]
    changes: list[Change]
    tenants: bool = False  # its scrape with a QoS daemon running TENANTS tenants


def vfs_of(pf_bus: str, n: int) -> Callable[[dict[str, str]], bool]:
    return lambda dra: sum(name.startswith(f"vf-0000-{pf_bus}-") for name in dra) == n


def on_vfio(bdf: str) -> Callable[[dict[str, str]], bool]:
    name = "vf-" + bdf.replace(":", "-").replace(".", "-")
    return lambda dra: "vfio-pci" in dra.get(name, "")


VF_POOL = "vgpukit.io/vf-15b3-101b"


def bound(prefix: str) -> tuple[str, Callable[[str], bool]]:
    """Shown by the VF's link in vfio-pci's driver directory (the last one, for several VFs)."""
    return "sys/bus/pci/drivers/vfio-pci", lambda name: name.startswith(prefix)


def hgx_changes() -> list[Change]:
    return [
        Change("16 VFs created (vfio-pci)", ["sriov", "enable", "nic2", "--vfs", "16", "--driver", "vfio-pci"],
               ["sriov", "disable", "nic2"], VF_POOL, lambda dp: len(dp) == 48, vfs_of("85", 16),
               bound("0000:85:")),
        Change("a driver bound (vfio-pci)", ["bind", "0000:a5:00.2", "--driver", "vfio-pci"],
               ["bind", "0000:a5:00.2", "--restore"], VF_POOL, lambda dp: "0000:a5:00.2" in dp,
               on_vfio("0000:a5:00.2"), bound("0000:a5:00.2")),
        Change("a MIG slice made (3g.20gb)", ["partition", "gpu2", "--mig", "3g.20gb,3g.20gb"],
               ["partition", "gpu2", "--mig", "3g.20gb", "--replace"], "vgpukit.io/mig-3g.20gb",
               lambda dp: len(dp) == 6,
               lambda dra: sum(n.startswith("mig-") and "3g.20gb" in a for n, a in dra.items()) == 6,
               (".vgpukit-sim", lambda name: name.startswith("nvml.") and name.endswith((".json", ".jsonl")))),
    ]  # fmt: skip


def make_hgx(sim: Path, base: Path) -> None:
    vg_init(sim, "hgx-a100")
    for nic in ("nic0", "nic1", "nic2"):
        vg(sim, "sriov", "enable", nic, "--vfs", "16", "--driver", "vfio-pci")
    vg(sim, "sriov", "enable", "nic3", "--vfs", "16")
    for gpu in ("gpu0", "gpu1"):
        vg(sim, "partition", gpu, "--mig", "3g.20gb,3g.20gb")
    vg(sim, "partition", "gpu2", "--mig", "3g.20gb")
    vg(sim, "cdi", "generate")


def vf1024_changes() -> list[Change]:
    return [
        Change("16 VFs created (vfio-pci)", ["sriov", "enable", "0000:38:00.0", "--vfs", "16", "--driver", "vfio-pci"],
               ["sriov", "disable", "0000:38:00.0"], VF_POOL, lambda dp: len(dp) == 1040, vfs_of("38", 16),
               bound("0000:38:")),
        Change("a driver bound (vfio-pci)", ["bind", "0000:30:00.2", "--driver", "vfio-pci"],
               ["bind", "0000:30:00.2", "--restore"], VF_POOL, lambda dp: "0000:30:00.2" in dp,
               on_vfio("0000:30:00.2"), bound("0000:30:00.2")),
    ]  # fmt: skip


def make_1024(sim: Path, base: Path) -> None:
    profile = write_profile(base / "vf1024.json", sriov_host(6, 256))
    vg_init(sim, str(profile))
    for k in range(4):
        vg(sim, "sriov", "enable", f"0000:{0x10 + 8 * k:02x}:00.0", "--vfs", "256", "--driver", "vfio-pci")
    vg(sim, "sriov", "enable", "0000:30:00.0", "--vfs", "16")
    vg(sim, "cdi", "generate")


HOSTS = {"hgx-a100": HostSpec("hgx-a100", make_hgx, hgx_changes(), tenants=True),
         "1024-vf": HostSpec("1024-vf", make_1024, vf1024_changes())}  # fmt: skip


# ----------------------------------------------------------------------------- processes
CHECKOUT = ROOT


RESYNC: str | None = None  # --resync: the doors' safety net (VGPUKIT_RESYNC), None: their default


def _env() -> dict[str, str]:
    """The checkout's vgpukit first (``python -m`` also puts the working directory first: ``cwd=CHECKOUT``)."""
    return {**os.environ, "PYTHONPATH": str(CHECKOUT), **({"VGPUKIT_RESYNC": RESYNC} if RESYNC else {})}


def vg(sim: Path, *args: str) -> float:
    """Run a vgpukit command on the host; its exit time (monotonic)."""
    cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), *args]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=_env(), cwd=CHECKOUT)
    return time.monotonic()


def vg_init(sim: Path, profile: str) -> None:
    cmd = [sys.executable, "-m", "vgpukit", "sim", "init", str(sim), "--profile", profile]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=_env(), cwd=CHECKOUT)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


class Doors:
    """The three processes on one host, and the peers that watch what they say."""

    def __init__(self, sim: Path, base: Path) -> None:
        self.sim = sim
        self.api = ApiServer(NODE)
        kubeconfig = self.api.kubeconfig(base / "kubeconfig")
        self.kubelet = Kubelet(sim / "var/lib/kubelet/device-plugins").start()
        self.port = _free_port()
        vk = [sys.executable, "-m", "vgpukit", "--sim", str(sim)]
        self.logs = {name: (base / f"{name}.log").open("w") for name in ("dp", "dra", "exporter")}
        self.procs = {
            "dp": subprocess.Popen([*vk, "k8s", "device-plugin"], env=_env(), cwd=CHECKOUT, stdout=subprocess.DEVNULL,
                                   stderr=self.logs["dp"]),
            "dra": subprocess.Popen([*vk, "k8s", "dra-plugin", "--node", NODE, "--kubeconfig", str(kubeconfig)],
                                    env=_env(), cwd=CHECKOUT, stdout=subprocess.DEVNULL, stderr=self.logs["dra"]),
            "exporter": subprocess.Popen([*vk, "exporter", "--listen", f"127.0.0.1:{self.port}"], env=_env(),
                                         cwd=CHECKOUT, stdout=subprocess.DEVNULL, stderr=self.logs["exporter"]),
        }  # fmt: skip
        self.dra_log: list[tuple[float, dict[str, str]]] = []
        self.stop = False
        threading.Thread(target=self._record_dra, daemon=True).start()

    def _record_dra(self) -> None:
        api, last = self.api, -1
        while not self.stop:
            with api.changed:
                api.changed.wait_for(lambda v=last: api.version != v or self.stop, timeout=1.0)  # type: ignore[misc]
                stored = time.monotonic()  # when the stand-in stored the write (as the kubelet peer stamps an update)
                last = api.version
                devices = {  # (turning a 1,024-VF pool into text takes the recorder a few ms: not the plugin's)
                    d["name"]: json.dumps(d.get("attributes", {}), sort_keys=True)
                    for doc in api.slices.values()
                    for d in doc["spec"].get("devices", [])
                }
            self.dra_log.append((stored, devices))

    def dp_ids(self, resource: str) -> set[str]:
        ep = self.kubelet.endpoints.get(resource)
        return set(ep.devices) if ep is not None else set()

    def wait_ready(self, check: Callable[[], bool], timeout: float = 180) -> None:
        end = time.monotonic() + timeout
        while not check():
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SystemExit(f"{name} exited with {p.returncode}")
            if time.monotonic() > end:
                tails = {n: f.name for n, f in self.logs.items()}
                for f in self.logs.values():
                    f.flush()
                text = "\n".join(f"{n}: {Path(p).read_text()[-600:]}" for n, p in tails.items())
                raise SystemExit(f"the doors did not come up ({len(self.kubelet.endpoints)} endpoints, "
                                 f"{len(self.dra_log)} slice writes)\n{text}")  # fmt: skip
            time.sleep(0.1)

    def scrape(self, n: int = 1) -> float:
        """The exporter's CPU time per scrape (seconds), over ``n`` scrapes in a row (/proc counts in
        clock ticks of 10 ms: one scrape alone is below its resolution)."""
        pid = self.procs["exporter"].pid
        before = cpu_seconds(pid)
        for _ in range(n):
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=60) as resp:
                resp.read()
        time.sleep(0.05)  # the process's own accounting of the request's last bytes
        return (cpu_seconds(pid) - before) / n

    def close(self) -> None:
        self.stop = True
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.kubelet.stop()
        self.api.close()
        for f in self.logs.values():
            f.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Observer:
    """The benchmark's own inotify (not a door's) on the simulated host while a command runs: when the
    host showed the change (``shows``: a directory under the host and the entry names that say it: the
    VF's link in ``drivers/vfio-pci``, the simulated driver's state file), and when the change engine
    committed (its journal removed from ``/run/vgpukit``)."""

    def __init__(self, sim: Path, shows: tuple[str, Callable[[str], bool]]) -> None:
        host = Host(sim)
        self.notify = Inotify(host)
        host.mkdir(host.state_dir())
        self.notify.add(host.state_dir(), IN_DELETE | IN_MOVED_FROM)
        self.where, self.says = str(sim / shows[0]), shows[1]
        self.notify.add(self.where, IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE)
        self.commits: list[float] = []
        self.shown: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Observer:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.done.is_set():
            ready, _, _ = select.select([self.notify], [], [], 0.05)
            if ready:
                now = time.monotonic()
                for e in self.notify.read():
                    if e.dir == self.where and self.says(e.name):
                        self.shown.append(now)
                    elif e.name == "journal":
                        self.commits.append(now)

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.05)
        self.done.set()
        self.thread.join()
        self.notify.close()

    def last(self, times: list[float], start: float, exited: float) -> float:
        """The last of ``times`` while the command ran from ``start`` to ``exited`` (its exit without one)."""
        return max((t for t in times if start <= t <= exited), default=exited)


def shown(doors: Doors, change: Change) -> tuple[bool, bool]:
    """Whether the device plugin's last update and the last ResourceSlice write show ``change``."""
    ep = doors.kubelet.endpoints.get(change.resource)
    dp = ep is not None and bool(ep.updates) and change.dp(set(ep.updates[-1][1]))
    return dp, bool(doors.dra_log) and change.dra(doors.dra_log[-1][1])


def latency(doors: Doors, change: Change, samples: int) -> tuple[list[float], list[float]]:
    dp_out, dra_out = [], []
    for _ in range(samples):
        vg(doors.sim, *change.undo)  # from the state before the change (the host is set up with it made)
        # both doors must have seen the undo before the change is timed: a door that missed it (a poller
        # looking neither between the two) has nothing new to say after the change
        end = time.monotonic() + 120
        while any(shown(doors, change)) and time.monotonic() < end:
            time.sleep(0.01)
        if any(shown(doors, change)):  # a door that does not follow the undo: no later sample means anything
            dp, dra = shown(doors, change)
            MISSES.append(f"{change.name}: the undo was not seen within 120 s ({_doors(dp, dra)} still showing it)")
            break
        time.sleep(PHASE.uniform(0.5, 5.5))  # any phase of a poller's period (main's DRA plugin: 5 s)
        start = time.monotonic()
        n_dra = len(doors.dra_log)
        with Observer(doors.sim, change.shows) as seen:
            exited = vg(doors.sim, *change.do)
        made = seen.last(seen.shown, start, exited)  # the host showed the change (its last write of it)
        committed = seen.last(seen.commits, start, exited)  # the command's change engine committed it
        dp_at = dra_at = None
        end = exited + 60
        while (dp_at is None or dra_at is None) and time.monotonic() < end:
            ep = doors.kubelet.endpoints.get(change.resource)
            if dp_at is None and ep is not None:
                dp_at = next((t for t, devices in list(ep.updates) if t >= start and change.dp(set(devices))), None)
            if dra_at is None:
                dra_at = next((t for t, devices in doors.dra_log[n_dra:] if change.dra(devices)), None)
            time.sleep(0.002)
        if dp_at is None or dra_at is None:
            MISSES.append(f"{change.name}: not seen within 60 s by the {_doors(dp_at is None, dra_at is None)}")
        dp_out += [max(0.0, dp_at - made)] if dp_at is not None else [float("inf")]
        dra_out += [max(0.0, dra_at - made)] if dra_at is not None else [float("inf")]
        if dp_at is None or dra_at is None:
            break  # a door that missed it: the next samples would wait as long for as little
        RAW.append({"change": change.name, "start": start, "made": made, "committed": committed, "exited": exited,
                    "dp": dp_at, "dra": dra_at})  # fmt: skip
    return dp_out, dra_out


def _doors(dp: bool, dra: bool) -> str:
    return " and ".join(n for n, b in (("device plugin", dp), ("DRA plugin", dra)) if b)


def ms(x: float) -> str:
    return "never" if x == float("inf") else f"{1000 * x:.0f}"


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


@contextlib.contextmanager
def qos_tenants(sim: Path, base: Path, count: int) -> Iterator[None]:
    """A QoS daemon with ``count`` tenants (each a real process, offline, share 5) spread over the GPUs not
    in MIG mode (``WHOLE_GPUS``; the QoS planner refuses whole-GPU tenants on a GPU in MIG mode), as the
    exporter benchmark runs them (benchmarks/exporter/run.py): the tenant series of a scrape."""
    log = (base / "qos.log").open("wb")
    daemon = subprocess.Popen([sys.executable, "-m", "vgpukit", "--sim", str(sim), "qos", "daemon"], env=_env(),
                              cwd=CHECKOUT, stdout=log, stderr=log)  # fmt: skip
    tenants: list[subprocess.Popen[bytes]] = []
    try:
        sock, end = sim / "run/vgpukit/qos/control.sock", time.monotonic() + 60
        while not sock.exists() and time.monotonic() < end:
            time.sleep(0.05)
        for t in range(count):
            gpu = WHOLE_GPUS[t % len(WHOLE_GPUS)]
            tenants.append(subprocess.Popen(["sleep", "3600"]))
            args = ["--class", "offline", "--share", "5", "--pid", str(tenants[-1].pid), "--demand", "sample"]
            vg(sim, "qos", "tenant", "add", gpu, f"t{t}", *args)
        yield
    finally:
        daemon.terminate()
        daemon.wait()
        log.close()
        for p in tenants:
            p.kill()
            p.wait()


class Rows(list[tuple[str, ...]]):
    """The table's rows, each also on stderr as it is measured (a run that fails later keeps them)."""

    def append(self, row: tuple[str, ...]) -> None:
        print("| " + " | ".join(row) + " |", file=sys.stderr, flush=True)
        super().append(row)


def run_host(spec: HostSpec, base: Path, samples: int, latency_on: bool = True) -> tuple[Doors, Rows]:
    """The host made, its doors started and ready, its latency rows measured; its doors left running."""
    sim = base / spec.name
    spec.make(sim, base)
    doors = Doors(sim, base)
    rows = Rows()
    try:
        doors.wait_ready(lambda: bool(doors.kubelet.endpoints) and bool(doors.dra_log and doors.dra_log[-1][1]))
        doors.scrape()
        time.sleep(3)
        for change in spec.changes if latency_on else []:
            dp, dra = latency(doors, change, samples)
            for door, xs in (("device plugin ListAndWatch", dp), ("DRA ResourceSlice", dra)):
                if xs:
                    rows.append((spec.name, change.name, door, str(len(xs)), ms(pct(xs, 50)), ms(pct(xs, 99))))
    except BaseException:
        doors.close()
        raise
    return doors, rows


def idle_all(hosts: dict[str, Doors], idle: float) -> dict[str, tuple[str, ...]]:
    """Every host's three processes over one window of ``idle`` seconds (all hosts at once: a full run
    stays short, and they share the same quiet or busy machine)."""
    time.sleep(5)
    pids = {(h, n): p.pid for h, doors in hosts.items() for n, p in doors.procs.items()}
    before = {k: cpu_seconds(pid) for k, pid in pids.items()}
    t0, load0 = time.monotonic(), os.getloadavg()
    time.sleep(idle)
    wall, load1 = time.monotonic() - t0, os.getloadavg()
    LOADS.append(f"{', '.join(hosts)} at once: {load0[0]:.2f} at the start, {load1[0]:.2f} at the end, {load1[1]:.2f} "
                 f"and {load1[2]:.2f} over the last 5 and 15 minutes")  # fmt: skip
    used = {k: cpu_seconds(pid) - before[k] for k, pid in pids.items()}
    out = {}
    for h in hosts:
        mine = {n: u for (hh, n), u in used.items() if hh == h}
        each = ", ".join(f"{n} {100 * u / wall:.3f}" for n, u in mine.items())
        out[h] = (h, f"idle {idle:g} s, % of one core ({each})", "all three", "1",
                  f"{100 * sum(mine.values()) / wall:.3f}", "-")  # fmt: skip
        print("| " + " | ".join(out[h]) + " |", file=sys.stderr, flush=True)
    return out


def scrape_rows(spec: HostSpec, doors: Doors, base: Path, samples: int) -> tuple[str, ...]:
    with qos_tenants(doors.sim, base, TENANTS) if spec.tenants else contextlib.nullcontext():
        doors.scrape()  # the tenants' first scrape (their CUDA regions, the daemon's status)
        scrapes = [doors.scrape(SCRAPES) for _ in range(samples)]
    what = f"scrape{f', {TENANTS} QoS tenants' if spec.tenants else ''} (exporter CPU, mean of {SCRAPES} in a row)"
    return (spec.name, what, "exporter", str(len(scrapes)), f"{1000 * statistics.median(scrapes):.1f}",
            f"{1000 * pct(scrapes, 99):.1f}")  # fmt: skip


def main() -> int:
    global CHECKOUT, RESYNC
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--idle", type=float, default=600.0, help="seconds of the idle measurement (0: none)")
    ap.add_argument("--quick", action="store_true", help="3 samples, 30 s idle")
    ap.add_argument("--checkout", type=Path, default=ROOT, help="run the doors of this checkout")
    ap.add_argument("--hosts", default=",".join(HOSTS))
    ap.add_argument("--no-latency", action="store_true", help="only the idle and scrape measurements")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--resync", help="the doors' safety net in seconds (VGPUKIT_RESYNC; default: theirs, 300)")
    args = ap.parse_args()
    CHECKOUT = args.checkout.resolve()
    RESYNC = args.resync
    samples, idle = (3, 30.0) if args.quick else (args.samples, args.idle)
    rows: list[tuple[str, ...]] = []
    hosts: dict[str, Doors] = {}
    with tempfile.TemporaryDirectory(prefix="watchb", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        try:
            for name in args.hosts.split(","):  # each host's doors keep running while the next is measured
                base = Path(tmp) / name
                base.mkdir()
                hosts[name], latency_rows = run_host(HOSTS[name], base, samples, not args.no_latency)
                rows += latency_rows
            idle_rows = idle_all(hosts, idle) if idle > 0 else {}
            for name, doors in hosts.items():
                rows += [idle_rows[name]] if name in idle_rows else []
                rows.append(scrape_rows(HOSTS[name], doors, doors.sim.parent, samples))
        finally:
            for doors in hosts.values():
                doors.close()
    print(f"checkout: {CHECKOUT}; {os.cpu_count()} CPUs; safety net: {RESYNC or 'the default'}")
    for line in LOADS:
        print(f"load average around the idle measurement, {line}")
    for line in MISSES:
        print(f"not followed: {line}")
    print("| host | change | door | n | p50 ms (idle: %) | p99 ms |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "misses": MISSES, "samples": RAW}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
