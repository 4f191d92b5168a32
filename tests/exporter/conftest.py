"""The real-NVML variant (test_real_nvml.py) is collected only on a GPU host: with
``VGPUKIT_REAL_NVML_GPU=<index>`` set (as the MIG real-NVML tests); a CI run shows no skips."""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("VGPUKIT_REAL_NVML_GPU") is not None else ["test_real_nvml.py"]

from tests.qos.conftest import spawn  # noqa: E402  (real processes for QoS tenants)

__all__ = ["collect_ignore", "spawn"]
