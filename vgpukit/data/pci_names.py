"""Human names for PCI vendor/device ids, from ``pci-ids.json`` (extend the file, not the code)."""

from __future__ import annotations

from . import load_json


def vendor_name(vendor: str) -> str:
    entry = load_json("pci-ids.json").get("vendors", {}).get(vendor.lower())
    return str(entry["name"]) if entry else f"vendor {vendor}"


def device_name(vendor: str, device: str) -> str:
    vendors = load_json("pci-ids.json").get("vendors", {})
    entry = vendors.get(vendor.lower())
    if not entry:
        return f"[{vendor}:{device}]"
    dev = (entry.get("devices") or {}).get(device.lower())
    short = entry.get("short", entry["name"])
    return f"{short} {dev}" if dev else f"{short} device {device}"


def known(vendor: str, device: str) -> bool:
    entry = load_json("pci-ids.json").get("vendors", {}).get(vendor.lower())
    return bool(entry and device.lower() in (entry.get("devices") or {}))
