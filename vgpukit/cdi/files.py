"""CDI spec files: the host's one-time choice to keep them current, and the file changes as engine steps.

* ``/etc/vgpukit/cdi.json`` (``vgpukit cdi enable``; cdi/settings.py): the spec directory
  (``/etc/cdi`` or ``/var/run/cdi``), the classes kept, the hook program and the CUDA library the specs name. When
  it exists, the change engine calls ``cdi.refresh.derived_steps`` after every successful change
  and after recovery, so each spec file whose content the change affected is rewritten (or removed) in the same
  journaled run; files whose content stays the same are not touched.
* Spec files are written atomically (temp + rename + fsync, ``engine.files.PutFile`` through the
  host door). A file at a spec path whose ``kind`` is not the class's own ``vgpukit.io/...`` is
  never removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidInput
from ..host import Host
from ..inputs import load_yaml
from ..words import plural
from .settings import DIRS, SPEC_STEM, Settings, check_abs, load_settings, settings_path
from .spec import ALL, NVML_CLASSES, Spec, collect

__all__ = ["DIRS", "SPEC_STEM", "Settings", "check_abs", "load_settings", "settings_path"]

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..engine import Step
    from ..nvml import Nvml


# ----------------------------------------------------------------------------- spec files
def spec_path(output: str, cls: str) -> str:
    """``/etc/cdi/vgpukit.yaml`` -> ``/etc/cdi/vgpukit-vf.yaml`` (one spec per kind)."""
    p = Path(output)
    return str(p.with_name(f"{p.stem}-{cls}{p.suffix}"))


def output_format(output: str) -> str:
    if output.endswith((".yaml", ".yml")):
        return "yaml"
    if output.endswith(".json"):
        return "json"
    raise InvalidInput(f"--output {output}: CDI specs are .yaml or .json files", value=output)


@dataclass
class FilePlan:
    path: str  # as the host sees it
    action: str  # write | remove | keep
    spec: Spec
    text: str | None
    shown: str = ""  # the path as reported, when not ``path`` (cdi generate --output under --sim/--root)

    def describe(self) -> str:
        where = self.shown or self.path
        if self.action == "remove":
            return f"remove {where} (no {self.spec.kind} devices left)"
        n = len([d for d in self.spec.devices if d.name != ALL])
        return f"write {where} ({self.spec.kind}, {plural(n, 'device')})"


def _ours(current: str, kind: str) -> bool:
    try:
        doc = load_yaml(current, "CDI spec")  # JSON is YAML
    except InvalidInput:
        return False
    return isinstance(doc, dict) and doc.get("kind") == kind


def plan_files(host: Host, output: str, specs: list[Spec], *, real_paths: bool = False) -> list[FilePlan]:
    """What to write: changed specs; our specs of now-empty classes are removed. ``real_paths``: report
    each file where it is on this machine (under the host root) rather than as the host sees it."""
    fmt = output_format(output)
    plans = []
    for spec in specs:
        path = spec_path(output, spec.cls)
        file = host.path(*Path(path).parts[1:])
        shown = str(file) if real_paths else ""
        current = host.read_doc(file, "CDI spec", missing_ok=True)
        if not spec.devices:
            ours = current is not None and _ours(current, spec.kind)
            plans.append(FilePlan(path, "remove" if ours else "keep", spec, None, shown))
        else:
            text = spec.render(fmt)
            plans.append(FilePlan(path, "keep" if current == text else "write", spec, text, shown))
    return plans


def file_steps(plans: list[FilePlan]) -> list[Step]:
    from ..engine.files import PutFile

    return [PutFile(p.path, p.text, 0o644, p.describe()) for p in plans if p.action != "keep"]


def derived_plans(host: Host, settings: Settings, nvml: Callable[[], Nvml | None]) -> list[FilePlan]:
    """The enabled spec files as they should be now."""
    specs, _ = collect(host, nvml() if NVML_CLASSES & set(settings.classes) else None, settings.classes, settings)
    return plan_files(host, f"{settings.dir}/{SPEC_STEM}.yaml", specs)
