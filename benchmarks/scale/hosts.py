"""Simulated hosts of a chosen size, as simulator profiles (data: JSON, which the YAML loader reads).

* :func:`sriov_host`: ConnectX-6-like PFs under their own root ports; ``total_vfs`` per PF, and
  ``enabled`` VFs turned on at boot (bound to mlx5_core by autoprobe, as a real host's would be).
* :func:`mdev_host`: Tesla T4 parents with the legacy vGPU mdev types (16 x 1 GB per GPU).
* :func:`mig_host`: A100-SXM4-40GB GPUs (MIG-capable), one per root port.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT_PORT = {"ids": "8086:347a", "class": "0x060400", "driver": "pcieport", "link": ["16.0 GT/s PCIe", 16]}


def _port(i: int) -> str:
    """Root port ``i`` on host bridge 0 (device 1.., function 0..7)."""
    return f"0000:00:{i // 8 + 1:02x}.{i % 8}"


def _profile(name: str, models: dict[str, Any], drivers: dict[str, list[str]], leaves: list[tuple[str, str]]) -> dict:
    devices = [{"bdf": _port(i), "model": "root-port", "children": [{"bdf": bdf, "model": model}]}
               for i, (bdf, model) in enumerate(leaves)]  # fmt: skip
    return {
        "version": 1,
        "name": name,
        "description": f"benchmark host {name}",
        "numa_nodes": {0: "0-31"},
        "drivers": {**drivers, "pcieport": ["class:0604"], "vfio-pci": []},
        "models": {"root-port": ROOT_PORT, **models},
        "host_bridges": [{"name": "pci0000:00", "numa": 0, "devices": devices}],
    }


def sriov_host(pfs: int, total_vfs: int, enabled: int = 0) -> dict[str, Any]:
    # PF k sits on bus 0x10 + 8k: its VFs (offset 2, stride 1) take up to 8 buses (2046 VFs)
    leaves = [(f"0000:{0x10 + 8 * k:02x}:00.0", "cx6") for k in range(pfs)]
    prof = _profile(
        f"sriov-{pfs}x{total_vfs}",
        {
            "cx6": {
                "ids": "15b3:101b",
                "subsystem": "15b3:0007",
                "class": "0x020000",
                "link": ["16.0 GT/s PCIe", 16],
                "sriov": {"total_vfs": total_vfs, "vf_device": "101c", "offset": 2, "stride": 1},
            },
            "cx6-vf": {"ids": "15b3:101c", "subsystem": "15b3:0007", "class": "0x020000"},
        },
        {"mlx5_core": ["15b3:101b", "15b3:101c"]},
        leaves,
    )
    prof["vf_models"] = {"15b3:101c": "cx6-vf"}
    if enabled:
        prof["boot"] = [{"sys": f"bus/pci/devices/{bdf}/sriov_numvfs", "write": enabled} for bdf, _ in leaves]
    return prof


def mdev_host(parents: int) -> dict[str, Any]:
    t4 = {
        "ids": "10de:1eb8",
        "subsystem": "10de:12a2",
        "class": "0x030200",
        "link": ["8.0 GT/s PCIe", 16],
        "gpu": {"name": "Tesla T4", "model": "Tesla-T4", "mig_capable": False},
        "mdev": {"vgpu_catalog": "tesla-t4"},
    }
    return _profile(f"t4-{parents}", {"t4": t4}, {"nvidia": ["10de:1eb8"]}, [(f"0000:{k + 1:02x}:00.0", "t4")
                                                                             for k in range(parents)])  # fmt: skip


def mig_host(gpus: int) -> dict[str, Any]:
    a100 = {
        "ids": "10de:20b0",
        "subsystem": "10de:134f",
        "class": "0x030200",
        "link": ["16.0 GT/s PCIe", 16],
        "gpu": {"name": "NVIDIA A100-SXM4-40GB", "model": "A100-SXM4-40GB", "mig_capable": True},
    }
    leaves = [(f"0000:{k + 1:02x}:00.0", "a100") for k in range(gpus)]
    return _profile(f"a100-{gpus}", {"a100": a100}, {"nvidia": ["10de:20b0"]}, leaves)


MIG_CONFIG = (
    "version: v1\nmig-configs:\n  mixed:\n    - devices: all\n      mig-enabled: true\n"
    '      mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}\n'
)


def write_profile(path: Path, profile: dict[str, Any]) -> Path:
    path.write_text(json.dumps(profile, indent=1))
    return path
