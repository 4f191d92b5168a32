"""The ``namespace`` and ``claim`` labels of a device prepared for a DRA ResourceClaim (the claim
record the plugin writes, prepared here through the kubelet's side of the DRA API)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.exporter.helpers import scrape, value
from tests.k8s import test_dra_plugin as dra
from tests.k8s.apiserver import ApiServer


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(dra.NODE)
    yield server
    server.close()


def test_a_prepared_claims_devices_carry_its_namespace_and_name(short_tmp: Path, api: ApiServer) -> None:
    sim = dra.hgx(short_tmp / "h")
    node = dra.Node(sim, api)
    try:
        offered = node.driver.devices()
        vf, other = sorted(n for n, d in offered.items() if d.kind == "vf")[:2]
        mig = next(n for n, d in sorted(offered.items()) if d.kind == "mig")
        ref = node.add(dra.claim("u-9", "train", vf, mig, ns="team-a"))
        assert node.kubelet.prepare(ref).claims["u-9"].error == ""
        record = node.files("u-9")[1]
    finally:
        node.close()
    fams = scrape(sim)
    ids = {k: offered[k].device.id for k in (vf, other, mig)}
    # pod stays empty: the record names the claim, not a pod (docs/metrics.md)
    assert value(fams, "vgpukit_slice_held", id=ids[vf], kind="vf", namespace="team-a", claim="train", pod="") == 0
    assert value(fams, "vgpukit_slice_held", id=ids[mig], kind="mig", namespace="team-a", claim="train") == 0
    assert value(fams, "vgpukit_slice_held", id=ids[other], namespace="", claim="") == 0

    # read tolerantly: keys the reader does not know, and another record it cannot read
    doc = json.loads(record.read_text())
    doc["future"] = {"pods": ["a"]}
    doc["devices"][0]["extra"] = 1
    record.write_text(json.dumps(doc))
    (record.parent / "u-bad.json").write_text("{not json")
    fams = scrape(sim)
    assert value(fams, "vgpukit_slice_held", id=ids[vf], namespace="team-a", claim="train") == 0
    assert value(fams, "vgpukit_exporter_source_errors", source="inventory") == 0
