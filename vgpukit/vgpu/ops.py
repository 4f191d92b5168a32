"""Creating, removing, defining vGPUs on either interface: read the facts, ask
:mod:`vgpukit.vgpu.planner`, execute (all-or-nothing, verified by reading back), report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine import Env, Step, execute
from ..engine.executor import staged
from ..mdev import planner as mdev_planner
from ..pci import Scan
from . import planner
from .model import MDEV, GpuView


@dataclass
class VgpuOutcome:
    plan: list[str] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)


def create(env: Env, gpu: GpuView, wanted: str, count: int, define: bool = False, auto: bool = False) -> VgpuOutcome:
    host = env.host
    facts = planner.read(host, gpu, nvml=lambda: env.nvml)
    mdev = mdev_planner.read(host, nvml=lambda: env.nvml) if gpu.interface == MDEV else None
    todo = planner.create(facts, mdev, wanted, count, define, auto)
    execute(env, todo.steps)
    return VgpuOutcome([s.describe() for s in staged(todo.steps)], todo.created)


Rule = Callable[[list[planner.Facts], mdev_planner.Facts], list[Step]]


def _run(env: Env, views: list[GpuView], rule: Rule) -> list[str]:
    """The facts of every GPU and of mdev (definitions included), ``rule``'s steps executed."""
    host = env.host
    scan = Scan(host)
    gpus = [planner.read(host, g, scan.device(g.bdf).ids) for g in views]
    steps = rule(gpus, mdev_planner.read(host))
    execute(env, steps)
    return [s.describe() for s in staged(steps)]


def remove(env: Env, views: list[GpuView], ids: list[str], keep_definition: bool = False) -> list[str]:
    """Remove vGPUs by id: an mdev UUID (legacy; its definitions too unless ``keep_definition``) or a
    VF address (vendor VFIO). Checked before acting."""
    return _run(env, views, lambda gpus, mdev: planner.remove(gpus, mdev, ids, keep_definition))


def define(env: Env, views: list[GpuView], ids: list[str], auto: bool) -> list[str]:
    return _run(env, views, lambda gpus, mdev: planner.define(gpus, mdev, ids, auto))


def undefine(env: Env, views: list[GpuView], ids: list[str]) -> list[str]:
    return _run(env, views, lambda gpus, mdev: planner.undefine(gpus, mdev, ids))
