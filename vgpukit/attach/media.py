"""What a VM boots from and talks through: ``render domain``'s ``--disk``, ``--cdrom`` and ``--network``.

Disk images are paths on the host the VM runs on, read through the host door (under ``--root`` /
``--sim`` they are looked up inside that root). A file image's format is read from its first bytes
(the signatures QEMU's block drivers probe: ``vgpukit/data/disk-formats.yaml``) and written into the
XML, so libvirt never probes; a file matching none is raw, and so is a block device (never probed:
its first bytes are the guest's). ``PATH,format=FMT`` says the format instead (a raw image whose
guest wrote an image header into its first sector must stay raw). docs/attach.md, "render domain".

Networks follow virt-install's spellings: ``NAME`` or ``network=NAME`` (a libvirt network),
``bridge=BR`` (a host bridge), ``none``. Whether the network is defined (``/etc/libvirt/qemu/networks``)
or the bridge exists (``/sys/class/net/BR/bridge``) is checked offline: a warning, as starting the VM
would fail.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import msgspec

from ..data import load_yaml
from ..errors import InvalidInput, NotFound
from ..host import Host
from .model import Disk, Nic

HEADER_BYTES = 64 * 1024  # the header and its extensions sit in the first cluster (64 KiB by default)
QCOW2_BACKING_FORMAT_EXT = 0xE2792ACA  # the qcow2 header extension naming the backing file's format
# libvirt's network names and Linux interface names: no '/', no white space, no quotes
_NET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}\Z", re.ASCII)
_BRIDGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,14}\Z", re.ASCII)


def formats() -> tuple[str, ...]:
    """The formats libvirt takes in ``<driver type=...>`` among those recognised (what ``format=`` takes)."""
    sigs = load_yaml("disk-formats.yaml")["signatures"]
    return ("raw", *dict.fromkeys(s["format"] for s in sigs if s.get("libvirt", True)), "qcow")


def image_format(header: bytes) -> str:
    """The format of an image file whose first bytes are ``header`` (``raw`` when none matches)."""
    for sig in load_yaml("disk-formats.yaml")["signatures"]:
        magic = bytes.fromhex(sig["hex"])
        if header[sig["offset"] : sig["offset"] + len(magic)] == magic:
            if sig["format"] == "qcow2" and len(header) >= 8:
                version = struct.unpack_from(">I", header, 4)[0]
                return "qcow" if version == 1 else "qcow2"
            return str(sig["format"])
    return "raw"


def qcow2_backing(header: bytes) -> tuple[str | None, bool]:
    """(backing file name, whether its format is recorded) of a qcow2 header; (None, True) without one."""
    if len(header) < 72:
        return None, True
    version, offset, size = struct.unpack_from(">IQI", header, 4)
    if offset == 0 or size == 0:
        return None, True
    name = header[offset : offset + size].decode(errors="replace") if offset + size <= len(header) else "?"
    ext = struct.unpack_from(">I", header, 100)[0] if version >= 3 and len(header) >= 104 else 72
    while ext + 8 <= len(header):
        kind, length = struct.unpack_from(">II", header, ext)
        if kind == 0:
            break
        if kind == QCOW2_BACKING_FORMAT_EXT:
            return name, True
        ext += 8 + (length + 7) // 8 * 8
    return name, False


class DiskRequest(msgspec.Struct, frozen=True):
    """One ``--disk`` value: ``PATH`` or ``[path=]PATH[,format=FMT]`` (virt-install's spelling)."""

    path: str
    format: str | None = None

    @classmethod
    def parse(cls, text: str) -> DiskRequest:
        parts = text.split(",")
        path = parts[0].removeprefix("path=")
        fmt = None
        for opt in parts[1:]:
            key, _, value = opt.partition("=")
            if key != "format" or value not in formats():
                raise InvalidInput(
                    f"--disk {text!r}: expected PATH or PATH,format=FMT (FMT: {', '.join(formats())})", value=text
                )
            fmt = value
        if not path:
            raise InvalidInput("--disk needs a path", value=text)
        return cls(path, fmt)


def _host_path(host: Host, path: str) -> tuple[str, Path]:
    """The path as the VM's XML names it (absolute, as virt-install makes it) and where vgpukit reads it."""
    shown = os.path.normpath(os.path.join(os.getcwd(), path))
    return shown, host.path(shown.lstrip("/"))


def disk(host: Host, request: DiskRequest, target: str, cdrom: bool = False) -> tuple[Disk, list[str]]:
    """The disk element's record for one image (or CD-ROM ISO), and what is worth a warning."""
    what = "CD-ROM image" if cdrom else "disk image"
    shown, where = _host_path(host, request.path)
    device, bus = ("cdrom", "sata") if cdrom else ("disk", "virtio")
    if host.is_block_device(where):
        return Disk(shown, request.format or "raw", target, device, "block", bus), []
    if not host.is_file(where):
        hint = None if cdrom else f"create it: qemu-img create -f qcow2 {shown} 20G"
        if host.exists(where):
            raise InvalidInput(f"{what} {shown} is not a regular file or a block device", path=shown)
        raise NotFound(f"{what} {shown} does not exist", path=shown, hint=hint)
    header = host.read_bytes_opt(where, HEADER_BYTES) or b""
    found = image_format(header)
    fmt = request.format or found
    warnings: list[str] = []
    if fmt not in formats():
        raise InvalidInput(
            f"{what} {shown} is a {fmt} image, which libvirt does not take",
            path=shown,
            hint=f"convert it: qemu-img convert -O qcow2 {shown} {os.path.splitext(shown)[0]}.qcow2",
        )
    if cdrom and found != "raw":  # an ISO has no header of its own: any other is an image, not a CD
        warnings.append(f"{shown} is a {found} image, not an ISO: the CD-ROM reads it as raw bytes (give it as --disk)")
    if request.format not in (None, "raw") and request.format != found:
        raise InvalidInput(f"{what} {shown} is not {request.format} (its header says {found})", path=shown)
    if fmt == "qcow2":
        backing, recorded = qcow2_backing(header)
        if backing is not None and not recorded:
            warnings.append(
                f"{shown} has a backing file ({backing}) whose format the image does not record: libvirt"
                f" refuses to start it (qemu-img rebase -u -F qcow2 -b {backing} {shown} records it)"
            )
        elif backing is not None:
            warnings.append(f"{shown} is an overlay of {backing}: the VM reads that file too")
    return Disk(shown, fmt, target, device, "file", bus), warnings


def disks(host: Host, requests: list[str], cdrom: str | None) -> tuple[tuple[Disk, ...], list[str]]:
    """Every ``--disk`` (``vda``, ``vdb``... on virtio) and the ``--cdrom`` (``sda`` on SATA)."""
    out: list[Disk] = []
    warnings: list[str] = []
    for i, text in enumerate(requests):
        if i >= 26:
            raise InvalidInput("at most 26 --disk images", value=len(requests))
        d, w = disk(host, DiskRequest.parse(text), f"vd{chr(ord('a') + i)}")
        out.append(d)
        warnings += w
    if cdrom is not None:
        d, w = disk(host, DiskRequest(cdrom, "raw"), "sda", cdrom=True)
        out.append(d)
        warnings += w
    if not out:
        warnings.append("the VM has no --disk and no --cdrom: it has nothing to boot from")
    return tuple(out), warnings


def nic(text: str) -> Nic | None:
    """One ``--network`` value as virt-install spells it; None for ``none``."""
    if text == "none":
        return None
    kind, sep, name = text.partition("=")
    if not sep:
        kind, name = "network", text
    pattern = _BRIDGE if kind == "bridge" else _NET_NAME
    if kind not in ("network", "bridge") or not pattern.match(name):
        raise InvalidInput(f"--network {text!r}: expected NAME, network=NAME, bridge=BR or none", value=text)
    return Nic(kind, name)


def nics(host: Host, networks: list[str], bridges: list[str], no_network: bool) -> tuple[tuple[Nic, ...], list[str]]:
    """The NICs (``network=default`` when nothing is said) and warnings for a network or bridge not there."""
    given = [*networks, *(f"bridge={b}" for b in bridges)]
    if no_network and given:
        raise InvalidInput("--no-network and --network/--bridge contradict each other")
    if no_network or "none" in given:
        if len(given) > 1:
            raise InvalidInput("--network none and another --network/--bridge contradict each other")
        return (), []
    out = tuple(n for n in (nic(t) for t in (given or ["default"])) if n is not None)
    warnings: list[str] = []
    for n in out:
        if n.kind == "network" and not host.exists(host.libvirt_network(n.source)):
            warnings.append(
                f"libvirt network {n.source!r} is not defined on this host (virsh net-list --all):"
                " define it, or use --bridge BR or --no-network"
            )
        if n.kind == "bridge" and not host.exists(host.net_device(n.source, "bridge")):
            warnings.append(f"bridge {n.source} does not exist on this host (ip link add {n.source} type bridge)")
    return out, warnings
