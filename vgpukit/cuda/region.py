"""Read and write what libvgpukit-cuda (contrib/cuda) shares with vgpukit, under /run/vgpukit/cuda/TENANT.

* ``config``: ``key=value`` lines the library reads at start (memory, inflight, inflight_ms, gpu, and
  for memory QoS memory_burst, class, watermark, reclaim_ms).
* ``usage``: the library's shared accounting region (layout in contrib/cuda/region.c): per device the
  cap last configured and, per process slot, the bytes it holds; from version 2 on, the allocation
  attempts the cap refused; from version 3 on, the burst, the evictable (unified memory) bytes and those
  the tenant moved to the host, and per process the eviction request it last complied with.
  A slot of a dead process (no such pid, or the pid now belongs to a process
  started at another time) is not counted here, as the library reclaims it at its next allocation.
  Versions only append: any version's first bytes read as version 1's, so a version 1 region (an older
  library) reads with no refusals counted, and a later one as far as this reader knows it.
* ``memreq``: the QoS daemon's eviction request to the tenant's processes (``seq=N``, ``evict=BYTES``:
  how much of its unified memory the tenant should keep on the host), replaced atomically; the
  library's mover thread watches it (docs/cuda.md, "Memory QoS").
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import msgspec

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
# version 3: u64 burst[MAXDEV], um[MAXDEV], evicted[MAXDEV]; u32 cls, pad; u64 slot_um[SLOTS][MAXDEV],
# slot_evicted[SLOTS][MAXDEV]; u32 slot_ack[SLOTS]
BURST_AT, UM_AT, EVICTED_AT, CLS_AT = SIZE_V2, SIZE_V2 + 256, SIZE_V2 + 512, SIZE_V2 + 768
SLOT_UM_AT = CLS_AT + 8
SLOT_EVICTED_AT = SLOT_UM_AT + SLOTS * MAXDEV * 8
SLOT_ACK_AT = SLOT_EVICTED_AT + SLOTS * MAXDEV * 8
SIZE_V3 = SLOT_ACK_AT + SLOTS * 4
CONFIG_KEYS = ("memory", "memory_burst", "class", "watermark", "reclaim_ms", "inflight", "inflight_ms", "gpu")
CLASSES = {1: "online", 2: "offline"}


class Usage(msgspec.Struct, frozen=True):
    caps: tuple[int, ...]  # per device, 0 = uncapped
    used: tuple[int, ...]  # per device, bytes held by live processes
    processes: int
    refused: tuple[int, ...] = ()  # per device, allocation attempts the cap refused (a version 1 region: none)
    # version 3 (memory QoS), per device: burst cap, evictable bytes (unified memory), of those on the host
    bursts: tuple[int, ...] = ()
    evictable: tuple[int, ...] = ()
    evicted: tuple[int, ...] = ()
    cls: str | None = None  # the class the library runs as (None: not set, or before version 3)
    pids: tuple[int, ...] = ()  # the live processes of the tenant
    acks: tuple[int, ...] = ()  # per live process: the eviction request it last complied with

    @property
    def cap(self) -> int:
        return max(self.caps, default=0)

    @property
    def peak_used(self) -> int:
        """The most any one device has in use (what one number per tenant shows)."""
        return max(self.used, default=0)

    @property
    def resident(self) -> int:
        """Bytes the tenant holds on its devices (all it allocated less what it moved to the host)."""
        return sum(self.used) - sum(self.evicted)

    @property
    def moved_out(self) -> int:
        return sum(self.evicted)

    @property
    def evictable_resident(self) -> int:
        """Unified memory still on the devices: what the tenant could move to the host."""
        return sum(self.evictable) - sum(self.evicted)

    @property
    def pinned(self) -> int:
        """What cannot be moved (plain device memory): only a suspension frees it."""
        return sum(self.used) - sum(self.evictable)


def tenant_dir(host: Host, tenant: str) -> Path:
    return host.state_dir("cuda", check_name(tenant, "tenant"))


def read_usage(host: Host, tenant: str) -> Usage | None:
    """The tenant's usage, or None when no process of it ever ran (or the file is not a region)."""
    data = host.read_bytes_opt(tenant_dir(host, tenant) / "usage", SIZE_V3)
    if data is None or len(data) < SIZE:
        return None
    magic, version, maxdev, slots = HEADER.unpack_from(data)
    if (magic, maxdev, slots) != (MAGIC, MAXDEV, SLOTS) or version < 1:
        return None
    caps = struct.unpack_from(f"<{MAXDEV}Q", data, CAPS_AT)
    refused = struct.unpack_from(f"<{MAXDEV}Q", data, REFUSED_AT) if version >= 2 and len(data) >= SIZE_V2 else ()
    v3 = version >= 3 and len(data) >= SIZE_V3
    used, um, evicted = [0] * MAXDEV, [0] * MAXDEV, [0] * MAXDEV
    pids: list[int] = []
    acks: list[int] = []
    for i in range(SLOTS):
        pid, _pad, start, *per_dev = SLOT.unpack_from(data, SLOTS_AT + i * SLOT.size)
        if pid <= 0 or not processes.alive(host, pid, start):
            continue
        pids.append(pid)
        for d, n in enumerate(per_dev):
            used[d] += n
        if v3:
            acks.append(struct.unpack_from("<I", data, SLOT_ACK_AT + 4 * i)[0])
            for d, n in enumerate(struct.unpack_from(f"<{MAXDEV}Q", data, SLOT_UM_AT + i * MAXDEV * 8)):
                um[d] += n
            for d, n in enumerate(struct.unpack_from(f"<{MAXDEV}Q", data, SLOT_EVICTED_AT + i * MAXDEV * 8)):
                evicted[d] += n
    bursts = struct.unpack_from(f"<{MAXDEV}Q", data, BURST_AT) if v3 else (0,) * MAXDEV
    last = max([d + 1 for d in range(MAXDEV) if caps[d] or used[d] or (refused and refused[d]) or bursts[d]], default=0)

    def cut(xs: Sequence[int]) -> tuple[int, ...]:
        return tuple(xs[:last]) if v3 else ()

    return Usage(
        caps=tuple(caps[:last]),
        used=tuple(used[:last]),
        processes=len(pids),
        refused=tuple(refused[:last]),
        bursts=cut(bursts),
        evictable=cut(um),
        evicted=cut(evicted),
        cls=CLASSES.get(struct.unpack_from("<I", data, CLS_AT)[0]) if v3 else None,
        pids=tuple(pids),
        acks=tuple(acks),
    )


def write_request(host: Host, tenant: str, seq: int, evict: int) -> None:
    """Ask the tenant's processes to keep ``evict`` bytes of their unified memory on the host (0: bring it
    all back); ``seq`` numbers the request (the processes acknowledge it in the region)."""
    host.write_file(tenant_dir(host, tenant) / "memreq", f"seq={seq}\nevict={evict}\n", mode=0o644)


def read_request(host: Host, tenant: str) -> tuple[int, int]:
    """The request in force (seq, evict); (0, 0) when there is none."""
    text = host.read_raw_opt(tenant_dir(host, tenant) / "memreq") or ""
    got = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    seq, evict = got.get("seq", "0"), got.get("evict", "0")
    return (int(seq), int(evict)) if seq.isdigit() and evict.isdigit() else (0, 0)


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
