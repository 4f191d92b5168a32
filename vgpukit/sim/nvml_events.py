"""The simulated driver's health: injected XIDs, ECC errors, lost GPUs, and the events they deliver.

Each GPU's events are lines appended to ``<sim>/.vgpukit-sim/events/gpu<N>.jsonl`` (one
``{"kind", "data", "time"}`` object a line; the line number is the event's ``seq``). An event
watcher reads the files from where it was told to start (a real event set sees only what comes
after it is created: ``since=None`` does that). What an injected XID does to the driver (the GPU is
lost, an ECC error is counted) is the simulator's own table, ``vgpukit/sim/data/driver-faults.yaml``.
PCI faults (a PF reset taking its VFs away, AER counters) act on the simulated sysfs tree.
"""

from __future__ import annotations

import json
import os
import time
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NotFound
from ..host import Host
from ..host.notify import IN_CREATE, IN_MODIFY, Inotify
from ..inputs import load_yaml
from ..nvml.errors import GPU_IS_LOST, nvml_error
from ..nvml.model import GpuCondition, GpuTelemetry, NvmlEvent
from ..stopping import readable
from .nvml_state import STATE_DIR, Store, _locked
from .state import corrupt

EVENTS_DIR = "events"
POLL = 0.05  # seconds between two reads of the event files while waiting
AER_KINDS = {"correctable": "TOTAL_ERR_COR", "fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL"}


@cache
def driver_faults() -> dict[int, dict[str, Any]]:
    """The simulator's table: XID -> what the driver does (``lost``, ``ecc``)."""
    path = Path(__file__).resolve().parent / "data" / "driver-faults.yaml"
    doc = load_yaml(path.read_text(), "vgpukit/sim/data/driver-faults.yaml")
    return {int(k): dict(v or {}) for k, v in doc["xid"].items()}


@cache
def telemetry_table() -> dict[str, dict[str, Any]]:
    """The simulator's table: NVML product name -> what an idle board of it reports."""
    path = Path(__file__).resolve().parent / "data" / "gpu-telemetry.yaml"
    doc = load_yaml(path.read_text(), "vgpukit/sim/data/gpu-telemetry.yaml")
    return {str(k): dict(v) for k, v in doc.items()}


def events_file(sim_dir: Path, gpu: int) -> Path:
    return Path(sim_dir) / STATE_DIR / EVENTS_DIR / f"gpu{gpu}.jsonl"


def _append(sim_dir: Path, gpu: int, kind: str, data: int = 0, gi: int | None = None) -> None:
    path = events_file(sim_dir, gpu)
    path.parent.mkdir(exist_ok=True)
    rec: dict[str, Any] = {"kind": kind, "data": data, "time": round(time.time(), 3)}
    if gi is not None:
        rec["gi"] = gi  # the GPU instance the driver attributes it to
    line = json.dumps(rec) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line.encode())  # one short write with O_APPEND: a reader never sees half a line
    finally:
        os.close(fd)


def _read(sim_dir: Path, gpu: int) -> list[dict[str, Any]]:
    path = events_file(sim_dir, gpu)
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.split("\n")[:-1]:  # the last piece is empty (or a line still being written)
        try:
            rec = json.loads(line)
        except ValueError:
            raise corrupt(Path(sim_dir), path) from None
        if not (isinstance(rec, dict) and isinstance(rec.get("kind"), str) and type(rec.get("data")) is int) or (
            type(rec.get("gi", -1)) is not int
        ):
            raise corrupt(Path(sim_dir), path)
        out.append(rec)
    return out


# ----------------------------------------------------------------------------- injection
def _gpu_entry(state: dict[str, Any], gpu: int) -> dict[str, Any]:
    gpus: list[dict[str, Any]] = state["gpus"]
    if not 0 <= gpu < len(gpus):
        raise NotFound(f"the simulated driver has no GPU {gpu}", value=gpu, hint=f"0 to {len(gpus) - 1}")
    return gpus[gpu]


def gpu_of(sim_dir: Path, bdf: str) -> int:
    """The simulated driver's index of its GPU at PCI address ``bdf`` (the front end names devices with
    vgpukit's one resolver; this is only the driver's own table)."""
    with _locked(sim_dir, write=False) as state:
        for i, g in enumerate(state["gpus"]):
            if g["bdf"] == bdf:
                return i
    raise NotFound(f"{bdf} is not a GPU of the simulated driver", device=bdf, hint="see: vgpukit devices --kind gpu")


