"""Shares of devices shared by capacity (:mod:`.capacity`), at prepare and unprepare.

The scheduler allocated the claim a share of a shared device: the result carries a ``shareID`` (a UUID)
and its ``consumedCapacity`` (``memory`` bytes, ``computeShare`` percent, as the request policies
rounded them). Prepare turns that into its enforcement, planned by the areas that own it:

* a **QoS tenant** ``dra-<shareID>`` of the device (its UUID the QoS GPU key) for the pod's cgroup, with
  the share's ``computeShare`` as its share and its ``memory`` as the tenant's memory cap; its class (and the
  GPU's policy) from the claim's ``QosClassConfig``, offline by default. The QoS planner's rules apply
  (a 65th tenant, a class over 100% with tenants the operator added, a GPU under another policy): the
  claim's error is the planner's, and nothing is done;
* the **CUDA interception library's memory cap** of that size in the claim's CDI edits (``LD_PRELOAD``,
  ``VGPUKIT_CUDA_MEMORY``, the tenant's identity and directory): the library must be installed.

Two shares of one device in one claim (two requests) are one tenant (their sums, named by the first
shareID): the pod's cgroup is one QoS target. The claim's record keeps each result's shareID and
consumed capacity, and its ``sharing`` the tenant, so unprepare removes exactly that tenant
(:func:`.sharing.undo`). A prepare is refused (nothing done) when another claim holds the device the
other way: a share of a device prepared exclusively, or the device itself while shares of it are prepared.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import Conflict, InvalidInput, Unsupported
from . import capacity
from .capacity import MEMORY, SHARE, base_name, quantity, shared_name
from .devices import DRIVER
from .sharing import Plan, Qos, Result, pod_cgroup, tenant_edits

if TYPE_CHECKING:
    from ...cdi_settings import Settings
    from ...engine.env import Env
    from .devices import DraDevice


class Share(Result, Protocol):
    """An allocation result of the claim (:class:`.claims.Result`), a share when ``share_id`` is set."""

    @property
    def pool(self) -> str: ...
    @property
    def share_id(self) -> str: ...
    @property
    def consumed(self) -> tuple[tuple[str, str], ...]: ...


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def allocated(result: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(shareID, consumedCapacity) of an allocation result (``""``, ``()``: not a share); refused when
    they are not of the API's form (never quoting them)."""
    share_id = result.get("shareID")
    if share_id is None:
        return "", ()
    if not isinstance(share_id, str) or not _UUID.fullmatch(share_id):
        raise InvalidInput(f"device {str(result.get('device', ''))[:64]}: the allocation's shareID is not a UUID")
    consumed = result.get("consumedCapacity") or {}
    if not isinstance(consumed, dict) or len(consumed) > 32:
        raise InvalidInput(f"device {str(result.get('device', ''))[:64]}: consumedCapacity must be a map")
    pairs = tuple(sorted((str(k)[:128], str(v)[:64]) for k, v in consumed.items()))
    return share_id.lower(), pairs


def result_doc(r: Share) -> dict[str, Any]:
    """One result as the claim's record keeps it."""
    doc: dict[str, Any] = {"request": r.request, "pool": r.pool, "device": r.device}
    if r.share_id:
        doc["shareID"] = r.share_id
        doc["consumedCapacity"] = dict(r.consumed)
    return doc


def recorded(doc: dict[str, Any]) -> dict[str, Any]:
    """The share fields of a result the record keeps (:func:`result_doc`), as :class:`.claims.Result`'s
    (ValueError: not as this plugin writes them)."""
    try:
        share_id, consumed = allocated(doc)
    except InvalidInput:
        raise ValueError("shareID") from None
    return {"share_id": share_id, "consumed": consumed} if share_id else {}


