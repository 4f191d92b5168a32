"""Data files shipped with vgpukit (device names, profiles, vGPU types) and their loaders.

Each file is parsed once per process (the files are part of the package and never change while it
runs). Device names are JSON so that read-only commands need no YAML parser at start-up.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent


@cache
def load_yaml(name: str) -> Any:
    """Parse ``vgpukit/data/<name>`` (YAML) once per process."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load((DATA_DIR / name).read_text(), Loader=loader)


@cache
def load_json(name: str) -> Any:
    """Parse ``vgpukit/data/<name>`` (JSON) once per process."""
    import json

    return json.loads((DATA_DIR / name).read_text())
