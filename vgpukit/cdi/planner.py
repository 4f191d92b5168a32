"""The CDI planner: which spec files ``cdi generate``, ``cdi enable``, ``cdi disable`` and the refresh
after every change to the host (``Refresh``, the engine's derived files) write, remove or keep.

Typed request in (:class:`Generate`, :class:`Enable`, :class:`Disable`, :class:`Refresh`), a
:class:`CdiPlan` (engine steps, the files with their action) or a typed refusal out (:func:`plan`);
nothing here executes or prints.

* ``/etc/vgpukit/cdi.json`` (``vgpukit cdi enable``; vgpukit/cdi_settings.py): the spec directory
  (``/etc/cdi`` or ``/var/run/cdi``), the classes kept, the hook program and the CUDA library the specs name. When
  it exists, the change engine calls ``cdi.refresh.derived_steps`` (a :class:`Refresh`) after every successful change
  and after recovery, so each spec file whose content the change affected is rewritten (or removed) in the same
  journaled run; files whose content stays the same are not touched.
* Spec files are written atomically (temp + rename + fsync, ``engine.files.PutFile`` through the
  host door). A file at a spec path whose ``kind`` is not the class's own ``vgpukit.io/...`` is
  never removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ..cdi_settings import CLASSES, DIRS, SPEC_STEM, Settings, check_abs, load_settings, settings_path
from ..engine.files import PutFile
from ..errors import InvalidInput
from ..host import Host
from ..inputs import check_text, load_yaml
from ..words import plural
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
    return [PutFile(p.path, p.text, 0o644, p.describe()) for p in plans if p.action != "keep"]


def derived_plans(host: Host, settings: Settings, nvml: Callable[[], Nvml | None]) -> list[FilePlan]:
    """The enabled spec files as they should be now."""
    specs, _ = collect(host, nvml() if NVML_CLASSES & set(settings.classes) else None, settings.classes, settings)
    return plan_files(host, f"{settings.dir}/{SPEC_STEM}.yaml", specs)


# ----------------------------------------------------------------------------- requests
class Generate(msgspec.Struct, frozen=True):
    """``cdi generate``: the specs of ``classes`` (empty: the enabled ones, else all) to ``output``
    (None: the enabled directory, else /etc/cdi; ``-``: only collected, for printing)."""

    output: str | None = None
    classes: tuple[str, ...] = ()


class Enable(msgspec.Struct, frozen=True):
    """``cdi enable``: keep ``settings``'s specs current from now on."""

    settings: Settings


class Disable(msgspec.Struct, frozen=True):
    """``cdi disable``: stop keeping specs current; the specs vgpukit wrote go."""


class Refresh(msgspec.Struct, frozen=True):
    """After any change to the host (the engine's derived files): the enabled specs that changed."""


Request = Generate | Enable | Disable | Refresh


@dataclass
class CdiPlan:
    steps: list[Step] = field(default_factory=list)  # what runs
    preview: list[Step] = field(default_factory=list)  # what a dry run lists (the steps and what they entail)
    files: list[FilePlan] = field(default_factory=list)  # the spec files, each with its action
    specs: list[Spec] = field(default_factory=list)  # what was collected
    warnings: list[str] = field(default_factory=list)


def plan(host: Host, nvml: Callable[[], Nvml | None], req: Request) -> CdiPlan:
    """The spec files ``req`` writes, removes or keeps (``nvml``: asked only when a class needs it).
    The rules: one file per class (``<stem>-<class><suffix>``, .yaml or .json); a class with no
    devices loses its file only when the file is vgpukit's spec of that class (its ``kind``); moving
    the directory removes the specs vgpukit wrote in the old one, narrowing the classes the dropped
    classes' specs; a file whose content stays the same is not touched."""
    settings = load_settings(host)
    if isinstance(req, Disable):
        if settings is None:
            return CdiPlan()
        files = plan_files(host, f"{settings.dir}/{SPEC_STEM}.yaml", [Spec(c) for c in CLASSES])
        path = host.display(settings_path(host))
        off: list[Step] = [PutFile(path, None, 0o644, f"stop keeping CDI specs current (remove {path})")]
        return CdiPlan(off + file_steps(files), off + file_steps(files), files)
    if isinstance(req, Refresh):
        if settings is None:
            return CdiPlan()
        files = derived_plans(host, settings, nvml)
        return CdiPlan(file_steps(files), file_steps(files), files)
    wanted = (
        req.settings.classes if isinstance(req, Enable) else req.classes or (settings.classes if settings else CLASSES)
    )
    using = req.settings if isinstance(req, Enable) else settings
    specs, warnings = collect(host, nvml() if NVML_CLASSES & set(wanted) else None, wanted, using)
    if isinstance(req, Generate):
        if req.output == "-":
            return CdiPlan(specs=specs, warnings=warnings)
        output = req.output or f"{settings.dir if settings else DIRS[0]}/{SPEC_STEM}.yaml"
        if req.output is not None:
            check_text(output, "--output", max_len=4096)
            if not output.startswith("/"):
                raise InvalidInput(f"--output {output}: give an absolute path (or '-')", value=output)
            check_abs(output, "--output")
        # an --output the user named is reported where it is written (under --sim/--root: inside that root)
        files = plan_files(host, output, specs, real_paths=req.output is not None and str(host.root) != "/")
        return CdiPlan(file_steps(files), file_steps(files), files, specs, warnings)
    new = req.settings
    files = plan_files(host, f"{new.dir}/{SPEC_STEM}.yaml", specs)
    path = host.display(settings_path(host))
    steps: list[Step] = []
    if host.read_raw_opt(settings_path(host)) != new.to_text():
        steps.append(PutFile(path, new.to_text(), 0o644, f"keep CDI specs in {new.dir} current ({path})"))
    if settings is not None:  # moved: what vgpukit wrote in the old place goes; narrowed: the dropped classes'
        moved = settings.dir != new.dir
        gone = [Spec(k) for k in CLASSES if moved or (k in settings.classes and k not in new.classes)]
        steps += file_steps(plan_files(host, f"{settings.dir}/{SPEC_STEM}.yaml", gone))
    # a new settings file: the engine's refresh writes the specs after it (Refresh)
    return CdiPlan(steps or file_steps(files), steps + file_steps(files), files, specs, warnings)
