"""The QoS config (``/etc/vgpukit/qos.yaml``, a host config's ``qos:``) declared once: its checks and its schema.

The ``msgspec.Struct`` types below are the document's one statement of shape and bounds: the records of
:mod:`vgpukit.qos.model` are built from them (:func:`vgpukit.declared.convert`: a refusal names the path
``$.gpus.gpu0.tenants.web.share: expected int <= 100``), a tenant or policy from the command line or
the control socket is checked by the same declaration, and ``vgpukit/data/schemas/qos/config.json`` is
generated from them (``scripts/gen_schemas.py``). The rules between fields or tenants (one target per
tenant, a burst needs a cap and the offline class, shares per class, tenants per GPU) are the model's
and the QoS planner's (docs/decisions.md, "Configuration documents").
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import msgspec
from msgspec import Meta

from ..declared import text_sizes
from ..inputs import SIZE_PATTERN

PolicyName = Literal["best-effort", "fixed-share", "burst-share"]
ClassName = Literal["online", "offline"]
DemandName = Literal["auto", "notify", "sample"]  # docs/qos.md, "Demand"
SuspendName = Literal["off", "freeze", "checkpoint"]
POLICIES: tuple[str, ...] = get_args(PolicyName)
CLASSES: tuple[str, ...] = get_args(ClassName)
DEMANDS: tuple[str, ...] = get_args(DemandName)
SUSPENDS: tuple[str, ...] = get_args(SuspendName)
PID_MAX = 4194304  # the kernel's PID_MAX_LIMIT on 64-bit
MIN_SLICE_MS = 1
MAX_SLICE_MS = 1000
MAX_INFLIGHT = 1023  # launches per stream the CUDA library keeps outstanding (docs/cuda.md)
MAX_INFLIGHT_MS = 3_600_000
MAX_MS = 3_600_000
MAX_BYTES = 1 << 50
KEY_FORM = r"^[A-Za-z0-9_.:-]{1,128}$(?!\n)"  # (?!\n): Python's $ also matches before a last newline

Key = Annotated[str, Meta(pattern=KEY_FORM, description="a GPU key, tenant or domain name: letters, digits, _ . : -")]
SIZE_FORM = "bytes with a binary unit: 4G = 4Gi = 4 GiB"
# a size as text: checked by text_sizes (its words); the schema that ships checks its form too
SizeText = Annotated[
    str, Meta(min_length=1, max_length=64, description=SIZE_FORM, extra_json_schema={"pattern": SIZE_PATTERN})
]
Size = Annotated[int, Meta(ge=1, le=MAX_BYTES)] | SizeText
Pid = Annotated[int, Meta(gt=1, le=PID_MAX)]


class TenantDoc(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One tenant: its class and share, and exactly one of cgroup, pids, domain (what it is on the host)."""

    share: Annotated[int, Meta(ge=1, le=100, description="percent of the GPU's time")]
    cls: ClassName = msgspec.field(name="class", default="offline")
    demand: DemandName = "auto"
    cgroup: Annotated[str, Meta(max_length=4096)] | None = None
    pids: Annotated[list[Pid], Meta(max_length=4096)] | Pid | None = None
    domain: Key | None = None
    memory: Size | None = None  # the CUDA library's cap per device (docs/cuda.md)
    inflight: Annotated[int, Meta(ge=1, le=MAX_INFLIGHT)] | None = None
    inflight_ms: Annotated[int, Meta(ge=1, le=MAX_INFLIGHT_MS)] | None = None
    memory_burst: Size | None = None  # offline tenants: unified memory beyond the cap (docs/qos.md)

    def __post_init__(self) -> None:  # a size as text: its form and bound (no schema can say them)
        text_sizes(self, SIZE_FORM, "memory", "memory_burst", lo=1, hi=MAX_BYTES)


class MemoryDoc(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The GPU's memory QoS policy (docs/qos.md, "Memory QoS")."""

    watermark: Annotated[int, Meta(ge=0, le=MAX_BYTES)] | SizeText = 0
    suspend: SuspendName = "off"
    restore_ms: Annotated[int, Meta(ge=0, le=MAX_MS)] = 1000
    reclaim_ms: Annotated[int, Meta(ge=0, le=MAX_MS)] = 10000

    def __post_init__(self) -> None:
        text_sizes(self, SIZE_FORM, "watermark", lo=0, hi=MAX_BYTES)


class GpuDoc(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Policy, slice and tenants of one schedulable device (a GPU, a MIG slice, a whole host)."""

    policy: PolicyName = "best-effort"
    slice_ms: Annotated[int, Meta(ge=MIN_SLICE_MS, le=MAX_SLICE_MS)] = 10
    tenants: dict[Key, TenantDoc] | None = None
    memory: MemoryDoc | None = None


class QosDoc(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The QoS daemon's configuration (docs/qos.md)."""

    gpus: dict[Key, GpuDoc | None] | None = None
    watchdog_s: Annotated[float, Meta(ge=0.1, le=3600)] = 2.0  # a freeze not renewed is undone after this long
    sample_ms: Annotated[int, Meta(ge=1, le=1000)] = 10
