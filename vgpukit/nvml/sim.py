"""Simulated NVML: state in ``<sim>/.vgpukit-sim/nvml.json``, written by ``vgpukit sim init``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import NvmlGpu


class SimNvml:
    def __init__(self, sim_dir: Path) -> None:
        self.path = sim_dir / ".vgpukit-sim" / "nvml.json"

    def _state(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"gpus": []}
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    def gpus(self) -> list[NvmlGpu]:
        out = []
        for i, g in enumerate(self._state()["gpus"]):
            out.append(
                NvmlGpu(
                    i,
                    g["bdf"],
                    g["uuid"],
                    g["name"],
                    bool(g.get("mig_capable")),
                    bool(g.get("mig_current")),
                    bool(g.get("mig_pending")),
                )
            )
        return out


def initial_state(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The simulated driver's state for a new sim host.

    ``gpus``: one dict per physical GPU in PCI bus order with ``bdf``, ``uuid``, ``name`` (NVML
    product name, e.g. ``NVIDIA A100-SXM4-40GB``), ``model`` (profile-table key) and ``mig_capable``.
    """
    return {
        "version": 1,
        "gpus": [{**g, "mig_current": False, "mig_pending": False} for g in gpus],
    }