def inject_ecc(sim_dir: Path, gpu: int, double: bool) -> None:
    key = "ecc_uncorrected" if double else "ecc_corrected"
    with _locked(sim_dir, write=True) as state:
        g = _gpu_entry(state, gpu)
        g[key] = int(g.get(key, 0)) + 1
        g[f"{key}_agg"] = int(g.get(f"{key}_agg", 0)) + 1  # the aggregate count survives a reset
    _append(sim_dir, gpu, "ecc-double" if double else "ecc-single")


def inject_lost(sim_dir: Path, gpu: int) -> None:
    with _locked(sim_dir, write=True) as state:
        g = _gpu_entry(state, gpu)
        was = bool(g.get("lost"))
        g["lost"] = True
    if not was:
        _append(sim_dir, gpu, "lost")  # a waiter's nvmlEventSetWait answers GPU_IS_LOST: the watcher's event


def inject_xid(sim_dir: Path, gpu: int, xid: int, gi: int | None = None) -> None:
    """The driver reports ``xid`` on ``gpu``; ``gi``: in that GPU instance (a MIG slice), which must exist."""
    effect = driver_faults().get(xid, {})
    with _locked(sim_dir, write=False) as state:
        g = _gpu_entry(state, gpu)
        if gi is not None and str(gi) not in {str(i.get("id")) for i in g.get("gis", [])}:
            raise NotFound(f"GPU {gpu} has no GPU instance {gi}")
    _append(sim_dir, gpu, "xid", xid, gi)
    if isinstance(effect.get("recovery"), int):
        with _locked(sim_dir, write=True) as state:
            g = _gpu_entry(state, gpu)
            g["recovery_action"] = max(int(g.get("recovery_action", 0)), effect["recovery"])
    if effect.get("ecc") in ("single", "double"):
        inject_ecc(sim_dir, gpu, effect["ecc"] == "double")
    if effect.get("lost"):
        inject_lost(sim_dir, gpu)


def recover(sim_dir: Path, gpu: int) -> None:
    """The GPU answers again, its volatile ECC counts cleared (as after a reset or a reboot)."""
    with _locked(sim_dir, write=True) as state:
        g = _gpu_entry(state, gpu)
        for key in ("lost", "ecc_corrected", "ecc_uncorrected", "recovery_action"):
            g.pop(key, None)


def pf_reset(sim_dir: Path, pf: str) -> list[str]:
    """A function-level reset of PF ``pf`` that takes its VFs away: the VFs leave sysfs while
    ``sriov_numvfs`` still says how many were configured. The VFs' addresses."""
    from .uevents import AnnouncingTree, publish  # the sysfs tree loads with the PCI faults only

    tree = AnnouncingTree(Path(sim_dir))
    pf_dir = tree.device_dir(pf)
    if not pf_dir.is_dir():
        raise NotFound(f"no PCI device {pf} on the simulated host", value=pf)
    if not (pf_dir / "sriov_totalvfs").exists():
        raise InvalidInput(f"{pf} is not an SR-IOV PF: a PF reset takes VFs away only from one", value=pf)
    gone = []
    for entry in sorted(os.listdir(pf_dir)):
        if entry.startswith("virtfn"):
            vf = os.path.basename(os.readlink(pf_dir / entry))
            tree.remove_pci_device(vf)
            tree.unlink(pf_dir / entry)
            gone.append(vf)
    publish(tree.root, tree.uevents)  # each VF's removal, as the PCI core announces it
    return gone


def aer(sim_dir: Path, bdf: str, kind: str) -> int:
    """Count one AER error of ``kind`` (correctable, fatal, nonfatal) on ``bdf``; the new total."""
    if kind not in AER_KINDS:
        raise InvalidInput(f"unknown AER error kind {kind!r}", hint=f"one of {', '.join(AER_KINDS)}")
    from .uevents import AnnouncingTree, publish

    tree = AnnouncingTree(Path(sim_dir))
    d = tree.device_dir(bdf)
    if not d.is_dir():
        raise NotFound(f"no PCI device {bdf} on the simulated host", value=bdf)
    path = d / f"aer_dev_{kind}"
    total_key = AER_KINDS[kind]
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            counts[name] = int(value) if value.isdigit() else 0
    counts[total_key] = counts.get(total_key, 0) + 1
    counts.setdefault("Undefined", 0)
    tree.write_attr(path, "".join(f"{k} {v}\n" for k, v in sorted(counts.items(), key=lambda kv: kv[0] == total_key)))
    if kind != "correctable":  # the AER driver's recovery announces itself (pci_uevent_ers); a counted
        tree.recovery(bdf)  # correctable error announces nothing
        publish(tree.root, tree.uevents)
    return counts[total_key]


