"""A simulated PCI function's configuration space: the bytes the kernel shows in its ``config`` file."""

from __future__ import annotations

from typing import Any

# The configuration-space header layout of a function, by class (base, sub): PCI-to-PCI bridges
# (0x0604, and 0x0609 semi-transparent) have type 1, CardBus bridges (0x0607) type 2, every other
# function type 0 (a normal endpoint). A profile model may say otherwise (``header_type: N``).
HEADER_TYPES = {0x0604: 1, 0x0609: 1, 0x0607: 2}
HEADER_TYPE_OFFSET = 0x0E  # the header-type byte (bit 7: multi-function)
CONFIG_BYTES = 256  # conventional configuration space (what the kernel shows a reader without root: 64)


def config_space(spec: dict[str, Any]) -> bytes:
    """A function's configuration space as the kernel shows it in ``config`` (little-endian): ids,
    class code, header type at 0x0e; a normal endpoint's subsystem ids at 0x2c."""
    vendor, device = (int(x, 16) for x in spec["ids"].split(":"))
    class_code = int(str(spec["class"]), 16)
    header = int(spec.get("header_type", HEADER_TYPES.get(class_code >> 8, 0)))
    data = bytearray(CONFIG_BYTES)
    data[0:4] = vendor.to_bytes(2, "little") + device.to_bytes(2, "little")
    data[0x09:0x0C] = class_code.to_bytes(3, "little")
    data[HEADER_TYPE_OFFSET] = header
    if header == 0:
        sub_vendor, sub_device = (int(x, 16) for x in spec.get("subsystem", spec["ids"]).split(":"))
        data[0x2C:0x30] = sub_vendor.to_bytes(2, "little") + sub_device.to_bytes(2, "little")
    return bytes(data)