def _amount(consumed: tuple[tuple[str, str], ...], name: str, device: str) -> int:
    """A consumed capacity, integer: named as the slice names it, or with the driver's domain."""
    found = dict(consumed)
    text = found.get(name, found.get(f"{DRIVER}/{name}"))
    if text is None:
        raise InvalidInput(f"device {device}: the allocation consumed no {name}")
    value = quantity(text, f"device {device}: consumed {name}")
    if value.denominator != 1 or value <= 0:
        raise InvalidInput(f"device {device}: consumed {name} must be a positive whole number")
    return int(value)


def check_modes(env: Env, uid: str, results: Sequence[Share]) -> None:
    """Refuse a claim that would use a device the other way than other claims hold it (module docstring)."""
    exclusive, shared = capacity.holds(env.host, but=uid)
    mine = {r.device for r in results}
    exclusive |= {n for n in mine if base_name(n) is None}  # the claim's own, both ways: refused too
    shared |= {b for n in mine if (b := base_name(n)) is not None}
    for r in results:
        base = base_name(r.device)
        if base is not None and base in exclusive:
            raise Conflict(f"device {r.device}: {base} is prepared for another claim exclusively: it is not shared")
        if base is None and r.device in shared:
            raise Conflict(f"device {r.device}: it is shared by capacity ({shared_name(r.device)} holds shares)")


def plan(env: Env, uid: str, results: Sequence[Share], offered: dict[str, DraDevice], settings: Settings) -> Plan:
    """The steps, edits and record of the claim's shares (``results``: all of the claim's); refused, nothing
    done, by the QoS planner's rules and the rules above."""
    from ...cdi.nvidia import Edits
    from ...cdi_settings import host_path
    from ...qos.model import Tenant

    if any(r.device.startswith(("gpu-", "mig-", capacity.PREFIX)) for r in results):  # others: no GPU to share
        check_modes(env, uid, results)
    out = Plan()
    by_device: dict[str, list[Share]] = {}
    for r in results:
        if base_name(r.device) is not None:
            by_device.setdefault(r.device, []).append(r)
        if r.share_id and base_name(r.device) is None:
            raise InvalidInput(f"device {r.device}: allocated as a share, but it is not a shared device")
    qos = Qos(env)
    for name, rs in sorted(by_device.items()):
        rs = sorted(rs, key=lambda r: r.share_id)
        want = rs[0].sharing
        if any(r.sharing != want for r in rs):
            raise Conflict(f"device {name}: requests {rs[0].request} and {rs[1].request} configure it differently")
        if want.time_slice or want.mps or want.memory is not None:
            raise InvalidInput(
                f"device {name}: shared by capacity, its share and memory cap are the allocation's: "
                "TimeSliceConfig, MemoryCapConfig and MpsConfig do not apply (QosClassConfig sets the class)"
            )
        ids = [r.share_id for r in rs]
        if not all(ids):
            raise InvalidInput(
                f"device {name}: allocated without a share (the cluster does not serve consumable capacity: "
                "feature gate DRAConsumableCapacity)"
            )
        if not env.host.is_file(host_path(env.host, settings.cuda_library)):
            raise Unsupported(f"device {name}: a share's memory cap needs the CUDA library {settings.cuda_library}")
        share = sum(_amount(r.consumed, SHARE, name) for r in rs)
        memory = sum(_amount(r.consumed, MEMORY, name) for r in rs)
        dev = offered[name]
        key = capacity.qos_key(dev)
        tenant = f"dra-{ids[0]}"
        cls = want.qos_class.cls if want.qos_class else "offline"
        policy = want.qos_class.policy if want.qos_class else None
        cgroup = pod_cgroup(env.host, rs[0].pods)
        t = Tenant(tenant, cls, min(share, 100), "cgroup", cgroup=cgroup, demand="auto", memory=memory)
        out.steps += qos.add(name, key, t, policy)
        out.record.append({"device": name, "qosTenant": {"gpu": key, "name": tenant}, "shareIDs": ids})
        edits = tenant_edits(env, settings, tenant, key) + Edits(env=(f"VGPUKIT_CUDA_MEMORY={memory}",))
        out.edits[name] = edits
    return out
