"""What the simulated kernel knows that sysfs does not show (driver match table, pools...)."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

META = ".vgpukit-sim"


def sim_meta_dir(root: Path) -> Path:
    return root / META


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Serialise kernel reactions between concurrent invocations on one sim host."""
    lock = sim_meta_dir(root) / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class KernelState:
    profile: str
    next_group: int = 0
    driver_ids: dict[str, list[str]] = field(default_factory=dict)  # driver -> ["vvvv:dddd" | "class:cccc"]
    vf_models: dict[str, dict[str, Any]] = field(default_factory=dict)  # VF "vvvv:dddd" -> model spec
    mdev_pools: dict[str, dict[str, Any]] = field(default_factory=dict)  # parent -> pool, types
    vf_specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # PF bdf -> PF model sriov info

    def match_driver(self, ids: str, class_code: str) -> str | None:
        cls = class_code.lower().removeprefix("0x")[:4]
        for driver, entries in self.driver_ids.items():
            for entry in entries:
                if entry == ids or entry == f"class:{cls}":
                    return driver
        return None

    def save(self, root: Path) -> None:
        path = sim_meta_dir(root) / "kernel.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(vars(self), separators=(",", ":")))  # the C encoder: no indent
        tmp.replace(path)

    @classmethod
    def load(cls, root: Path) -> KernelState:
        data = json.loads((sim_meta_dir(root) / "kernel.json").read_text())
        return cls(**data)
