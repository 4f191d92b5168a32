"""QoS data model: policies, tenants, per-GPU settings, validation and (de)serialisation.

Records here do no I/O. A *GPU key* is any name matching ``[A-Za-z0-9_.:-]+`` (``gpu0``, a PCI
address, a MIG UUID); the device need not exist, so a MIG slice or a whole host can be scheduled.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import msgspec

from ..errors import InvalidInput, NotFound
from ..inputs import at, has_control, parse_float, parse_int, parse_size, under
from .mempolicy import KEYS as MEMORY_KEYS
from .mempolicy import MemoryPolicy

POLICIES = ("best-effort", "fixed-share", "burst-share")
CLASSES = ("online", "offline")
KINDS = ("cgroup", "pids", "domain")
# auto (default): sampled until the tenant's first notification, notified from then on;
# notify: only notifications; sample: only CPU-time sampling (docs/qos.md, "Demand")
DEMANDS = ("auto", "notify", "sample")
MAX_TENANTS = 64
PID_MAX = 4194304  # the kernel's PID_MAX_LIMIT on 64-bit
DEFAULT_SLICE_MS = 10  # chosen by measurement, see docs/qos.md ("Slice length")
MIN_SLICE_MS = 1
MAX_SLICE_MS = 1000
MAX_PID = PID_MAX  # the name the CLI options use
MAX_INFLIGHT = 1023  # launches per stream the CUDA library keeps outstanding (docs/cuda.md)
MAX_INFLIGHT_MS = 3_600_000
_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z", re.ASCII)
LIBRARY_KEYS = ("memory", "inflight", "inflight_ms", "memory_burst")  # a tenant's libvgpukit-cuda settings


def check_key(value: str, what: str) -> str:
    """A GPU key, tenant or domain name. Refusals never quote the value (it may come from a file)."""
    if not isinstance(value, str) or not _KEY.match(value):
        raise InvalidInput(f"invalid {what}: use letters, digits and _ . : - (1 to 128 characters)")
    return value


def unknown_keys(keys: set[Any]) -> str:
    """Unknown keys of a document, named only when they look like keys (never arbitrary content)."""
    shown = sorted(k for k in keys if isinstance(k, str) and _KEY.match(k) and len(k) <= 40)
    return ", ".join(shown[:5]) + (f" and {len(keys) - len(shown[:5])} more" if len(keys) > len(shown[:5]) else "")


def _first(doc: dict[Any, Any], keys: set[Any]) -> Any:
    """The first of ``keys`` in ``doc``'s order (where an error about them points)."""
    return next(k for k in doc if k in keys)


