"""The simulated driver's state file and rules, shared by :mod:`vgpukit.nvml.sim`."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import NotFound
from ..sim.state import corrupt, read_state
from . import table as tables
from .errors import INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, nvml_error
from .model import ComputeInstance, GiProfile, GpuInstance

STATE_DIR = ".vgpukit-sim"
STATE_FILE = "nvml.json"
LOCK_FILE = "nvml.lock"


# ----------------------------------------------------------------------------- state file
def _paths(sim_dir: Path) -> tuple[Path, Path]:
    base = Path(sim_dir) / STATE_DIR
    return base / STATE_FILE, base / LOCK_FILE


class Store:
    """``nvml.json`` of one simulated host, held for the life of a :class:`~vgpukit.nvml.sim.SimNvml`:
    read again only when its stamp (inode, size, mtime) shows another process saved it since."""

    def __init__(self, sim_dir: Path) -> None:
        self.sim_dir = Path(sim_dir)
        self.state: dict[str, Any] | None = None
        self.stamp: tuple[int, int, int] | None = None

    @contextmanager
    def locked(self, write: bool) -> Iterator[dict[str, Any]]:
        state_path, lock_path = _paths(self.sim_dir)
        if not state_path.exists():
            raise NotFound(f"{self.sim_dir} has no simulated NVML driver", path=str(state_path))
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
            try:
                state = self._current(state_path)
                try:
                    yield state
                except BaseException:
                    self.state = None  # the failed call may have changed it; read it again next time
                    # a failed call changes nothing, except the fault counters it went through
                    if write and state.pop("_faults_touched", False):
                        _save(state_path, state)
                    raise
                state.pop("_faults_touched", None)
                if write:
                    _save(state_path, state)
                    self.stamp = _stamp(state_path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _current(self, state_path: Path) -> dict[str, Any]:
        now = _stamp(state_path)
        if self.state is None or now != self.stamp:
            state: dict[str, Any] = read_state(self.sim_dir, state_path)
            if not _shape_ok(state, _STATE):
                raise corrupt(self.sim_dir, state_path)
            self.state, self.stamp = state, now
        return self.state


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _locked(sim_dir: Path, write: bool) -> Any:
    """One call's state, read for it (the host controls at the bottom of :mod:`vgpukit.nvml.sim`)."""
    return Store(sim_dir).locked(write)


# The state file's shape (types of the keys the driver logic reads), checked at every load so a
# corrupt or hand-edited file is one clear line, not an internal error deep in a call.
_CI = {"id": int, "profile": int, "slices": int, "start": int, "uuid": str}
_GI = {"id": int, "profile_id": int, "start": int, "size": int, "cis": [_CI]}
_GPU = {"bdf": str, "name": str, "uuid": str, "mig_current": bool, "mig_pending": bool, "gis": [_GI],
        "clients": [{"pid": int, "name": str}], "generation": int}  # fmt: skip
_STATE = {"gpus": [_GPU], "faults": [{"call": str, "nth": int, "code": int}], "next_pid": int}


def _shape_ok(value: Any, spec: Any) -> bool:
    if isinstance(spec, dict):
        return isinstance(value, dict) and all(k in value and _shape_ok(value[k], t) for k, t in spec.items())
    if isinstance(spec, list):
        return isinstance(value, list) and all(_shape_ok(v, spec[0]) for v in value)
    return isinstance(value, spec) and (spec is bool or not isinstance(value, bool))


