"""Data files shipped with vgpukit (device names, profiles, vGPU types) and their loaders."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any


@cache
def load_yaml(name: str) -> Any:
    """Parse ``vgpukit/data/<name>`` once per process."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = resources.files(__package__).joinpath(name).read_text()
    return yaml.load(text, Loader=loader)
