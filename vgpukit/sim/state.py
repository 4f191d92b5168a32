"""What the simulated kernel knows that sysfs does not show (driver match table, pools...)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NotFound
from ..inputs import load_json

META = ".vgpukit-sim"
STORAGE_FAULTS = "storage-faults.json"  # the host's storage faults (vgpukit.sim.storage), in META
MAX_STATE_BYTES = 64 * 1024 * 1024  # the simulated NVML state of a big host with many slices


def sim_meta_dir(root: Path) -> Path:
    return root / META


def check_sim_dir(path: Path) -> None:
    """NotFound unless ``path`` is a simulated host (``vgpukit sim init`` made it)."""
    if not (path / META / "sim.json").is_file():
        raise NotFound(
            f"{path} is not a simulated host",
            path=str(path),
            hint=f"create one with: vgpukit sim init {path} --profile hgx-a100",
        )


# What the reactions read from kernel.json (keys ending in "?" are optional): checked at load, so a
# broken file is refused before a reaction half-creates a device with it.
_MODEL = {"ids": str, "class": str, "subsystem?": str, "driver?": str, "link?": list, "sriov?": dict}
_POOL = {
    "pool": int,
    "homogeneous": bool,
    "types": {"*": {"name": str, "cost": int, "max_instances?": int, "attrs?": dict}},
    "counts?": {"*": int},
}


def _fits(value: Any, spec: Any) -> bool:
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return False
        if "*" in spec:
            return all(isinstance(k, str) and _fits(v, spec["*"]) for k, v in value.items())
        for key, kind in spec.items():
            name = key.rstrip("?")
            if name in value:
                if not _fits(value[name], kind):
                    return False
            elif not key.endswith("?"):
                return False
        return True
    if spec is int:
        return type(value) is int and value >= 0
    return isinstance(value, spec)


def corrupt(root: Path, path: Path, what: str = "corrupt") -> InvalidInput:
    """The one-line refusal for a broken state file of a simulated host, saying how to reset it."""
    profile = "PROFILE"
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError, RecursionError):
        name = json.loads((sim_meta_dir(root) / "sim.json").read_text(errors="replace")).get("profile")
        profile = name if isinstance(name, str) and name.replace("-", "").isalnum() and name.isascii() else profile
    return InvalidInput(
        f"simulated host state {path} is {what}",
        path=str(path),
        hint=f"reset it with: vgpukit sim init {root} --profile {profile} --force",
    )


def read_state(root: Path, path: Path) -> Any:
    """A JSON state file of the simulated host in ``root``: a regular file inside it, parsed with
    the size and nesting limits of every document; anything else is :func:`corrupt`."""
    data = read_state_bytes(root, path)
    try:
        return load_json(data, str(path), max_bytes=MAX_STATE_BYTES)
    except InvalidInput:
        raise corrupt(root, path) from None


def read_state_bytes(root: Path, path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise corrupt(root, path, "missing") from None
    try:
        real = os.path.realpath(path)
        base = os.path.realpath(root)
        st = os.fstat(fd)
        if not real.startswith(base + "/") or not stat.S_ISREG(st.st_mode) or st.st_size > MAX_STATE_BYTES:
            raise corrupt(root, path, "not a regular file inside the simulated host")
        return os.read(fd, st.st_size + 1)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(root: Path, wait: float | None = None) -> Iterator[None]:
    """Serialise kernel reactions between concurrent invocations on one sim host (:mod:`.lock`: waits up
    to ``wait`` seconds, ``VGPUKIT_WAIT`` when None, then exit 4 naming the holder)."""
    from . import lock

    fd = lock.open_lock(root)
    try:
        lock.take(fd, root, lock.default_wait() if wait is None else wait)
        try:
            yield
        finally:
            lock.release(fd)
    finally:
        os.close(fd)


KERNEL = "kernel.json"
CHANGES = "kernel.jsonl"  # what reactions changed since kernel.json was written: one {"set", "to"} a line
DATA = ("profile", "next_group", "driver_ids", "vf_models", "mdev_pools", "vf_specs", "rdma")


class KernelState:
    """The kernel's own facts. Reactions change them only through the methods below, which note each
    change, so a reaction saves what it changed (a line appended to ``kernel.jsonl``), not the state.
    (A plain class: opening a simulated host to read it loads this module, and a dataclass costs
    start-up time to define.)"""

    def __init__(
        self,
        profile: str,
        next_group: int = 0,
        driver_ids: dict[str, list[str]] | None = None,
        vf_models: dict[str, dict[str, Any]] | None = None,
        mdev_pools: dict[str, dict[str, Any]] | None = None,
        vf_specs: dict[str, dict[str, Any]] | None = None,
        rdma: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.profile = profile
        self.next_group = next_group
        self.driver_ids = driver_ids if driver_ids is not None else {}  # driver -> ["vvvv:dddd" | "class:cccc"]
        self.vf_models = vf_models if vf_models is not None else {}  # VF "vvvv:dddd" -> model spec
        self.mdev_pools = mdev_pools if mdev_pools is not None else {}  # parent -> pool, types
        self.vf_specs = vf_specs if vf_specs is not None else {}  # PF bdf -> PF model sriov info
        self.rdma = rdma if rdma is not None else {}  # bdf -> {name: mlx5_0, driver: mlx5_core}
        self.changes: dict[tuple[str, ...], Any] = {}  # noted, not yet saved

    def _facts(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in DATA)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelState) and self._facts() == other._facts()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def rdma_for(self, bdf: str, driver: str) -> str | None:
        """The RDMA device (``infiniband/<name>``) the driver creates when it binds ``bdf``."""
        entry = self.rdma.get(bdf)
        return entry["name"] if entry is not None and entry.get("driver") == driver else None

    def match_driver(self, ids: str, class_code: str) -> str | None:
        cls = class_code.lower().removeprefix("0x")[:4]
        for driver, entries in self.driver_ids.items():
            for entry in entries:
                if entry == ids or entry == f"class:{cls}":
                    return driver
        return None

    # ------------------------------------------------------------------ changes (noted)
    def _noted(self, keys: tuple[str, ...], value: Any) -> None:
        self.changes.pop(keys, None)  # the last value of a key, in the order last set
        self.changes[keys] = value

    def take_group(self) -> int:
        """A new IOMMU group number."""
        group = self.next_group
        self.next_group += 1
        self._noted(("next_group",), self.next_group)
        return group

    def set_counts(self, parent: str, counts: dict[str, int]) -> None:
        """The instance count per type of mdev parent ``parent``."""
        self.mdev_pools[parent]["counts"] = counts
        self._noted(("mdev_pools", parent, "counts"), counts)

    def set_driver_ids(self, driver: str, entries: list[str]) -> None:
        self.driver_ids[driver] = entries
        self._noted(("driver_ids", driver), entries)

    def take_changes(self) -> bytes:
        """The noted changes as lines for ``kernel.jsonl`` (empty: nothing changed); forgets them."""
        out = "".join(
            json.dumps({"set": list(k), "to": v}, separators=(",", ":")) + "\n" for k, v in self.changes.items()
        )
        self.changes = {}
        return out.encode()

    # ------------------------------------------------------------------ files
    def data(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in DATA}

    def save(self, root: Path) -> None:
        """Write the whole state to kernel.json (no change lines left to replay: the caller drops them)."""
        path = sim_meta_dir(root) / KERNEL
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data(), separators=(",", ":")))  # the C encoder: no indent
        tmp.replace(path)

    @classmethod
    def load(cls, root: Path) -> KernelState:
        """kernel.json with the lines of kernel.jsonl replayed on it, checked."""
        path = sim_meta_dir(root) / KERNEL
        data = read_state(root, path)
        if isinstance(data, dict):
            data.setdefault("rdma", {})  # hosts made before RDMA devices were simulated
        log = sim_meta_dir(root) / CHANGES
        if isinstance(data, dict) and os.path.lexists(log):
            path = log
            for n, line in enumerate(read_state_bytes(root, log).splitlines(), 1):
                try:
                    rec = load_json(line, f"{log} line {n}", max_bytes=MAX_STATE_BYTES)
                except InvalidInput:
                    raise corrupt(root, log) from None
                if not _replay(data, rec):
                    raise corrupt(root, log)
        kinds = set(DATA)
        if (
            not isinstance(data, dict)
            or set(data) != set(kinds)
            or not isinstance(data["profile"], str)
            or type(data["next_group"]) is not int
            or not all(isinstance(data[k], dict) for k in kinds if k not in ("profile", "next_group"))
            or not all(isinstance(v, list) and all(isinstance(i, str) for i in v) for v in data["driver_ids"].values())
            or not all(isinstance(v, dict) for v in data["vf_specs"].values())
            or not all(_fits(v, _MODEL) for v in data["vf_models"].values())
            or not all(_fits(v, _POOL) for v in data["mdev_pools"].values())
        ):
            raise corrupt(root, path)
        return cls(**data)


def _replay(data: dict[str, Any], rec: Any) -> bool:
    """Apply one change line to ``data``; False when it is not one (the shape is checked after)."""
    keys = rec.get("set") if isinstance(rec, dict) else None
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys) or "to" not in rec:
        return False
    node: Any = data
    for k in keys[:-1]:
        node = node.get(k) if isinstance(node, dict) else None
    if not isinstance(node, dict) or (len(keys) == 1 and keys[0] not in DATA):
        return False
    node[keys[-1]] = rec["to"]
    return True


def stamp(root: Path) -> tuple[tuple[int, int, int] | None, ...]:
    """Identity of the state files now (inode, size, mtime): a state loaded under the same stamp is current."""
    out: list[tuple[int, int, int] | None] = []
    for name in (KERNEL, CHANGES):
        try:
            st = os.stat(sim_meta_dir(root) / name)
        except FileNotFoundError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)
