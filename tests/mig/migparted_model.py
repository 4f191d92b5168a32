"""mig-parted's rules written again for the compatibility suite, from mig-parted's Go sources
(``api/spec/v1``, ``pkg/types``, go-nvlib's MIG profile parser, ``cmd/nvidia-mig-parted/{apply,
assert,export}``, ``pkg/mig/config``), not from vgpukit's code: the expectation vgpukit is held to.

The host is read where mig-parted reads it: GPUs from the (simulated) NVML, PCI ids from sysfs;
whether a set of MIG devices can be created is found by doing what mig-parted's ``SetMigConfig``
does (every distinct ordering, reusing the last GPU instance, NVML's own placement) on a scratch
simulated GPU of the same model.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vgpukit.nvml.errors import NvmlError
from vgpukit.sim.nvml import SimNvml

from .mig_helpers import PRODUCT, make_sim

NAME_RE = re.compile(
    r"(?:(?P<c>[+-]?\d+)c\.)?(?P<g>[+-]?\d+)g\.(?P<gb>[+-]?\d+)gb"
    r"(?:(?P<sign>[+-])(?P<attrs>[A-Za-z][A-Za-z0-9.]*[A-Za-z0-9](?:,[A-Za-z][A-Za-z0-9.]*[A-Za-z0-9])*|[A-Za-z]))?\Z"
)
GO_UINT = re.compile(r"0[xX][0-9a-fA-F]+|0[bB][01]+|0[oO][0-7]+|0[0-7]*|[1-9][0-9]*\Z")


class Invalid(Exception):
    pass


def name_key(name: str) -> tuple[int, int, int, str, tuple[str, ...]] | None:
    """(c, g, gb, sign, attrs) of a MIG device name, None when go-nvlib would refuse it."""
    m = NAME_RE.fullmatch(name)
    if m is None:
        return None
    attrs = tuple(sorted(m["attrs"].split(","))) if m["attrs"] else ()
    if len(set(attrs)) != len(attrs):
        return None
    g = int(m["g"])
    return (int(m["c"]) if m["c"] else g, g, int(m["gb"]), m["sign"] or "", attrs)


def canonical(name: str) -> str:
    k = name_key(name)
    assert k is not None
    c, g, gb, sign, attrs = k
    base = f"{g}g.{gb}gb" if c == g else f"{c}c.{g}g.{gb}gb"
    return base + (sign + ",".join(attrs) if attrs else "")


def go_uint(text: str) -> int | None:
    if not GO_UINT.fullmatch(text):
        return None
    v = int(text, 0) if not (len(text) > 1 and text[0] == "0" and text[1].isdigit()) else int(text, 8)
    return v if v <= 0xFFFFFFFF else None


def read_filter(text: str) -> tuple[int, int, tuple[int, int] | None] | None:
    parts = text.split(":")
    if len(parts) > 2:
        return None
    vals = [go_uint(p) for p in parts]
    if any(v is None for v in vals):
        return None
    raw = vals[0]
    assert raw is not None
    sub = (vals[1] >> 16, vals[1] & 0xFFFF) if len(vals) == 2 and vals[1] is not None else None
    return raw >> 16, raw & 0xFFFF, sub


@dataclass
class Spec:
    devices: Any  # "all" or list of ints
    filters: list[str]  # [] = no filter
    enabled: bool
    devs: dict[str, int] | None  # as written (None: not given)


def parse(text: str) -> dict[str, list[Spec]]:
    """mig-parted's parser: the configs, or Invalid."""
    try:
        data = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:  # go-yaml (libyaml's rules) takes tabs between flow tokens: JSON with tabs
        try:
            data = json.loads(text)
        except ValueError:
            raise Invalid("syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Invalid("not a mapping")
    if data.get("version") != "v1":
        raise Invalid("version")
    if set(data) - {"version", "mig-configs"}:
        raise Invalid("unexpected field")
    if "mig-configs" not in data:
        return {}
    configs = data["mig-configs"]
    if not isinstance(configs, dict) or not configs:
        raise Invalid("mig-configs")
    return {str(k): _specs(v) for k, v in configs.items()}


def _specs(items: Any) -> list[Spec]:
    if not isinstance(items, list) or not items:
        raise Invalid("entries")
    out = []
    for e in items:
        if (
            not isinstance(e, dict)
            or {"devices", "mig-enabled"} - set(e)
            or set(e) - {"devices", "device-filter", "mig-enabled", "mig-devices"}
        ):
            raise Invalid("entry keys")
        dev = e["devices"]
        if not (dev == "all" or (isinstance(dev, list) and all(type(d) is int for d in dev))):
            raise Invalid("devices")
        df = e.get("device-filter")
        filters = [df] if isinstance(df, str) else df
        if df is not None and not (isinstance(filters, list) and all(isinstance(f, str) for f in filters)):
            raise Invalid("device-filter")
        filters = [f for f in (filters or []) if not (isinstance(df, str) and f == "")]
        if e["mig-enabled"] is None:  # JSON null into a Go bool: no error, false
            e = {**e, "mig-enabled": False}
        if type(e["mig-enabled"]) is not bool:
            raise Invalid("mig-enabled")
        devs = e.get("mig-devices")
        if devs is not None:
            if not isinstance(devs, dict) or any(type(v) is not int for v in devs.values()):
                raise Invalid("mig-devices")
            if devs and (any(name_key(str(k)) is None or v < 0 for k, v in devs.items()) or not any(devs.values())):
                raise Invalid("mig-devices format")
        if e["mig-enabled"] and devs is None:
            raise Invalid("mig-devices missing")
        if not e["mig-enabled"] and devs:
            raise Invalid("mig-devices with mig disabled")
        out.append(Spec(dev, filters, e["mig-enabled"], None if devs is None else {str(k): v for k, v in devs.items()}))
    return out


@dataclass
class Gpu:
    index: int
    model: str | None  # None: not MIG-capable
    ids: tuple[int, int, tuple[int, int]]  # device, vendor, (subsystem device, subsystem vendor)
    gi_names: list[str] = field(default_factory=list)


def host_gpus(sim: Path) -> list[Gpu]:
    out = []
    nvml = SimNvml(sim)
    for g in nvml.gpus():
        d = sim / "sys/bus/pci/devices" / g.bdf
        rd = [int((d / f).read_text(), 16) for f in ("device", "vendor", "subsystem_device", "subsystem_vendor")]
        gpu = Gpu(g.index, g.name if g.mig_capable else None, (rd[0], rd[1], (rd[2], rd[3])))
        if g.mig_capable:
            gpu.gi_names = [p.name for p in nvml.gi_profiles(g.index)]
        out.append(gpu)
    return out


def selects(s: Spec, gpu: Gpu) -> bool:
    if s.devices != "all" and gpu.index not in s.devices:
        return False
    if not s.filters:
        return True
    for f in s.filters:
        r = read_filter(f)
        if r is not None and r[:2] == gpu.ids[:2] and (r[2] is None or r[2] == gpu.ids[2]):
            return True
    return False


def unreadable_filters(specs: list[Spec]) -> bool:
    return any(read_filter(f) is None for s in specs for f in s.filters)


def counts(devs: dict[str, int] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in (devs or {}).items():
        if v:
            out[canonical(k)] = out.get(canonical(k), 0) + v
    return out


@dataclass
class Outcome:
    ok: bool
    modes: dict[int, bool] = field(default_factory=dict)  # GPU index -> MIG mode (capable GPUs)
    devices: dict[int, dict[str, int]] = field(default_factory=dict)


class Feasibility:
    """mig-parted's SetMigConfig on a scratch simulated GPU of each model (cached)."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.cache: dict[tuple[str, tuple[tuple[str, int], ...]], bool] = {}

    def __call__(self, product: str, devs: dict[str, int]) -> bool:
        key = (product, tuple(sorted(devs.items())))
        if key not in self.cache:
            self.cache[key] = self._try(product, devs)
        return self.cache[key]

    def _try(self, product: str, devs: dict[str, int]) -> bool:
        model = next(m for m, p in PRODUCT.items() if p == product)
        root = make_sim(self.scratch / f"{len(self.cache)}", [model])
        nvml = SimNvml(root)
        if not nvml.set_mig_mode(0, True):
            nvml.reset_gpu(0)
        profiles = nvml.gi_profiles(0)
        items = []
        for name, n in devs.items():
            c, g, gb, sign, attrs = name_key(name)  # type: ignore[misc]
            p = next((p for p in profiles if name_key(p.name)[1:] == (g, gb, sign, attrs)), None)  # type: ignore[index]
            if p is None:
                return False  # "MIG profile not found on this GPU"
            items += [(g, c, name, p)] * n
        items.sort(key=lambda t: (-t[0], -t[1], t[2]))
        seen = set()
        for order in itertools.permutations(items):
            sig = tuple(t[2] for t in order)
            if sig in seen:
                continue
            seen.add(sig)
            if self._create(nvml, order):
                return True
        return False

    @staticmethod
    def _create(nvml: SimNvml, order: tuple[Any, ...]) -> bool:
        for gi in nvml.gpu_instances(0):  # clear
            for ci in gi.compute_instances:
                nvml.destroy_compute_instance(0, gi.id, ci.id)
            nvml.destroy_gpu_instance(0, gi.id)
        last: tuple[int, int] | None = None  # (profile id, gi id)
        for _, c, _, p in order:
            reuse = last is not None and last[0] == p.id
            while True:
                try:
                    if not reuse:
                        last = (p.id, nvml.create_gpu_instance(0, p.id).id)
                    assert last is not None
                    cp = next((x for x in nvml.ci_profiles(0, last[1]) if x.slices == c), None)
                    if cp is None:
                        raise NvmlError("no such CI profile")
                    nvml.create_compute_instance(0, last[1], cp.enum)
                    break
                except NvmlError:
                    if reuse:
                        reuse = False
                        continue
                    return False
        return True


def apply(specs: list[Spec], gpus: list[Gpu], feasible: Feasibility, mode_only: bool = False) -> Outcome:
    """What mig-parted's apply ends with (ok and the state; not ok: it fails)."""
    out = Outcome(True)
    for s in specs:  # mode phase
        for g in gpus:
            if not selects(s, g):
                continue
            if g.model is None:
                if s.devices == "all" or not s.enabled:
                    continue
                return Outcome(False)
            out.modes[g.index] = s.enabled
            out.devices[g.index] = {}
    if mode_only:
        return out
    for s in specs:  # config phase
        for g in gpus:
            if not selects(s, g) or g.model is None:
                continue
            if s.enabled != out.modes[g.index]:
                return Outcome(False)
            if s.enabled:
                want = counts(s.devs)
                if want and not feasible(g.model, want):
                    return Outcome(False)
                out.devices[g.index] = want
    return out


def assert_quirks(specs: list[Spec], gpus: list[Gpu]) -> list[str]:
    """Why mig-parted's assert fails right after its own successful apply (vgpukit differs, docs/mig.md)."""
    why = []
    if any(selects(s, g) and g.model is None and s.enabled for s in specs for g in gpus):
        why.append("D3: devices: all + mig-enabled on a GPU without MIG fails mig-parted's assert")
    if any(not any(selects(s, g) for s in specs) for g in gpus):
        why.append("D2: a GPU no entry selects fails mig-parted's assert")
    if any(s.devs and any(k != canonical(k) or v == 0 for k, v in s.devs.items()) for s in specs if s.enabled):
        why.append("D4: a name spelled otherwise than mig-parted exports it, or a count of 0, never asserts")
    return why


def export(gpus: list[Gpu], modes: dict[int, bool], devices: dict[int, dict[str, int]]) -> list[dict[str, Any]]:
    """mig-parted's export of a host in this state, with its merge."""
    specs = []
    for g in gpus:
        en = g.model is not None and modes.get(g.index, False)
        specs.append((f"0x{g.ids[0]:04X}{g.ids[1]:04X}", g.index, en, devices.get(g.index, {}) if en else {}))
    merged: list[dict[str, Any]] = []
    for df, i, en, devs in specs:
        for m in merged:
            if m["mig-enabled"] == en and m["mig-devices"] == devs:
                m["devices"] = sorted({*m["devices"], i})
                m["device-filter"] = sorted({*m["device-filter"], df})
                break
        else:
            merged.append({"device-filter": [df], "devices": [i], "mig-enabled": en, "mig-devices": devs})
    by_df: dict[str, set[int]] = {}
    for df, i, _, _ in specs:
        by_df.setdefault(df, set()).add(i)
    for m in merged:
        covered: set[int] = set()
        for df in m["device-filter"]:
            covered |= by_df[df]
        if len(by_df) == 1 or len(merged) == 1:
            del m["device-filter"]
        elif len(m["device-filter"]) == 1:
            m["device-filter"] = m["device-filter"][0]
        if set(m["devices"]) == covered:
            m["devices"] = "all"
    return merged
