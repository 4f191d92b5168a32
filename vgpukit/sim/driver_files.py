"""The simulated NVIDIA driver's user space: what a GPU host's driver package installs.

The simulator's own facts (never the product's lookup code): a driver version, its libraries in the
Debian multiarch directory with their soname links, the linker cache listing them (glibc's
``glibc-ld.so.cache1.1`` format, written here), the driver's binaries, GSP firmware, and an
``nvidia-cdi-hook`` that records each call in ``/run/nvidia-cdi-hook.log`` and succeeds (a container
engine runs it for the GPU specs; the real hook edits the container's linker cache).
"""

from __future__ import annotations

import struct
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tree import SimTree

VERSION = "535.104.05"
LIBDIR = "usr/lib/x86_64-linux-gnu"
LIBRARIES = {  # library -> soname
    "libcuda": "libcuda.so.1",
    "libnvidia-ml": "libnvidia-ml.so.1",
    "libnvidia-ptxjitcompiler": "libnvidia-ptxjitcompiler.so.1",
    "libcudadebugger": "libcudadebugger.so.1",
    "libnvidia-nvvm": "libnvidia-nvvm.so.4",
    "libnvidia-opencl": "libnvidia-opencl.so.1",
    "libnvidia-cfg": "libnvidia-cfg.so.1",
    "libnvidia-allocator": "libnvidia-allocator.so.1",
}
VDPAU = "libvdpau_nvidia"
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
HOOK = """#!/bin/sh
# simulated nvidia-cdi-hook: records its arguments, reads the OCI state from stdin, succeeds
cat >/dev/null
echo "$*" >> "$(dirname "$0")/../../run/nvidia-cdi-hook.log"
"""
MPS_CONTROL = """#!/bin/sh
# simulated nvidia-cuda-mps-control (vgpukit/sim/mps_control.py)
exec {python} -m vgpukit.sim.mps_control "$@"
"""
SMI = """#!/bin/sh
# simulated nvidia-smi (vgpukit/sim/nvidia_smi.py): acts on the simulated host in VGPUKIT_ROOT
exec {python} -m vgpukit.sim.nvidia_smi "$@"
"""
X8664_LIBC6 = 0x0303  # FLAG_ELF_LIBC6 | FLAG_X8664_LIB64


def ld_cache(entries: list[tuple[str, str]]) -> bytes:
    """glibc's new-format cache: 48-byte header, 24-byte entries, strings (offsets from the start)."""
    strings = bytearray()
    start = 48 + 24 * len(entries)
    table = bytearray()
    for soname, path in entries:
        key = start + len(strings)
        strings += soname.encode() + b"\0"
        value = start + len(strings)
        strings += path.encode() + b"\0"
        table += struct.pack("<iIIIQ", X8664_LIBC6, key, value, 0, 0)
    header = struct.pack("<20sIIB3xI12x", b"glibc-ld.so.cache1.1", len(entries), len(strings), 0, 0)
    return header + bytes(table) + bytes(strings)


def write_driver_files(tree: SimTree) -> None:
    root = tree.root
    lib = root / LIBDIR
    tree.mkdir(lib / "vdpau")
    cache = []
    for name, soname in LIBRARIES.items():
        real = f"{name}.so.{VERSION}"
        (lib / real).write_text("simulated NVIDIA driver library\n")
        (lib / soname).symlink_to(real)
        cache.append((soname, f"/{LIBDIR}/{soname}"))
    (lib / "vdpau" / f"{VDPAU}.so.{VERSION}").write_text("simulated NVIDIA driver library\n")
    tree.mkdir(root / "etc")
    (root / "etc" / "ld.so.cache").write_bytes(ld_cache(sorted(cache, reverse=True)))
    bindir = root / "usr" / "bin"
    tree.mkdir(bindir)
    for b in BINARIES:
        (bindir / b).write_text(f"#!/bin/sh\necho 'simulated {b}'\n")
        (bindir / b).chmod(0o755)
    # the MPS control daemon's command interface (vgpukit/sim/mps_control.py), by this Python
    (bindir / "nvidia-cuda-mps-control").write_text(MPS_CONTROL.format(python=sys.executable))
    (bindir / "nvidia-smi").write_text(SMI.format(python=sys.executable))  # resets, persistence mode
    (bindir / "nvidia-cdi-hook").write_text(HOOK)
    (bindir / "nvidia-cdi-hook").chmod(0o755)
    firmware = root / "lib" / "firmware" / "nvidia" / VERSION
    tree.mkdir(firmware)
    for f in FIRMWARE:
        (firmware / f).write_text("simulated GSP firmware\n")
