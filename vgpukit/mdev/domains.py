"""Which libvirt domains have an mdev assigned (optional: only when libvirt is importable and reachable).

libvirt is reached through the facade (:mod:`vgpukit.libvirt.connection`) and domain XML read with
the one model (:mod:`vgpukit.libvirt.domain`, live and inactive definitions); when libvirt-python or
the daemon is missing, the lookup is skipped and commands show only what /proc says.
"""

from __future__ import annotations

from typing import Any

from ..errors import VgpukitError
from ..libvirt.connection import connect
from ..libvirt.domain import DomainSource
from ..libvirt.domain import assignments as all_assignments
from ..logs import logger

log = logger("vgpukit.mdev")


def assignments(source: DomainSource) -> dict[str, list[dict[str, Any]]]:
    """mdev UUID -> [{"name": domain, "active": bool}] for every domain that lists it."""
    return {
        key.removeprefix("mdev:"): [{"name": a.domain, "active": a.active} for a in held]
        for key, held in all_assignments(source).items()
        if key.startswith("mdev:")
    }


def lookup(uri: str) -> tuple[dict[str, list[dict[str, Any]]], str | None]:
    """(assignments, uri) from libvirt at ``uri``, or ({}, None) when libvirt is not reachable."""
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


def running_users(uri: str) -> dict[str, list[str]]:
    """mdev UUID -> the *running* domains whose definition names it (a defined but stopped domain does
    not use the device); {} when libvirt is not reachable."""
    found, _ = lookup(uri)
    return {u: [d["name"] for d in doms if d["active"]] for u, doms in found.items()}