# ----------------------------------------------------------------------------- the facade's side
class SimEventWatcher:
    def __init__(self, sim_dir: Path, count: int, since: dict[int, int] | None) -> None:
        self.sim_dir = Path(sim_dir)
        self.count = count
        self.inotify: Inotify | None = None  # made at the first wait that blocks
        if since is None:  # as a real event set: what comes from now on
            self.seen = {gpu: len(_read(self.sim_dir, gpu)) for gpu in range(count)}
        else:
            self.seen = {gpu: since.get(gpu, 0) for gpu in range(count)}

    def _new(self) -> list[NvmlEvent]:
        out = []
        for gpu in range(self.count):
            recs = _read(self.sim_dir, gpu)
            start = min(self.seen[gpu], len(recs))
            for seq, rec in enumerate(recs[start:], start + 1):
                gi = rec.get("gi", -1)
                out.append(NvmlEvent(gpu, rec["kind"], rec["data"], float(rec.get("time", 0)), seq, gi))
            self.seen[gpu] = len(recs)
        return sorted(out, key=lambda e: (e.time, e.gpu, e.seq))

    def wait(self, timeout: float) -> list[NvmlEvent]:
        """As nvmlEventSetWait: blocks until an event comes (inotify on the event files' directory wakes
        it: an idle wait costs nothing) or ``timeout`` passed."""
        end = time.monotonic() + timeout
        while True:
            found = self._new()
            left = end - time.monotonic()
            if found or left <= 0:
                return found
            notify = self._notify()
            if notify is None:
                time.sleep(min(POLL, left))
                continue
            if readable([notify], left):
                notify.read()

    def _notify(self) -> Inotify | None:
        if self.inotify is None:
            d = events_file(self.sim_dir, 0).parent
            d.mkdir(exist_ok=True)
            notify = Inotify(Host(self.sim_dir))
            if notify.add(d, IN_MODIFY | IN_CREATE):
                self.inotify = notify
            else:
                notify.close()
        return self.inotify

    def close(self) -> None:
        if self.inotify is not None:
            self.inotify.close()
            self.inotify = None


class SimHealth:
    """The health calls of :class:`vgpukit.sim.nvml.SimNvml` (a mixin: ``sim_dir`` is the host's)."""

    sim_dir: Path
    store: Store  # the facade's own: what it read is read again only when the driver's files changed

    def condition(self, gpu: int) -> GpuCondition:
        with self.store.locked(write=False) as state:
            g = _gpu_entry(state, gpu)
            if g.get("lost"):
                return GpuCondition(True, None, None)
            return GpuCondition(False, int(g.get("ecc_corrected", 0)), int(g.get("ecc_uncorrected", 0)))

    def telemetry(self, gpu: int) -> GpuTelemetry:
        with self.store.locked(write=False) as state:
            g = _gpu_entry(state, gpu)
            if g.get("lost"):
                raise nvml_error(GPU_IS_LOST, f"GPU {gpu}")
            table = telemetry_table()
            t = {**table.get(g["name"], table["default"]), **dict(g.get("telemetry") or {})}
            total, used = int(t["fb_total_mib"]), int(t["fb_used_mib"])
            return GpuTelemetry(
                util=int(t["util"]),
                mem_util=int(t["mem_util"]),
                fb_used_mib=used,
                fb_free_mib=max(0, total - used),
                power_w=float(t["power_w"]),
                temp_c=int(t["temp_c"]),
                ecc_sbe_vol=int(g.get("ecc_corrected", 0)),
                ecc_dbe_vol=int(g.get("ecc_uncorrected", 0)),
                ecc_sbe_agg=int(g.get("ecc_corrected_agg", 0)),
                ecc_dbe_agg=int(g.get("ecc_uncorrected_agg", 0)),
            )

    def recovery_action(self, gpu: int) -> int | None:
        """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (field 230): what the driver says recovers the GPU."""
        with _locked(self.sim_dir, write=False) as state:
            g = _gpu_entry(state, gpu)
            if g.get("lost"):
                raise nvml_error(GPU_IS_LOST, f"GPU {gpu}")
            return int(g.get("recovery_action", 0))

    def watch_events(self, since: dict[int, int] | None = None) -> SimEventWatcher:
        with self.store.locked(write=False) as state:
            count = len(state["gpus"])
        return SimEventWatcher(self.sim_dir, count, since)
