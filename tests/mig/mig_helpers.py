"""Fixtures: simulated hosts with a simulated NVML driver (no lead sim builder needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vgpukit.sim.nvml import SimNvml, initial_state

PRODUCT = {
    "A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "A30": "NVIDIA A30",
    "H100-SXM5-80GB": "NVIDIA H100 80GB HBM3",
    "H100-PCIE-80GB": "NVIDIA H100 PCIe",
    "H100-NVL": "NVIDIA H100 NVL",
    "H200-SXM5-141GB": "NVIDIA H200",
}
# the simulated driver's own fact per GPU (as a sim profile's `mig_mode_without_reset`): Hopper applies a MIG
# mode change at once, Ampere keeps it pending until a reset
WITHOUT_RESET = {"H100-SXM5-80GB", "H100-PCIE-80GB", "H100-NVL", "H200-SXM5-141GB"}


def make_sim(root: Path, models: list[str | None]) -> Path:
    """A sim dir whose GPUs are ``models`` (None = a GPU that is not MIG-capable)."""
    gpus: list[dict[str, Any]] = []
    for i, m in enumerate(models):
        bus = 0x07 + 0x10 * i
        gpus.append(
            {
                "bdf": f"0000:{bus:02x}:00.0",
                "uuid": f"GPU-{i:08x}-1111-2222-3333-444455556666",
                "name": PRODUCT[m] if m else "NVIDIA T4",
                "model": m,
                "mig_capable": m is not None,
                "mig_mode_without_reset": m in WITHOUT_RESET,
            }
        )
    state_dir = root / ".vgpukit-sim"
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "nvml.json").write_text(json.dumps(initial_state(gpus)))
    (state_dir / "sim.json").write_text(json.dumps({"profile": "test"}))
    return root


def enable_now(sim: Path, gpu: int) -> None:
    """Enable MIG and reset as an operator would (the Ampere way)."""
    n = SimNvml(sim)
    if not n.set_mig_mode(gpu, True):
        n.reset_gpu(gpu)
