"""The host documents the health rule's tests share (tests/health, tests/doors): a MIG config that
puts two 3g.20gb instances on every GPU, as a mig-parted file and as a vgpukit host config."""

from __future__ import annotations

MIG_CONFIGS = """mig-configs:
  all-3g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
"""
MIG = "version: v1\n" + MIG_CONFIGS  # mig apply -f FILE -c all-3g


def host(config: str) -> str:
    """A vgpukit.host/v1 document whose config ``config`` applies all-3g."""
    return f"version: vgpukit.host/v1\nconfigs:\n  {config}:\n    mig: all-3g\n" + MIG_CONFIGS