def _save(state_path: Path, state: dict[str, Any]) -> None:
    tmp = state_path.with_name(f".{STATE_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(state, separators=(",", ":")))  # C encoder: ~10x faster than indent=
    os.replace(tmp, state_path)


# ----------------------------------------------------------------------------- driver logic
def _gpu(state: dict[str, Any], index: int) -> dict[str, Any]:
    gpus: list[dict[str, Any]] = state["gpus"]
    if not 0 <= index < len(gpus):
        raise nvml_error(INVALID_ARGUMENT, f"no GPU with NVML index {index}")
    return gpus[index]


def _model(g: dict[str, Any]) -> tables.MigModel:
    if not g.get("mig_capable"):
        raise nvml_error(NOT_SUPPORTED, f"GPU {g['bdf']} ({g['name']}) is not MIG-capable", device=g["bdf"])
    return tables.model(g.get("model"), g.get("name"))


def _mig_on(g: dict[str, Any]) -> tables.MigModel:
    m = _model(g)
    if not g["mig_current"]:
        raise nvml_error(NOT_SUPPORTED, f"MIG mode is not enabled on GPU {g['bdf']}", device=g["bdf"])
    return m


def _gi_profile(m: tables.MigModel, g: dict[str, Any], profile_id: int) -> GiProfile:
    """The GPU's instance profile with this id, or INVALID_ARGUMENT as the driver answers."""
    p = m.profile(profile_id)
    if p is None:
        raise nvml_error(INVALID_ARGUMENT, f"no GPU instance profile id {profile_id} on {g['name']}")
    return p


def _check_fault(state: dict[str, Any], call: str, gpu: int) -> None:
    for fault in state["faults"]:
        if fault["call"] != call or (fault.get("gpu") is not None and fault["gpu"] != gpu):
            continue
        fault["seen"] = fault.get("seen", 0) + 1
        state["_faults_touched"] = True
        if fault["seen"] >= fault["nth"]:
            state["faults"].remove(fault)
            raise nvml_error(int(fault["code"]), f"{call} on GPU {gpu} (injected fault)")
        return


def _gi_id(m: tables.MigModel, start: int, size: int) -> int:
    # the driver's id is the node of the placement in the binary tree of memory slots (swizzle id)
    return (m.memory_slots // size - 1) + start // size


def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def _used_mask(g: dict[str, Any]) -> int:
    mask = 0
    for gi in g["gis"]:
        mask |= _mask(gi["start"], gi["size"])
    return mask


def _fits(g: dict[str, Any], m: tables.MigModel, p: GiProfile, start: int) -> bool:
    if _used_mask(g) & _mask(start, p.size):
        return False
    if sum(1 for gi in g["gis"] if gi["profile_id"] == p.id) >= p.max_count:
        return False
    if p.media:
        for gi in g["gis"]:
            other = m.profile(gi["profile_id"])
            if other is not None and other.media:
                return False
    return True


def _gi_record(gi: dict[str, Any]) -> GpuInstance:
    cis = tuple(
        ComputeInstance(c["id"], gi["id"], c["profile"], c["slices"], c["start"], c["uuid"])
        for c in sorted(gi["cis"], key=lambda c: c["id"])
    )
    return GpuInstance(gi["id"], gi["profile_id"], gi["start"], gi["size"], cis)


def _find_gi(g: dict[str, Any], gi_id: int) -> dict[str, Any]:
    for gi in g["gis"]:
        if gi["id"] == gi_id:
            return gi  # type: ignore[no-any-return]
    raise nvml_error(NOT_FOUND, f"no GPU instance {gi_id} on GPU {g['bdf']}", device=g["bdf"])


def _holders(g: dict[str, Any], gi_id: int | None = None, ci_id: int | None = None) -> list[dict[str, Any]]:
    out = []
    for c in g["clients"]:
        if gi_id is not None and c.get("gi") != gi_id:
            continue
        if ci_id is not None and c.get("ci") not in (None, ci_id):
            continue
        out.append(c)
    return out


def _names(clients: list[dict[str, Any]]) -> str:
    return ", ".join(f"{c['name']} (pid {c['pid']})" for c in clients)


def gi_minor(gpu: int, gi: int) -> int:
    return 3 + 135 * gpu + 9 * gi


def ci_minor(gpu: int, gi: int, ci: int) -> int:
    return gi_minor(gpu, gi) + 1 + ci


def mig_minors_text(n_gpus: int) -> str:
    lines = ["config 1", "monitor 2"]
    for gpu in range(n_gpus):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_minor(gpu, gi)}")
            lines.extend(f"gpu{gpu}/gi{gi}/ci{ci}/access {ci_minor(gpu, gi, ci)}" for ci in range(8))
    return "\n".join(lines) + "\n"
