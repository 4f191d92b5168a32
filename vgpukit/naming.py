"""How users name devices: ``gpuN`` / ``nicN`` / ``nvmeN``, a PCI address, or a GPU UUID.

``gpuN`` counts physical GPUs (not VFs) in PCI bus order (domain, bus, device, function); ``nicN``
and ``nvmeN`` count physical NICs and NVMe controllers the same way. This matches ``lspci`` order,
not NVML's index (which follows ``CUDA_DEVICE_ORDER`` and may differ).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from .errors import InvalidInput, NotFound
from .pci import PciDevice, is_bdf, parse_bdf, scan

if TYPE_CHECKING:
    from .host import Host
    from .nvml import Nvml


class HostContext(Protocol):
    """Where a name is looked up: a host, and NVML (opened only when a GPU UUID needs it)."""

    @property
    def host(self) -> Host: ...

    @property
    def nvml(self) -> Nvml | None: ...


ALIAS_RE = re.compile(r"^(gpu|nic|nvme)(\d+)$")
UUID_RE = re.compile(r"^GPU-[0-9a-fA-F-]{36}$")


def aliases(devices: list[PciDevice]) -> dict[str, str]:
    """BDF -> alias for every physical GPU, NIC and NVMe controller."""
    counters: dict[str, int] = {}
    out = {}
    for dev in devices:
        if dev.kind in ("gpu", "nic", "nvme") and not dev.is_vf:
            n = counters.get(dev.kind, 0)
            counters[dev.kind] = n + 1
            out[dev.bdf] = f"{dev.kind}{n}"
    return out


def resolve_in(
    host: Host, name: str, devices: list[PciDevice] | None = None, gpu_uuids: dict[str, str] | None = None
) -> str:
    """Resolve ``name`` to a BDF of an existing device."""
    text = name.strip()
    if is_bdf(text):
        bdf = parse_bdf(text)
        if not host.exists(host.pci_device(bdf)):
            raise NotFound(f"no PCI device {bdf}", device=bdf, hint="see: vgpukit devices")
        return bdf
    m = ALIAS_RE.match(text.lower())
    if m:
        devs = devices if devices is not None else scan(host)
        by_alias = {alias: bdf for bdf, alias in aliases(devs).items()}
        if text.lower() in by_alias:
            return by_alias[text.lower()]
        count = sum(1 for a in by_alias if a.startswith(m.group(1)))
        raise NotFound(
            f"no {text}: this host has {count} {m.group(1).upper()}(s)", device=text, hint="see: vgpukit devices"
        )
    if UUID_RE.match(text):
        for bdf, uuid in (gpu_uuids or {}).items():
            if uuid.lower() == text.lower():
                return bdf
        raise NotFound(f"no GPU with UUID {text}", device=text)
    raise InvalidInput(
        f"cannot name a device by {name!r}: use gpuN, nicN, nvmeN, a PCI address or a GPU UUID", value=name
    )


def needs_nvml(name: str) -> bool:
    """Only GPU UUIDs are resolved through NVML."""
    return bool(UUID_RE.match(name.strip()))


def resolve_on(host: Host, name: str, nvml: Nvml | None = None) -> str:
    """Resolve a user-supplied device name on ``host``; ``nvml`` maps GPU UUIDs (unused otherwise)."""
    uuids = {g.bdf: g.uuid for g in nvml.gpus()} if nvml is not None and needs_nvml(name) else None
    return resolve_in(host, name, gpu_uuids=uuids)


def resolve_device(ctx: HostContext, name: str) -> str:
    """:func:`resolve_on` for a front end's context (NVML opened only for UUIDs)."""
    return resolve_on(ctx.host, name, ctx.nvml if needs_nvml(name) else None)
