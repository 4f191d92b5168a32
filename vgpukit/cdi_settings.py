"""The host's one-time choice to keep CDI specs current: ``/etc/vgpukit/cdi.json`` (``vgpukit cdi enable``).

Read by the CDI area (``vgpukit/cdi/``) and by QoS's planner (whether the gpu-share class carries its
tenants, where the CUDA library is), so it sits below both.

``{"schema": "vgpukit.cdi-settings/v1", "dir": DIR, "classes": [...], "hook": PATH,
"cuda_library": PATH}``: the spec directory (DIR: one of ``vgpukit.host.CDI_SPEC_DIRS``), the classes
kept, the ``nvidia-cdi-hook`` the GPU specs run (a path the container runtime runs, never taken under
``--root``) and the ``libvgpukit-cuda.so`` the gpu-share specs inject (a host path, under ``--root``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from .errors import InvalidInput
from .host import CDI_SPEC_DIRS, Host
from .inputs import check_text, load_json

SCHEMA = "vgpukit.cdi-settings/v1"
CLASSES = ("vf", "pci", "mdev", "gpu", "mig", "gpu-share")
DIRS = CDI_SPEC_DIRS
DEFAULT_HOOK = "/usr/bin/nvidia-cdi-hook"
DEFAULT_CUDA_LIBRARY = "/usr/lib/vgpukit/libvgpukit-cuda.so"
SPEC_STEM = "vgpukit"


def check_abs(value: str, what: str) -> str:
    check_text(value, what, max_len=4096)
    if not value.startswith("/") or "/../" in f"{value}/":
        raise InvalidInput(f"{what} must be an absolute path without '..'", value=value)
    return value.rstrip("/") or "/"


class Settings(msgspec.Struct, frozen=True):
    dir: str = DIRS[0]
    classes: tuple[str, ...] = CLASSES
    hook: str = DEFAULT_HOOK  # the nvidia-cdi-hook the GPU specs call (path on the host)
    cuda_library: str = DEFAULT_CUDA_LIBRARY  # libvgpukit-cuda.so for gpu-share (path on the host)

    def validate(self) -> Settings:
        for value, what in ((self.dir, "dir"), (self.hook, "hook"), (self.cuda_library, "cuda_library")):
            check_abs(value, what)
        bad = [c for c in self.classes if c not in CLASSES]
        if bad or not self.classes:
            raise InvalidInput(f"classes must be some of {', '.join(CLASSES)}")
        return self

    def to_text(self) -> str:
        doc = {"schema": SCHEMA, "dir": self.dir, "classes": list(self.classes), "hook": self.hook}
        doc["cuda_library"] = self.cuda_library
        return json.dumps(doc, indent=1) + "\n"

    @classmethod
    def from_doc(cls, doc: Any, where: str) -> Settings:
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise InvalidInput(f"{where}: not a {SCHEMA} document (re-run 'vgpukit cdi enable')", path=where)
        fields = {k: doc[k] for k in ("dir", "hook", "cuda_library") if k in doc}
        if not all(isinstance(v, str) for v in fields.values()):
            raise InvalidInput(f"{where}: dir, hook and cuda_library are strings", path=where)
        classes = doc.get("classes", list(CLASSES))
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise InvalidInput(f"{where}: classes is a list of class names", path=where)
        try:
            return cls(**fields, classes=tuple(classes)).validate()
        except InvalidInput as err:
            raise InvalidInput(f"{where}: {err.message}", path=where) from None


def settings_path(host: Host) -> Path:
    return host.config_dir("cdi.json")


def load_settings(host: Host) -> Settings | None:
    """The host's CDI settings, or None when spec generation is not enabled."""
    path = settings_path(host)
    text = host.read_doc(path, "CDI settings", missing_ok=True)
    if text is None:
        return None
    where = host.display(path)
    return Settings.from_doc(load_json(text, where), where)


def host_path(host: Host, path: str) -> Path:
    """``path`` as the host sees it (``/dev/nvidia0``, the CUDA library) -> the real path under the host root."""
    return host.path(*[p for p in path.split("/") if p])
