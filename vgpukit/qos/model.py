"""QoS data model: policies, tenants, per-GPU settings, validation and (de)serialisation.

Records here do no I/O. A *GPU key* is any name matching ``[A-Za-z0-9_.:-]+`` (``gpu0``, a PCI
address, a MIG UUID); the device need not exist, so a MIG slice or a whole host can be scheduled.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import msgspec

from ..declared import convert
from ..errors import InvalidInput, NotFound
from ..inputs import at, has_control, parse_size, under
from .document import (  # the QoS config's declaration: types and bounds of every field
    CLASSES,
    DEMANDS,
    KEY_FORM,
    MAX_INFLIGHT,
    MAX_INFLIGHT_MS,
    MAX_SLICE_MS,
    MIN_SLICE_MS,
    PID_MAX,
    POLICIES,
    GpuDoc,
    QosDoc,
    TenantDoc,
)
from .mempolicy import MemoryPolicy

__all__ = ["CLASSES", "DEMANDS", "MAX_INFLIGHT", "MAX_INFLIGHT_MS", "MAX_SLICE_MS", "MIN_SLICE_MS", "POLICIES"]

KINDS = ("cgroup", "pids", "domain")
MAX_TENANTS = 64
DEFAULT_SLICE_MS = 10  # chosen by measurement, see docs/qos.md ("Slice length")
MAX_PID = PID_MAX  # the name the CLI options use
_KEY = re.compile(KEY_FORM, re.ASCII)
LIBRARY_KEYS = ("memory", "inflight", "inflight_ms", "memory_burst")  # a tenant's libvgpukit-cuda settings


def check_key(value: str, what: str) -> str:
    """A GPU key, tenant or domain name. Refusals never quote the value (it may come from a file)."""
    if not isinstance(value, str) or not _KEY.match(value):
        raise InvalidInput(f"invalid {what}: use letters, digits and _ . : - (1 to 128 characters)")
    return value


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
        """The tenant as the declaration (:class:`~vgpukit.qos.document.TenantDoc`) and the rules between
        its fields have it; values come from files and sockets: messages never quote them."""
        check_key(self.name, "tenant name")
        if self.kind not in KINDS:
            raise InvalidInput(f"tenant {self.name}: kind must be cgroup, pids or domain")
        convert(self.to_dict(), TenantDoc, f"tenant {self.name}")
        return self.rules()

    def rules(self) -> Tenant:
        """The rules between the tenant's fields (what its declaration cannot say)."""
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
        if self.kind == "cgroup":  # a path below the cgroup root (what a schema's pattern would say badly)
            cg = self.cgroup
            if not isinstance(cg, str) or not cg or has_control(cg) or ".." in cg.split("/"):
                raise at(InvalidInput(f"tenant {self.name}: invalid cgroup path"), "cgroup")
        elif self.kind == "pids" and not self.pids:
            raise at(InvalidInput(f"tenant {self.name}: pids must be process ids > 1"), "pids")
        elif self.kind == "domain" and not self.domain:
            raise at(InvalidInput(f"tenant {self.name}: a domain tenant names its libvirt domain"), "domain")
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
        return cls.of(name, convert(doc, TenantDoc, f"tenant {name}"))

    @classmethod
    def of(cls, name: str, doc: TenantDoc) -> Tenant:
        """The tenant a declared document describes, checked by the rules between its fields."""
        targets = [k for k in KINDS if getattr(doc, k) not in (None, [], "")]
        if len(targets) != 1:
            raise InvalidInput(f"tenant {name}: give exactly one of cgroup, pids, domain")
        pids = doc.pids if isinstance(doc.pids, list) else [] if doc.pids is None else [doc.pids]
        return Tenant(
            name=name,
            cls=doc.cls,
            share=doc.share,
            kind=targets[0],
            cgroup=doc.cgroup,
            pids=tuple(pids),
            domain=doc.domain,
            demand=doc.demand,
            memory=_size(doc.memory, name, "memory"),
            inflight=doc.inflight,
            inflight_ms=doc.inflight_ms,
            memory_burst=_size(doc.memory_burst, name, "memory_burst"),
        ).rules()


def _size(value: int | str | None, name: str, what: str) -> int | None:
    """Bytes of a size the declaration let through (an integer, or text with a unit: ``4G``)."""
    if value is None or isinstance(value, int):
        return value
    return under((what,), lambda: parse_size(value, f"tenant {name}: {what}", lo=1))


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
        convert({"policy": self.policy, "slice_ms": self.slice_ms}, GpuDoc, self.key)
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
        return cls.of(key, convert(doc, GpuDoc | None, key))

    @classmethod
    def of(cls, key: str, doc: GpuDoc | None) -> Gpu:
        """The GPU a declared document describes (None: the defaults)."""
        doc = doc or GpuDoc()
        return Gpu(
            key=key,
            policy=doc.policy,
            slice_ms=doc.slice_ms,
            tenants=tuple(under(("tenants", n), partial(Tenant.of, n, t)) for n, t in (doc.tenants or {}).items()),
            memory=under(("memory",), partial(MemoryPolicy.of, key, doc.memory)),
        )


class QosConfig(msgspec.Struct):
    """The daemon's whole configuration: GPUs by key, plus daemon settings."""

    gpus: dict[str, Gpu] = msgspec.field(default_factory=dict)
    watchdog_s: float = 2.0  # a freeze not renewed by a live daemon is undone after this long
    sample_ms: int = 10  # sampling interval (demand sample, and auto until the first notification)

    def validate(self) -> QosConfig:
        for key, gpu in self.gpus.items():
            under(("gpus", key), gpu.validate)
        convert({"watchdog_s": self.watchdog_s, "sample_ms": self.sample_ms}, QosDoc)
        return self

    def to_dict(self) -> dict[str, Any]:  # a reshape: GPUs sorted by key
        return {
            "watchdog_s": self.watchdog_s,
            "sample_ms": self.sample_ms,
            "gpus": {k: g.to_dict() for k, g in sorted(self.gpus.items())},
        }

    @classmethod
    def from_dict(cls, doc: Any) -> QosConfig:
        """The config of a document (YAML or JSON, parsed), checked by its declaration
        (:class:`~vgpukit.qos.document.QosDoc`: a refusal names the path, ``$.gpus.gpu0.slice_ms``)."""
        got: QosDoc = convert({} if doc is None else doc, QosDoc)
        return cls(
            gpus={k: under(("gpus", k), partial(Gpu.of, k, g)) for k, g in (got.gpus or {}).items()},
            watchdog_s=got.watchdog_s,
            sample_ms=got.sample_ms,
        )