def number(value: Any, what: str, lo: float, hi: float, integer: bool = False) -> Any:
    """A number from a document: a real int (or float), not a string or a boolean, within bounds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise InvalidInput(f"{what} must be {'an integer' if integer else 'a number'}")
    if integer:
        return parse_int(value, what, lo=int(lo), hi=int(hi))
    return parse_float(value, what, lo=lo, hi=hi)


class Tenant(msgspec.Struct, frozen=True):
    """One tenant of one GPU and what it is on the host."""

    name: str
    cls: str  # online | offline
    share: int  # percent, 1..100
    kind: str  # cgroup | pids | domain
    cgroup: str | None = None
    pids: tuple[int, ...] = ()
    domain: str | None = None
    demand: str = "auto"  # auto | notify (the tenant tells busy/idle) | sample (CPU time is sampled)
    # for libvgpukit-cuda (docs/cuda.md): memory cap per device in bytes, in-flight window per stream
    memory: int | None = None
    inflight: int | None = None
    inflight_ms: int | None = None
    memory_burst: int | None = None  # offline: unified memory beyond the cap (docs/qos.md, "Memory QoS")

    def validate(self) -> Tenant:
        check_key(self.name, "tenant name")
        # values come from files and sockets: messages name the field, never quote the value
        if not isinstance(self.cls, str) or self.cls not in CLASSES:
            raise at(InvalidInput(f"tenant {self.name}: class must be online or offline"), "class")
        if isinstance(self.share, bool) or not isinstance(self.share, int) or not 1 <= self.share <= 100:
            raise at(InvalidInput(f"tenant {self.name}: share must be an integer percent 1..100"), "share")
        if not isinstance(self.demand, str) or self.demand not in DEMANDS:
            raise at(InvalidInput(f"tenant {self.name}: demand must be one of {', '.join(DEMANDS)}"), "demand")
        for what, value, hi in (
            ("memory", self.memory, 1 << 50),
            ("inflight", self.inflight, MAX_INFLIGHT),
            ("inflight_ms", self.inflight_ms, MAX_INFLIGHT_MS),
            ("memory_burst", self.memory_burst, 1 << 50),
        ):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi):
                raise at(InvalidInput(f"tenant {self.name}: {what} must be an integer 1..{hi}"), what)
        if self.memory_burst is not None and self.cls != "offline":
            raise at(
                InvalidInput(
                    f"tenant {self.name}: a memory burst is for offline tenants (online tenants' memory is plain "
                    "device memory)"
                ),
                "memory_burst",
            )
        if self.memory_burst is not None and self.memory is None:
            err = InvalidInput(
                f"tenant {self.name}: a memory burst goes beyond a memory cap: give the cap too (--memory, memory:)"
            )
            raise at(err, "memory_burst")
        if self.kind == "cgroup":
            cg = self.cgroup
            if not isinstance(cg, str) or not cg or has_control(cg) or len(cg) > 4096 or ".." in cg.split("/"):
                raise at(InvalidInput(f"tenant {self.name}: invalid cgroup path"), "cgroup")
        elif self.kind == "pids":
            bad = [p for p in self.pids if isinstance(p, bool) or not isinstance(p, int) or not 1 < p <= PID_MAX]
            if not self.pids or bad:
                raise at(InvalidInput(f"tenant {self.name}: pids must be process ids > 1"), "pids")
        elif self.kind == "domain":
            under(("domain",), lambda: check_key(self.domain or "", "libvirt domain name"))
        else:
            raise InvalidInput(f"tenant {self.name}: kind must be cgroup, pids or domain")
        return self

    @property
    def target(self) -> str:
        if self.kind == "cgroup":
            return f"cgroup:{self.cgroup}"
        if self.kind == "pids":
            return "pids:" + ",".join(str(p) for p in self.pids)
        return f"domain:{self.domain}"

    def to_dict(
        self,
    ) -> dict[str, Any]:  # a reshape: the config file's words (class, target)
        doc: dict[str, Any] = {"class": self.cls, "share": self.share, "demand": self.demand}
        if self.kind == "cgroup":
            doc["cgroup"] = self.cgroup
        elif self.kind == "pids":
            doc["pids"] = list(self.pids)
        else:
            doc["domain"] = self.domain
        for k in LIBRARY_KEYS:
            if getattr(self, k) is not None:
                doc[k] = getattr(self, k)
        return doc

    @property
    def library_config(self) -> dict[str, int]:
        """What libvgpukit-cuda reads for this tenant (empty: the tenant does not configure it)."""
        return {k: v for k in LIBRARY_KEYS if (v := getattr(self, k)) is not None}

    @classmethod
    def from_dict(cls, name: str, doc: Any) -> Tenant:
        check_key(name, "tenant name")
        if not isinstance(doc, dict):
            raise InvalidInput(f"tenant {name}: expected a mapping")
        unknown = set(doc) - {
            "class",
            "share",
            "demand",
            "cgroup",
            "pids",
            "domain",
            "memory",
            "inflight",
            "inflight_ms",
            "memory_burst",
        }
        if unknown:
            raise at(
                InvalidInput(f"tenant {name}: unknown keys {unknown_keys(unknown)}"), _first(doc, unknown), "<key>"
            )
        targets = [k for k in ("cgroup", "pids", "domain") if doc.get(k) not in (None, [], "")]
        if len(targets) != 1:
            raise InvalidInput(f"tenant {name}: give exactly one of cgroup, pids, domain")
        kind = "pids" if targets[0] == "pids" else targets[0]
        pids = doc.get("pids") or []
        if not isinstance(pids, list):
            pids = [pids]
        return Tenant(
            name=name,
            cls=doc.get("class", "offline"),
            share=doc.get("share", 0),
            kind=kind,
            cgroup=doc.get("cgroup"),
            pids=tuple(pids),
            domain=doc.get("domain"),
            demand=doc.get("demand", "auto"),
            memory=None
            if doc.get("memory") is None
            else under(("memory",), lambda: parse_size(doc["memory"], f"tenant {name}: memory", lo=1)),
            inflight=doc.get("inflight"),
            inflight_ms=doc.get("inflight_ms"),
            memory_burst=None
            if doc.get("memory_burst") is None
            else under(
                ("memory_burst",), lambda: parse_size(doc["memory_burst"], f"tenant {name}: memory_burst", lo=1)
            ),
        ).validate()


class Gpu(msgspec.Struct, frozen=True):
    """Policy, slice and tenants of one schedulable device."""

    key: str
    policy: str = "best-effort"
    slice_ms: int = DEFAULT_SLICE_MS
    tenants: tuple[Tenant, ...] = ()
    memory: MemoryPolicy = msgspec.field(default_factory=MemoryPolicy)

    @property
    def memory_qos(self) -> bool:
        """Memory QoS is on: a policy is set, or an offline tenant has a burst."""
        return not self.memory.default or any(t.memory_burst for t in self.tenants)

    def library_config(self, t: Tenant) -> dict[str, int | str]:
        """What libvgpukit-cuda reads for tenant ``t`` of this GPU (empty: nothing to configure)."""
        conf: dict[str, int | str] = dict(t.library_config)
        if self.memory_qos:
            conf["class"] = t.cls
            if t.cls == "online":
                conf["reclaim_ms"] = self.memory.reclaim_ms
                if self.memory.watermark:
                    conf["watermark"] = self.memory.watermark
        return conf

    def validate(self) -> Gpu:
        check_key(self.key, "GPU key")
        self.memory.validate(self.key)
        if not isinstance(self.policy, str) or self.policy not in POLICIES:
            raise at(InvalidInput(f"{self.key}: policy must be one of {', '.join(POLICIES)}"), "policy")
        under(("slice_ms",), lambda: number(self.slice_ms, f"{self.key}: slice_ms", MIN_SLICE_MS, MAX_SLICE_MS, True))
        for t in self.tenants:
            under(("tenants", t.name), t.validate)
        return self

    def tenant(self, name: str) -> Tenant:
        for t in self.tenants:
            if t.name == name:
                return t
        raise NotFound(f"{self.key}: no tenant {name}")

    def to_dict(self) -> dict[str, Any]:  # a reshape: tenants keyed by name; memory only when not the default
        doc: dict[str, Any] = {
            "policy": self.policy,
            "slice_ms": self.slice_ms,
            "tenants": {t.name: t.to_dict() for t in self.tenants},
        }
        if not self.memory.default:
            doc["memory"] = self.memory.to_dict()
        return doc

    @classmethod
    def from_dict(cls, key: str, doc: Any) -> Gpu:
        check_key(key, "GPU key")
        if doc is None:
            doc = {}
        check_key(key, "GPU key")
        if not isinstance(doc, dict):
            raise InvalidInput(f"{key}: expected a mapping")
        unknown = set(doc) - {"policy", "slice_ms", "tenants", "memory"}
        if unknown:
            raise at(InvalidInput(f"{key}: unknown keys {unknown_keys(unknown)}"), _first(doc, unknown), "<key>")
        tenants = doc.get("tenants") or {}
        if not isinstance(tenants, dict):
            raise at(InvalidInput(f"{key}: tenants must be a mapping name -> tenant"), "tenants")
        memory = doc.get("memory")
        if isinstance(memory, dict) and set(memory) - set(MEMORY_KEYS):
            err = InvalidInput(f"{key}: memory: unknown keys {unknown_keys(set(memory) - set(MEMORY_KEYS))}")
            raise at(err, "memory", _first(memory, set(memory) - set(MEMORY_KEYS)), "<key>")
        return Gpu(
            key=key,
            policy=doc.get("policy", "best-effort"),
            slice_ms=doc.get("slice_ms", DEFAULT_SLICE_MS),
            tenants=tuple(under(("tenants", n), partial(Tenant.from_dict, str(n), t)) for n, t in tenants.items()),
            memory=under(("memory",), partial(MemoryPolicy.from_dict, key, doc.get("memory"))),
        ).validate()


class QosConfig(msgspec.Struct):
    """The daemon's whole configuration: GPUs by key, plus daemon settings."""

    gpus: dict[str, Gpu] = msgspec.field(default_factory=dict)
    watchdog_s: float = 2.0  # a freeze not renewed by a live daemon is undone after this long
    sample_ms: int = 10  # sampling interval (demand sample, and auto until the first notification)

    def validate(self) -> QosConfig:
        for key, gpu in self.gpus.items():
            under(("gpus", key), gpu.validate)
        under(("watchdog_s",), lambda: number(self.watchdog_s, "watchdog_s (seconds)", 0.1, 3600))
        under(("sample_ms",), lambda: number(self.sample_ms, "sample_ms", 1, 1000, integer=True))
        return self

    def to_dict(self) -> dict[str, Any]:  # a reshape: GPUs sorted by key
        return {
            "watchdog_s": self.watchdog_s,
            "sample_ms": self.sample_ms,
            "gpus": {k: g.to_dict() for k, g in sorted(self.gpus.items())},
        }

    @classmethod
    def from_dict(cls, doc: Any) -> QosConfig:
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise InvalidInput("QoS config: expected a mapping at the top level")
        unknown = set(doc) - {"gpus", "watchdog_s", "sample_ms"}
        if unknown:
            raise at(InvalidInput(f"QoS config: unknown keys {unknown_keys(unknown)}"), _first(doc, unknown), "<key>")
        gpus = doc.get("gpus") or {}
        if not isinstance(gpus, dict):
            raise at(InvalidInput("QoS config: gpus must be a mapping key -> settings"), "gpus")
        return cls(
            gpus={str(k): under(("gpus", k), partial(Gpu.from_dict, str(k), v)) for k, v in gpus.items()},
            watchdog_s=doc.get("watchdog_s", 2.0),
            sample_ms=doc.get("sample_ms", 10),
        ).validate()
