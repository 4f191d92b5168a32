"""Which prepared ResourceClaim each device was prepared for: the claim records the DRA plugin writes
(:mod:`vgpukit.k8s.dra.claims`, ``/run/vgpukit/dra/claims/<uid>.json``), only read, and read tolerantly
(keys the reader does not know are skipped; a record it cannot read is left out) -- for the exporter's
``namespace`` and ``claim`` labels and remediation's claims of a device. DRA device names are mapped back
to the inventory's devices by :func:`.dra_names.named`, the one naming rule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from ..errors import VgpukitError
from ..host import Host
from ..inputs import load_json
from .dra_names import named
from .inventory import Inventory

PREPARED = "prepared"  # the record's state once the claim's devices were answered (claims.PREPARED)


class ClaimRef(msgspec.Struct, frozen=True):
    uid: str
    namespace: str
    name: str


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def record_docs(host: Host) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every claim record on the node as (the claim UID its file is named by, the document), read
    tolerantly: a record that cannot be read (or is gone meanwhile) is skipped, the plugin reports it
    when it reads it."""
    for entry in host.listdir(host.dra_claim_records()):
        if not entry.endswith(".json") or entry.startswith("."):
            continue
        uid = entry[: -len(".json")]
        try:
            path = host.dra_claim_record(uid)
            doc = load_json(host.read_doc(path, "claim record", missing_ok=True) or "null", host.display(path))
        except VgpukitError:
            continue
        if isinstance(doc, dict):
            yield uid, doc


def claim_uid(uid: str, doc: dict[str, Any]) -> str:
    """The claim's UID as its record says, else as its file is named."""
    claim = doc.get("claim")
    return (_text(claim.get("uid")) if isinstance(claim, dict) else "") or uid


def claims_by_device(host: Host) -> dict[str, ClaimRef]:
    """DRA device name -> the claim it is prepared for (a claim still ``preparing`` holds nothing yet)."""
    out: dict[str, ClaimRef] = {}
    for uid, doc in record_docs(host):
        claim = doc.get("claim")
        if not isinstance(claim, dict) or doc.get("state", PREPARED) != PREPARED:
            continue
        ref = ClaimRef(claim_uid(uid, doc), _text(claim.get("namespace")), _text(claim.get("name")))
        devices = doc.get("devices")
        for d in devices if isinstance(devices, list) else []:
            if isinstance(d, dict) and _text(d.get("device")):
                out[d["device"]] = ref
    return out


def claims_by_id(host: Host, inv: Inventory) -> dict[str, ClaimRef]:
    """The inventory's device id (BDF, mdev UUID, MIG UUID) -> the claim it is prepared for."""
    by_name = claims_by_device(host)
    if not by_name:
        return {}
    return {d.device.id: by_name[name] for name, d in named(inv).items() if name in by_name}
