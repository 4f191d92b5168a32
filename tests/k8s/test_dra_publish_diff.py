"""The publisher writes only the slices whose content changed: one slice of several changed is updated at the
pool's generation (as the upstream ResourceSlice controller does), the others are not written again; a
change of more, or of the pool's slices, writes every slice at a new generation. Counted as the API-server
stand-in's requests (tests/k8s/apiserver.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.apiserver import SLICES, ApiServer
from vgpukit.k8s.dra.api import resource_api
from vgpukit.k8s.dra.slices import Publisher

NODE = "node-1"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


def device(i: int, driver: str = "vfio-pci") -> dict[str, Any]:
    return {
        "name": f"vf-0000-10-{i // 8:02x}-{i % 8}",
        "attributes": {"kind": {"string": "vf"}, "driver": {"string": driver}},
    }


def calls(api: ApiServer, since: int) -> dict[str, int]:
    """Requests on ResourceSlices since request ``since``, by method (dry runs aside)."""
    out: dict[str, int] = {}
    for method, path, query, _type in api.requests[since:]:
        if path.startswith(SLICES) and "dryRun" not in query:
            out[method] = out.get(method, 0) + 1
    return out


def generations(api: ApiServer) -> set[int]:
    return {int(s["spec"]["pool"]["generation"]) for s in api.slices.values()}


def test_only_the_slice_whose_devices_changed_is_written(tmp_path: Path, api: ApiServer) -> None:
    pub = Publisher(resource_api(str(api.kubeconfig(tmp_path / "kubeconfig"))), NODE, "off")
    entries = [device(i) for i in range(300)]  # 128 a slice: 3 slices
    assert pub.publish(entries) is not None
    assert len(api.slices) == 3 and generations(api) == {1}
    start = len(api.requests)

    entries[200] = device(200, "mlx5_core")  # a driver bound: one device of the second slice
    assert pub.publish(entries) is not None
    assert calls(api, start) == {"PUT": 1}  # that slice only, and no listing: the publisher knows what it wrote
    assert generations(api) == {1} and api.pool_problems() == []
    assert any(d == entries[200] for s in api.slices.values() for d in s["spec"]["devices"])

    start = len(api.requests)
    assert pub.publish([*entries, device(300)]) is not None  # a VF more, at the end: the last slice
    assert calls(api, start) == {"PUT": 1} and generations(api) == {1} and api.pool_problems() == []

    start = len(api.requests)
    more = entries + [device(i) for i in range(300, 420)]  # a fourth slice: the pool changes
    assert pub.publish(more) is not None
    assert calls(api, start) == {"PUT": 3, "POST": 1} and generations(api) == {2} and api.pool_problems() == []

    start = len(api.requests)
    more[0], more[399] = device(0, "none"), device(399, "none")  # two slices change: a new generation, all
    assert pub.publish(more) is not None
    assert calls(api, start) == {"PUT": 4} and generations(api) == {3} and api.pool_problems() == []
    assert pub.publish(more) is None and calls(api, start) == {"PUT": 4}  # nothing changed: nothing written


def test_a_failed_write_is_followed_by_a_listing(tmp_path: Path, api: ApiServer) -> None:
    pub = Publisher(resource_api(str(api.kubeconfig(tmp_path / "kubeconfig"))), NODE, "off")
    entries = [device(i) for i in range(200)]
    pub.publish(entries)
    with api.changed:  # someone else deletes a slice: the publisher's knowledge is stale
        api.slices.pop(sorted(api.slices)[-1])
    entries[150] = device(150, "none")
    with pytest.raises(Exception, match=r"404|Not Found"):
        pub.publish(entries)
    start = len(api.requests)
    assert pub.publish(entries) is not None  # listed again: the missing slice created, a new generation
    assert calls(api, start).get("GET") == 1 and len(api.slices) == 2 and api.pool_problems() == []
