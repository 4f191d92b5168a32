"""A small multi-parent host for placement tests: three PCI mdev parents on two NUMA nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import make_sim

PROFILE = {
    "version": 1,
    "name": "three-parents",
    "description": "three PCI mdev parents (pool 8 each) on two NUMA nodes",
    "numa_nodes": {0: "0-3", 1: "4-7"},
    "drivers": {"demo": ["1234:0001"]},
    "models": {
        "card": {
            "ids": "1234:0001",
            "class": "0x030000",
            "mdev": {
                "pool": 8,
                "types": {
                    "demo-1": {"name": "Small", "cost": 1},
                    "demo-4": {"name": "Large", "cost": 4},
                },
            },
        }
    },
    "host_bridges": [
        {"name": "pci0000:00", "numa": 0, "devices": [{"bdf": "0000:01:00.0", "model": "card"}]},
        {
            "name": "pci0000:80",
            "numa": 1,
            "devices": [{"bdf": "0000:81:00.0", "model": "card"}, {"bdf": "0000:82:00.0", "model": "card"}],
        },
    ],
}


@pytest.fixture
def three_parents(tmp_path: Path) -> Path:
    path = tmp_path / "three.yaml"
    path.write_text(yaml.safe_dump(PROFILE))
    return make_sim(tmp_path / "host3", str(path))
