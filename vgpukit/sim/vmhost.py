"""The VM host part of a simulated host: libvirt's default network and two images (``vm-host.yaml``).

The images are written from the formats' own specifications (qcow2: QEMU's docs/interop/qcow2.txt;
ISO 9660: ECMA-119), not from what vgpukit reads of them.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from ..inputs import load_yaml

CLUSTER_BITS = 16  # qemu-img's default cluster size, 64 KiB
ISO_SECTOR = 2048


def _qcow2(size: int) -> bytes:
    """An empty qcow2 v3 image of ``size`` bytes: header, refcount table, refcount block, L1 table."""
    cluster = 1 << CLUSTER_BITS
    l2_covers = cluster * (cluster // 8)  # one L2 table maps this many guest bytes
    l1_size = -(-size // l2_covers)
    refcount_table, refcount_block, l1_table = cluster, 2 * cluster, 3 * cluster
    header = struct.pack(
        ">4sIQIIQIIQQIIQQQQII",
        b"QFI\xfb",
        3,  # version
        0,  # backing file offset
        0,  # backing file size
        CLUSTER_BITS,
        size,
        0,  # no encryption
        l1_size,
        l1_table,
        refcount_table,
        1,  # refcount table clusters
        0,  # snapshots
        0,  # snapshots offset
        0,  # incompatible features
        0,  # compatible features
        0,  # autoclear features
        4,  # refcount order: 16-bit refcounts
        104,  # header length
    )
    image = bytearray(4 * cluster)
    image[: len(header)] = header  # the header extension area that follows is zero: its end marker
    struct.pack_into(">Q", image, refcount_table, refcount_block)
    for n in range(4):  # the four clusters in use, one reference each
        struct.pack_into(">H", image, refcount_block + 2 * n, 1)
    return bytes(image)


def _iso() -> bytes:
    """The first 17 sectors of an ISO 9660 image: 16 of system area, then a primary volume descriptor."""
    image = bytearray(17 * ISO_SECTOR)
    image[16 * ISO_SECTOR : 16 * ISO_SECTOR + 7] = b"\x01CD001\x01"
    return bytes(image)


def write_vm_host(root: Path) -> None:
    path = Path(__file__).resolve().parent / "data" / "vm-host.yaml"
    spec: dict[str, Any] = load_yaml(path.read_text(), "vgpukit/sim/data/vm-host.yaml")
    networks = root / "etc/libvirt/qemu/networks"
    networks.mkdir(parents=True, exist_ok=True)
    for name, xml in spec["networks"].items():
        (networks / f"{name}.xml").write_text(xml)
    for image in spec["images"]:
        path = root / image["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_qcow2(int(image["size"])) if image["format"] == "qcow2" else _iso())
