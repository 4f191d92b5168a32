"""The simulated driver's state file and rules, shared by :mod:`vgpukit.nvml.sim`."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NotFound
from ..inputs import load_json
from ..sim.state import MAX_STATE_BYTES, corrupt, read_state, read_state_bytes
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


COMPACT_BYTES = 64 * 1024  # the change lines are folded into nvml.json past this and its own size


class Store:
    """``nvml.json`` of one simulated host, held for the life of a :class:`~vgpukit.nvml.sim.SimNvml`.

    It is read again only when the stamp (inode, size, mtime) of its files shows another process
    wrote since. A call on one GPU saves that GPU (and the fault counters it went through) as a line
    appended to ``nvml.<gen>.jsonl``, not the whole state; past :data:`COMPACT_BYTES` the lines are
    folded into a new ``nvml.json`` of the next generation (one atomic rename: the old lines are
    then ignored, and removed)."""

    def __init__(self, sim_dir: Path) -> None:
        self.sim_dir = Path(sim_dir)
        self.state: dict[str, Any] | None = None
        self.stamp: tuple[object, ...] | None = None

    @contextmanager
    def locked(self, write: bool, gpu: int | None = None) -> Iterator[dict[str, Any]]:
        """The state under the driver's lock; a ``write`` saves it after: GPU ``gpu`` only, when given."""
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
                    # a failed call changes nothing, except the fault counters it went through
                    if write and state.pop("_faults_touched", False):
                        self._save(state_path, state, [{"set": "faults", "to": state["faults"]}])
                    self.state = None  # the failed call may have changed it; read it again next time
                    raise
                faults = state.pop("_faults_touched", False)
                if write:
                    lines = None
                    if gpu is not None:
                        lines = [{"gpu": gpu, "to": state["gpus"][gpu]}]
                        lines += [{"set": "faults", "to": state["faults"]}] if faults else []
                    self._save(state_path, state, lines)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _log(self, state_path: Path, state: dict[str, Any]) -> Path:
        return state_path.with_name(f"nvml.{state.get('gen', 0)}.jsonl")

    def _current(self, state_path: Path) -> dict[str, Any]:
        if self.state is None or self._stamp(state_path) != self.stamp:
            state: dict[str, Any] = read_state(self.sim_dir, state_path)
            log = self._log(state_path, state) if isinstance(state, dict) else None
            if log is not None and log.exists():
                for line in read_state_bytes(self.sim_dir, log).splitlines():
                    if not _replay(state, line):
                        raise corrupt(self.sim_dir, log)
            if not _shape_ok(state, _STATE):
                raise corrupt(self.sim_dir, state_path)
            self.state = state
            self.stamp = self._stamp(state_path)
        return self.state

    def _stamp(self, state_path: Path) -> tuple[object, ...]:
        base = _stamp(state_path)
        gen = self.state.get("gen", 0) if self.state is not None else None
        return (base, gen, _stamp(state_path.with_name(f"nvml.{gen}.jsonl")) if gen is not None else None)

    def _save(self, state_path: Path, state: dict[str, Any], lines: list[dict[str, Any]] | None) -> None:
        log = self._log(state_path, state)
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines or []).encode()
        size = log.stat().st_size if log.exists() else 0
        base = state_path.stat().st_size
        if lines is None or size + len(data) > max(COMPACT_BYTES, base):
            state["gen"] = int(state.get("gen", 0)) + 1
            _save(state_path, state)  # the next generation: the old lines no longer apply
            log.unlink(missing_ok=True)
        else:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        self.stamp = self._stamp(state_path)


def _replay(state: dict[str, Any], line: bytes) -> bool:
    """Apply one change line to ``state``; False when it is not one (the shape is checked after)."""
    try:
        rec = load_json(line, "nvml change line", max_bytes=MAX_STATE_BYTES)
    except InvalidInput:
        return False
    if not isinstance(rec, dict) or "to" not in rec:
        return False
    gpus = state.get("gpus")
    if rec.get("set") == "faults":
        state["faults"] = rec["to"]
    elif type(rec.get("gpu")) is int and isinstance(gpus, list) and 0 <= rec["gpu"] < len(gpus):
        gpus[rec["gpu"]] = rec["to"]
    else:
        return False
    return True


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
_LINK = {"link": int, "active": bool, "remote": str, "type": str}  # optional "nvlinks" of a GPU
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
