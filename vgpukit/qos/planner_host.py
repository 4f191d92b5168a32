"""The QoS planner's facts of this host and the rules they bring (with :mod:`vgpukit.qos.planner`):

* a GPU key that names a device (``gpu0``, a PCI address, ``GPU-...``, ``MIG-...``, ``nic0 vf0``) must
  name a GPU or MIG device of this host, through the one resolver (:mod:`vgpukit.naming`); other keys
  (``host``, ``pool-a``) are labels the daemon schedules as they are (docs/qos.md, "GPU keys");
* a GPU in MIG mode takes no tenants of its own: its work runs in its MIG devices, which a time slice
  of the whole GPU does not reach (key the tenants by MIG device);
* the running daemon's view: the configuration it loaded last and the tenants it dropped (their
  cgroup, processes or domain gone), read from its control socket (:func:`daemon_view`).

Nothing here executes or prints; a refusal is raised, noted at the key it is about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Union

import msgspec
from msgspec.structs import replace

from .. import naming
from ..errors import Conflict, InvalidInput, NotFound, VgpukitError
from ..host import Host
from ..inputs import at
from ..pci import Scan
from .model import QosConfig, Tenant

if TYPE_CHECKING:
    from ..nvml import Nvml

NvmlSource = Union["Nvml", Callable[[], "Nvml | None"], None]
DEVICE_FORMS = ("alias", "bdf", "gpu-uuid", "vf")


def check_host(host: Host, cfg: QosConfig, nvml: NvmlSource = None, mig: dict[str, bool] | None = None) -> QosConfig:
    """``cfg`` with its GPU keys canonical (:func:`check_key_here`) when each that names a device names a
    GPU (not in MIG mode) or a MIG device of this host, and no two name one device (the shares rule
    holds per physical GPU; refused, exit 2, naming both keys: the error's ``also`` is the other's
    place). ``mig``: GPU address -> its MIG mode once the plan the config is part of ran (a host
    config's ``mig:``), over what NVML says now."""
    scan = Scan(host)
    gpus: dict[str, Any] = {}
    named: dict[str, str] = {}  # canonical key -> the key as written
    for key, gpu in cfg.gpus.items():
        canon = check_key_here(host, key, nvml, scan, mig)
        if canon in named:
            err = InvalidInput(
                f"GPU keys {named[canon]} and {key} name one device ({canon}): give its tenants under one key,"
                " the shares of a class on one GPU add up to at most 100%"
            )
            err.__dict__["also"] = ("gpus", named[canon], "<key>")
            raise at(err, "gpus", key, "<key>")
        named[canon] = key
        gpus[canon] = gpu
    return replace(cfg, gpus=gpus)


def check_key_here(
    host: Host, key: str, nvml: NvmlSource = None, scan: Scan | None = None, mig: dict[str, bool] | None = None
) -> str:
    """The host rules of one GPU key, and its canonical form: a GPU by its ``gpuN`` (whichever of its
    names the key is: ``gpu0``, ``GPU-...``, ``0000:03:00.0``, ``03:00.0``), a MIG device by its
    ``MIG-`` UUID as NVML writes it. A label that names no device passes as it is, and so does any key
    on a host root that shows no PCI device at all: a test rig or a container without /sys, where
    nothing can be named (docs/qos.md, "GPU keys")."""
    form = naming.form_of(key)
    scan = scan or Scan(host)
    if form in (*DEVICE_FORMS, "mig-uuid") and not scan.bdfs():
        return key
    try:
        if form == "mig-uuid":
            return naming.resolve(host, key, frozenset({naming.MIG}), nvml=nvml, scan=scan).uuid or key
        if form in DEVICE_FORMS:
            return _gpu_here(host, key, nvml, scan, mig or {})
        return key
    except VgpukitError as err:
        if not err.message.startswith(f"GPU key {key}"):
            err.message = f"GPU key {key}: {err.message}"
            err.args = (err.message,)
        raise at(err, "gpus", key, "<key>") from None


def canonical_key(host: Host, key: str, nvml: NvmlSource = None) -> str:
    """``key``'s canonical form (:func:`check_key_here`) when it names a GPU or MIG device here, else
    ``key`` as given: how ``qos status`` and ``tenant rm`` find a key by any of its GPU's names."""
    try:
        return check_key_here(host, key, nvml)
    except VgpukitError:
        return key


def _gpu_here(host: Host, key: str, nvml: NvmlSource, scan: Scan, mig: dict[str, bool]) -> str:
    bdf = naming.resolve(host, key, nvml=nvml, scan=scan).bdf
    assert bdf is not None
    alias = naming.aliases(scan).get(bdf, "")
    if not alias.startswith("gpu"):
        raise NotFound(f"GPU key {key}: {bdf} is not a GPU", device=bdf, hint="see: vgpukit devices --kind gpu")
    try:
        nv = nvml() if callable(nvml) else nvml
        gpu = next((g for g in nv.gpus() if g.bdf == bdf), None) if nv is not None else None
    except VgpukitError:  # no driver, a lost GPU: its MIG mode is unknown, nothing to refuse on it
        gpu = None
    now = gpu is not None and gpu.mig_current
    if mig.get(bdf, now):
        state = "is in MIG mode" if now else "will be in MIG mode (the config's mig: enables it)"
        raise Conflict(
            f"GPU key {key}: {bdf} {state}: a time slice of the whole GPU does not reach the work in its MIG devices",
            device=bdf,
            hint="key the tenants by MIG device (MIG-<uuid>, see: vgpukit mig status)",
        )
    return alias


# ----------------------------------------------------------------------------- the daemon's view
class Dropped(msgspec.Struct, frozen=True):
    """A tenant of the configuration the daemon does not run, and why (its target is gone)."""

    gpu: str
    tenant: str
    reason: str


class DaemonView(msgspec.Struct, frozen=True):
    pid: int | None
    loaded: dict[str, Any] | None  # the configuration file as it loaded it last (None: it does not say)
    dropped: tuple[Dropped, ...]


def daemon_view(host: Host) -> DaemonView | None:
    """What the running QoS daemon says it runs; None when no daemon runs."""
    from .control import request

    try:
        reply = request(host, {"op": "status"}, timeout=5)
    except NotFound:
        return None
    found = reply.get("config")
    config: dict[str, Any] = found if isinstance(found, dict) else {}
    loaded = config.get("loaded") if isinstance(config.get("loaded"), dict) else None
    dropped = tuple(
        Dropped(str(d.get("gpu")), str(d.get("tenant")), str(d.get("reason")))
        for d in config.get("dropped") or []
        if isinstance(d, dict)
    )
    pid = reply.get("pid")
    return DaemonView(pid if isinstance(pid, int) else None, loaded, dropped)


def target_exists(host: Host, tenant: Tenant) -> bool:
    """Whether the tenant's cgroup or processes are there now (a domain: not known without libvirt)."""
    if tenant.kind == "domain":
        return False
    from .backends import backend_for

    try:
        backend_for(host, tenant)
    except VgpukitError:
        return False
    return True
