"""Creating and removing vGPUs on either interface: read the facts, ask :mod:`vgpukit.vgpu.planner`,
execute (all-or-nothing, verified by reading back), report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine import Env, execute
from ..engine.executor import staged
from ..mdev import planner as mdev_planner
from ..pci import Scan
from . import planner
from .model import MDEV, GpuView


@dataclass
class VgpuOutcome:
    plan: list[str] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)


def create(env: Env, gpu: GpuView, wanted: str, count: int) -> VgpuOutcome:
    host = env.host
    facts = planner.read(host, gpu)
    mdev = mdev_planner.read(host) if gpu.interface == MDEV else None
    todo = planner.create(facts, mdev, wanted, count)
    execute(env, todo.steps)
    return VgpuOutcome([s.describe() for s in staged(todo.steps)], todo.created)


def remove(env: Env, views: list[GpuView], ids: list[str]) -> list[str]:
    """Remove vGPUs by id: an mdev UUID (legacy) or a VF address (vendor VFIO). Checked before acting."""
    host = env.host
    scan = Scan(host)
    gpus = [planner.read(host, g, scan.device(g.bdf).ids) for g in views]
    steps = planner.remove(gpus, mdev_planner.read(host, definitions=False), ids)
    execute(env, steps)
    return [s.describe() for s in staged(steps)]
