"""Host facts a VM definition depends on: UEFI firmware, NUMA placement, hugepages.

Firmware (decided in this order, see docs/attach.md):

1. QEMU firmware descriptors (``/usr/share/qemu/firmware/*.json``, shipped by Debian's ``ovmf`` and
   Fedora's ``edk2-ovmf``) listing the ``uefi`` interface -> ``<os firmware='efi'>`` and libvirt
   picks the image itself;
2. else the first OVMF code image from ``vgpukit/data/ovmf.yaml`` that exists (``/usr/share/OVMF``,
   ``/usr/share/edk2/ovmf`` ...) -> an explicit pflash loader with its VARS template;
3. else BIOS, and ``render domain`` warns.
"""

from __future__ import annotations

import msgspec

from ..data import load_yaml
from ..errors import InvalidInput, NotFound
from ..host import Host
from ..inputs import load_json
from .model import Firmware, GuestPlacement

MAX_DESCRIPTOR_BYTES = 64 * 1024


def detect_firmware(host: Host) -> Firmware:
    desc_dir = host.path("usr", "share", "qemu", "firmware")
    for name in host.listdir(desc_dir):
        if not name.endswith(".json"):
            continue
        path = desc_dir / name
        text = host.read_doc(path, "QEMU firmware descriptor", MAX_DESCRIPTOR_BYTES, missing_ok=True)
        try:
            doc = load_json(text or "null", host.display(path))
        except InvalidInput:
            continue  # not a descriptor: another package's business, skipped like QEMU does
        types = doc.get("interface-types") if isinstance(doc, dict) else None
        if isinstance(types, list) and "uefi" in types:
            return Firmware(kind="efi")
    for pair in load_yaml("ovmf.yaml")["images"]:
        code = host.path(*pair["code"].strip("/").split("/"))
        if host.exists(code):
            vars_ = host.path(*pair["vars"].strip("/").split("/"))
            return Firmware(
                kind="pflash",
                loader=host.display(code),
                nvram_template=host.display(vars_) if host.exists(vars_) else None,
            )
    return Firmware(kind="bios")


def firmware_for(host: Host, choice: str) -> Firmware:
    """``auto`` (detect), ``efi`` (must exist on the host), or ``bios``."""
    if choice == "bios":
        return Firmware(kind="bios")
    found = detect_firmware(host)
    if choice == "efi" and found.kind == "bios":
        raise NotFound(
            "no UEFI firmware on this host (no QEMU firmware descriptor, no OVMF image)",
            hint="apt-get install ovmf (Debian) or dnf install edk2-ovmf, or use --firmware bios",
        )
    return found


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8,10-11`` -> ``[0, 1, 2, 3, 8, 10, 11]``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                cpus.extend(range(int(lo), int(hi) + 1))
            else:
                cpus.append(int(part))
        except ValueError as exc:
            raise InvalidInput(f"cannot parse CPU list {text!r}", value=text) from exc
    return cpus


class NodeInfo(msgspec.Struct, frozen=True):
    node: int
    cpulist: str
    cpus: tuple[int, ...]


def read_node(host: Host, node: int) -> NodeInfo | None:
    text = host.read_opt(host.numa_node(node, "cpulist"))
    if not text:
        return None
    return NodeInfo(node, text, tuple(parse_cpulist(text)))


def placement_for(
    host: Host, numa_nodes: list[int | None], vcpus: int, pin: bool = True
) -> tuple[GuestPlacement, list[str]]:
    """Placement on the NUMA node the devices sit on, plus warnings to show the user.

    vCPUs are pinned one-to-one onto the node's first CPUs when the node has enough of them;
    otherwise they float over the whole node (``<vcpu cpuset=>``).
    """
    warnings: list[str] = []
    known = [n for n in numa_nodes if n is not None]
    if not known:
        return GuestPlacement(), warnings
    node = known[0]
    if len(set(known)) > 1:
        warnings.append(f"devices sit on NUMA nodes {sorted(set(known))}; placing the VM on node {node}")
    info = read_node(host, node)
    if info is None:
        warnings.append(f"NUMA node {node} has no cpulist; not pinning")
        return GuestPlacement(), warnings
    pins: tuple[tuple[int, int], ...] = ()
    if pin and vcpus <= len(info.cpus):
        pins = tuple((v, info.cpus[v]) for v in range(vcpus))
    elif pin:
        warnings.append(f"{vcpus} vCPUs > {len(info.cpus)} CPUs on node {node}: vCPUs float over the node")
    return GuestPlacement(numa_node=node, cpuset=info.cpulist, pins=pins), warnings


def hugepage_warnings(host: Host, node: int | None, memory_mib: int) -> list[str]:
    """Say so when the node (or host) lacks free hugepages for the guest's memory."""
    base = host.numa_node(node, "hugepages") if node is not None else host.sys("kernel", "mm", "hugepages")
    free_kib = 0
    for size in host.listdir(base):
        kib = int(size.removeprefix("hugepages-").removesuffix("kB") or 0)
        free_kib += kib * (host.read_int(base / size / "free_hugepages", 0) or 0)
    need = memory_mib * 1024
    if free_kib < need:
        where = f"NUMA node {node}" if node is not None else "the host"
        return [f"--hugepages: {where} has {free_kib // 1024} MiB of free hugepages, the VM needs {memory_mib} MiB"]
    return []
