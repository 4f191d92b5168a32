"""The simulated driver's state file and rules, shared by :mod:`vgpukit.sim.nvml`."""

from __future__ import annotations

import fcntl
import json
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NotFound
from ..inputs import load_json
from ..nvml import table as tables
from ..nvml.errors import GPU_IS_LOST, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, nvml_error
from ..nvml.model import ComputeInstance, GiProfile, GpuInstance
from .state import MAX_STATE_BYTES, corrupt, read_state, read_state_bytes

STATE_DIR = ".vgpukit-sim"
STATE_FILE = "nvml.json"
LOCK_FILE = "nvml.lock"


# ----------------------------------------------------------------------------- state file
COMPACT_FACTOR = 2  # the change lines are folded into nvml.json past this many times its size


class Store:
    """``nvml.json`` of one simulated host, held for the life of a :class:`~vgpukit.sim.nvml.SimNvml`.

    It is read again only when the stamp (inode, size, mtime) of its files shows another process
    wrote since: a call costs the lock and two ``stat``. A call on one GPU saves that GPU (and the
    fault counters it went through) as a line appended to ``nvml.<gen>.jsonl``, not the whole state;
    past :data:`COMPACT_FACTOR` times the size of ``nvml.json`` the lines are folded into a new
    ``nvml.json`` of the next generation (one atomic rename: the old lines are then ignored, and
    removed). Folding in proportion to the state (not past a fixed size) keeps a call's share of the
    rewrites independent of the number of GPUs."""

    def __init__(self, sim_dir: Path) -> None:
        self.sim_dir = Path(sim_dir)
        self.path = self.sim_dir / STATE_DIR / STATE_FILE
        self.state: dict[str, Any] | None = None
        # the stamps of nvml.json and of nvml.<gen>.jsonl when self.state was read or last saved
        self.stamp: tuple[tuple[int, int, int], int, tuple[int, int, int] | None] | None = None
        self.lock_fd: int | None = None  # nvml.lock, opened once for the life of this store
        self.closer: weakref.finalize[..., Any] | None = None

    @contextmanager
    def locked(self, write: bool, gpu: int | None = None) -> Iterator[dict[str, Any]]:
        """The state under the driver's lock; a ``write`` saves it after: GPU ``gpu`` only, when given."""
        if self.lock_fd is None:
            if not self.path.exists():
                raise NotFound(f"{self.sim_dir} has no simulated NVML driver", path=str(self.path))
            flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            self.lock_fd = os.open(self.path.with_name(LOCK_FILE), flags, 0o644)
            self.closer = weakref.finalize(self, os.close, self.lock_fd)  # a dropped store releases it
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
        try:
            state = self._current()
            try:
                yield state
            except BaseException:
                # a failed call changes nothing, except the fault counters it went through
                if write and state.pop("_faults_touched", False):
                    self._save(state, [{"set": "faults", "to": state["faults"]}])
                self.state = None  # the failed call may have changed it; read it again next time
                raise
            faults = state.pop("_faults_touched", False)
            if write:
                lines = None
                if gpu is not None:
                    lines = [{"gpu": gpu, "to": state["gpus"][gpu]}]
                    lines += [{"set": "faults", "to": state["faults"]}] if faults else []
                self._save(state, lines)
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def _log(self, gen: int) -> Path:
        return self.path.with_name(f"nvml.{gen}.jsonl")

    def close(self) -> None:
        """Release the lock file (opened again by the next call)."""
        if self.closer is not None:
            self.closer()  # os.close, once
        self.lock_fd = self.closer = None

    def _current(self) -> dict[str, Any]:
        base = _stamp(self.path)
        if base is None:
            raise NotFound(f"{self.sim_dir} has no simulated NVML driver", path=str(self.path))
        held = self.stamp
        if self.state is not None and held is not None and held[0] == base and _stamp(self._log(held[1])) == held[2]:
            return self.state
        state = read_state(self.sim_dir, self.path)
        gen = state.get("gen", 0) if isinstance(state, dict) else None
        log = self._log(gen) if type(gen) is int else None
        log_stamp = _stamp(log) if log is not None else None
        if log is not None and log_stamp is not None:
            for line in read_state_bytes(self.sim_dir, log).splitlines():
                if not _replay(state, line):
                    raise corrupt(self.sim_dir, log)
        if log is None or not _shape_ok(state, _STATE):
            raise corrupt(self.sim_dir, self.path)
        assert isinstance(gen, int)
        loaded: dict[str, Any] = state
        self.state, self.stamp = loaded, (base, gen, log_stamp)
        return loaded

    def _save(self, state: dict[str, Any], lines: list[dict[str, Any]] | None) -> None:
        """Append ``lines`` to the log of the state's generation, or (``None``, or the log past its
        share) write the whole state as the next generation. The caller holds the lock, and
        :meth:`_current` has just stamped the files."""
        assert self.stamp is not None
        base, gen, log_stamp = self.stamp
        log = self._log(gen)
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines or []).encode()
        size = log_stamp[1] if log_stamp is not None else 0
        if lines is None or size + len(data) > COMPACT_FACTOR * base[1]:
            state["gen"] = gen + 1
            self.stamp = (_save(self.path, state), gen + 1, None)
            log.unlink(missing_ok=True)  # the next generation: the old lines no longer apply
            return
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        self.stamp = (base, gen, (st.st_ino, st.st_size, st.st_mtime_ns))


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


def _dir_stamp(d: Path) -> tuple[int, int]:
    """A directory's inode and mtime: both change when an entry is added or removed (or it is replaced)."""
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return (0, 0)
    return (st.st_ino, st.st_mtime_ns)


def _locked(sim_dir: Path, write: bool) -> Any:
    """One call's state, read for it (the host controls at the bottom of :mod:`vgpukit.sim.nvml`)."""
    return Store(sim_dir).locked(write)  # the store's lock file is closed when it is dropped


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


def _save(state_path: Path, state: dict[str, Any]) -> tuple[int, int, int]:
    """Write the whole state (a new file renamed over the old); its stamp."""
    tmp = state_path.with_name(f".{STATE_FILE}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        data = memoryview(json.dumps(state, separators=(",", ":")).encode())  # C encoder: ~10x faster than indent=
        while data:
            data = data[os.write(fd, data) :]
        st = os.fstat(fd)
    finally:
        os.close(fd)
    os.replace(tmp, state_path)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


# ----------------------------------------------------------------------------- driver logic
def _gpu(state: dict[str, Any], index: int) -> dict[str, Any]:
    gpus: list[dict[str, Any]] = state["gpus"]
    if not 0 <= index < len(gpus):
        raise nvml_error(INVALID_ARGUMENT, f"no GPU with NVML index {index}")
    if gpus[index].get("lost"):  # injected (sim fault lost / xid 79): it answers nothing any more
        raise nvml_error(GPU_IS_LOST, f"GPU {gpus[index]['bdf']} is lost", device=gpus[index]["bdf"])
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


def minor_gpu(minor: int) -> int:
    """The GPU whose GPU/compute instance a minor belongs to; -1 for the config and monitor minors."""
    return (minor - 3) // 135 if minor >= 3 else -1


def ci_minor(gpu: int, gi: int, ci: int) -> int:
    return gi_minor(gpu, gi) + 1 + ci


def mig_minors_text(n_gpus: int) -> str:
    lines = ["config 1", "monitor 2"]
    for gpu in range(n_gpus):
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_minor(gpu, gi)}")
            lines.extend(f"gpu{gpu}/gi{gi}/ci{ci}/access {ci_minor(gpu, gi, ci)}" for ci in range(8))
    return "\n".join(lines) + "\n"
