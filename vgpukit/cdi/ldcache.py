"""The dynamic linker's cache (``/etc/ld.so.cache``), read through the host door.

What ``ldconfig -p`` prints: each shared library the linker knows, by soname, with its path. The
NVIDIA driver's user-space libraries are found through it, as nvidia-ctk does (docs/cdi.md).

Format (glibc's ``elf/cache.c``, ``sysdeps/generic/dl-cache.h``): the "new" format,
``glibc-ld.so.cache1.1``, a 48-byte header (magic, ``nlibs``, ``len_strings``, flags, extension
offset) then ``nlibs`` 24-byte entries (``int32 flags; uint32 key, value; uint32 osversion; uint64
hwcap``) whose key (soname) and value (path) are offsets of NUL-terminated strings from the start of
the new-format header. glibc before 2.32 could write the old ``ld.so-1.7.0`` table first (12-byte
entries), the new header following it at the next 8-byte boundary; both layouts are read. Only
64-bit libc6 entries are kept (flags: ELF libc6 ``0x03`` with an architecture byte, e.g. x86-64
``0x0300``, AArch64 ``0x0a00``); 32-bit libraries are not what a 64-bit container runs.

Without a cache (a minimal image, a simulated host that carries none) the *fallback listing* is used:
every ``*.so*`` file in the standard 64-bit library directories (:data:`FALLBACK_DIRS`).
"""

from __future__ import annotations

import struct

import msgspec

from ..host import Host

NEW_MAGIC = b"glibc-ld.so.cache1.1"
OLD_MAGIC = b"ld.so-1.7.0"
NEW_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, extension offset
NEW_ENTRY = struct.Struct("<iIIIQ")
OLD_ENTRY_SIZE = 12
MAX_CACHE_BYTES = 32 * 1024 * 1024
FLAG_TYPE_MASK, FLAG_ELF_LIBC6 = 0x00FF, 0x0003
LIB64_ARCHES = {0x0300, 0x0500, 0x0800, 0x0900, 0x0A00}  # x86-64, ppc64, ia64, s390x, aarch64
FALLBACK_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib")


class CacheEntry(msgspec.Struct, frozen=True):
    soname: str  # libcuda.so.1
    path: str  # /usr/lib/x86_64-linux-gnu/libcuda.so.1 (as the host sees it)


def _cstr(data: bytes, offset: int) -> str | None:
    if not 0 <= offset < len(data):
        return None
    end = data.find(b"\0", offset)
    return data[offset : end if end >= 0 else len(data)].decode("utf-8", "replace")


def parse(data: bytes) -> list[CacheEntry] | None:
    """The 64-bit libc6 entries of a cache file's bytes, or None when it is not one."""
    base = 0
    if data.startswith(OLD_MAGIC):
        if len(data) < 16:
            return None
        (old_n,) = struct.unpack_from("<I", data, 12)
        base = 16 + old_n * OLD_ENTRY_SIZE
        base = (base + 7) & ~7
    if data[base : base + len(NEW_MAGIC)] != NEW_MAGIC or len(data) < base + NEW_HEADER.size:
        return None
    _, nlibs, _, _, _ = NEW_HEADER.unpack_from(data, base)
    table = base + NEW_HEADER.size
    if table + nlibs * NEW_ENTRY.size > len(data):
        return None
    strings = data[base:]
    out = []
    for i in range(nlibs):
        flags, key, value, _, _ = NEW_ENTRY.unpack_from(data, table + i * NEW_ENTRY.size)
        if flags & FLAG_TYPE_MASK != FLAG_ELF_LIBC6 or flags & 0xFF00 not in LIB64_ARCHES:
            continue
        soname, path = _cstr(strings, key), _cstr(strings, value)
        if soname and path and path.startswith("/"):
            out.append(CacheEntry(soname, path))
    return out


def entries(host: Host) -> list[CacheEntry]:
    """The host's linker cache, or the fallback listing when it has none (or an unreadable one)."""
    data = host.read_bytes_opt(host.ld_cache(), MAX_CACHE_BYTES)
    parsed = parse(data) if data else None
    if parsed is not None:
        return parsed
    out = []
    for d in FALLBACK_DIRS:
        for name in sorted(host.listdir(host.path(*d.strip("/").split("/")))):
            if ".so" in name:
                out.append(CacheEntry(name, f"{d}/{name}"))
    return out


def write(items: list[CacheEntry], arch_flags: int = 0x0303) -> bytes:
    """A cache file in the new format holding ``items`` (for hosts that need one built: the simulator
    uses its own writer; this one serves tests and :func:`parse`'s round trip)."""
    strings = bytearray()
    offsets = []
    start = NEW_HEADER.size + len(items) * NEW_ENTRY.size
    for e in items:
        k = start + len(strings)
        strings += e.soname.encode() + b"\0"
        v = start + len(strings)
        strings += e.path.encode() + b"\0"
        offsets.append((k, v))
    out = bytearray(NEW_HEADER.pack(NEW_MAGIC, len(items), len(strings), 0, 0))
    for k, v in offsets:
        out += NEW_ENTRY.pack(arch_flags, k, v, 0, 0)
    return bytes(out + strings)
