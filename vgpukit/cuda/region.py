"""Read and write what libvgpukit-cuda (contrib/cuda) shares with vgpukit, under /run/vgpukit/cuda/TENANT.

* ``config``: ``key=value`` lines the library reads at start (memory, inflight, inflight_ms, gpu).
* ``usage``: the library's shared accounting region (layout in contrib/cuda/region.c): per device the
  cap last configured and, per process slot, the bytes it holds; from version 2 on, the allocation
  attempts the cap refused. A slot of a dead process (no such pid, or the pid now belongs to a process
  started at another time) is not counted here, as the library reclaims it at its next allocation.
  Versions only append: any version's first bytes read as version 1's, so a version 1 region (an older
  library) reads with no refusals counted, and a later one as far as this reader knows it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from .. import processes
from ..host import Host, check_name

MAGIC = 0x55434756
MAXDEV = 32
SLOTS = 64
HEADER = struct.Struct("<4I")
CAPS_AT, TOTALS_AT, SLOTS_AT = 80, 336, 592
SLOT = struct.Struct(f"<iIQ{MAXDEV}Q")
SIZE = SLOTS_AT + SLOTS * SLOT.size  # version 1
REFUSED_AT = SIZE  # version 2: u64 refused[MAXDEV]
SIZE_V2 = REFUSED_AT + 8 * MAXDEV
CONFIG_KEYS = ("memory", "inflight", "inflight_ms", "gpu")


@dataclass(frozen=True)
class Usage:
    caps: tuple[int, ...]  # per device, 0 = uncapped
    used: tuple[int, ...]  # per device, bytes held by live processes
    processes: int
    refused: tuple[int, ...] = ()  # per device, allocation attempts the cap refused (a version 1 region: none)

    @property
    def cap(self) -> int:
        return max(self.caps, default=0)

    @property
    def peak_used(self) -> int:
        """The most any one device has in use (what one number per tenant shows)."""
        return max(self.used, default=0)


def tenant_dir(host: Host, tenant: str) -> Path:
    return host.state_dir("cuda", check_name(tenant, "tenant"))


def read_usage(host: Host, tenant: str) -> Usage | None:
    """The tenant's usage, or None when no process of it ever ran (or the file is not a region)."""
    data = host.read_bytes_opt(tenant_dir(host, tenant) / "usage", SIZE_V2)
    if data is None or len(data) < SIZE:
        return None
    magic, version, maxdev, slots = HEADER.unpack_from(data)
    if (magic, maxdev, slots) != (MAGIC, MAXDEV, SLOTS) or version < 1:
        return None
    caps = struct.unpack_from(f"<{MAXDEV}Q", data, CAPS_AT)
    refused = struct.unpack_from(f"<{MAXDEV}Q", data, REFUSED_AT) if version >= 2 and len(data) >= SIZE_V2 else ()
    used = [0] * MAXDEV
    live = 0
    for i in range(SLOTS):
        pid, _pad, start, *per_dev = SLOT.unpack_from(data, SLOTS_AT + i * SLOT.size)
        if pid <= 0 or not processes.alive(host, pid, start):
            continue
        live += 1
        for d, n in enumerate(per_dev):
            used[d] += n
    last = max([d + 1 for d in range(MAXDEV) if caps[d] or used[d] or (refused and refused[d])], default=0)
    return Usage(caps=tuple(caps[:last]), used=tuple(used[:last]), processes=live, refused=tuple(refused[:last]))


def write_config(host: Host, tenant: str, **values: int | str | None) -> None:
    """The library's per-tenant configuration (values of None are left out)."""
    unknown = set(values) - set(CONFIG_KEYS)
    if unknown:
        raise ValueError(f"unknown library settings: {sorted(unknown)}")
    lines = [f"{k}={values[k]}\n" for k in CONFIG_KEYS if values.get(k) is not None]
    host.write_file(tenant_dir(host, tenant) / "config", "".join(lines), mode=0o644)


def remove_config(host: Host, tenant: str) -> None:
    host.remove(tenant_dir(host, tenant) / "config")


def sync_configs(host: Host, wanted: dict[str, dict[str, int | str]], gone: set[str]) -> None:
    """Make the tenants' library configs what ``wanted`` says (rewritten only when they differ) and
    remove those of ``gone``; the running processes read them at their next start."""
    for tenant, values in wanted.items():
        text = "".join(f"{k}={values[k]}\n" for k in CONFIG_KEYS if values.get(k) is not None)
        if host.read_raw_opt(tenant_dir(host, tenant) / "config") != text:
            write_config(host, tenant, **values)
    for tenant in gone - set(wanted):
        remove_config(host, tenant)
