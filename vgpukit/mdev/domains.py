"""Which libvirt domains have an mdev assigned (optional: only when libvirt is importable and reachable).

libvirt is reached through the attach facade (``vgpukit.attach.libvirt_facade``); when that module,
libvirt-python or the daemon is missing, the lookup is skipped and commands show only what /proc says.
"""

from __future__ import annotations

import importlib
import logging
import xml.etree.ElementTree as ET
from typing import Any, Protocol

log = logging.getLogger("vgpukit.mdev")


class DomainSource(Protocol):
    def domains(self) -> list[Any]: ...  # items with .name, .active

    def xml(self, name: str, inactive: bool = False) -> str: ...


def mdev_uuids_in_xml(xml: str) -> list[str]:
    """UUIDs of ``<hostdev type='mdev'><source><address uuid='...'/>`` in a domain's XML."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return []
    out = []
    for hd in root.iter("hostdev"):
        if hd.get("type") != "mdev":
            continue
        addr = hd.find("source/address")
        if addr is not None and addr.get("uuid"):
            out.append(addr.get("uuid", "").lower())
    return out


def assignments(source: DomainSource) -> dict[str, list[dict[str, Any]]]:
    """mdev UUID -> [{"name": domain, "active": bool}] for every domain that lists it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for dom in source.domains():
        for uid in mdev_uuids_in_xml(source.xml(dom.name)):
            out.setdefault(uid, []).append({"name": dom.name, "active": bool(dom.active)})
    return out


def lookup(uri: str) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """(assignments, uri) from libvirt at ``uri``, or ({}, None) when libvirt is not reachable."""
    try:  # the facade lives in the attach package; looked up by name so this works without it
        connect = importlib.import_module("vgpukit.attach.libvirt_facade").connect
    except ImportError:
        return {}, None
    from ..errors import VgpukitError

    try:
        conn = connect(uri)
    except VgpukitError as exc:
        log.debug("libvirt not reachable: %s", exc)
        return {}, None
    try:
        return assignments(conn), uri
    except VgpukitError as exc:
        log.debug("libvirt lookup failed: %s", exc)
        return {}, None
    finally:
        conn.close()
