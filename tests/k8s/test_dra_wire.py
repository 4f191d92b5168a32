"""A ResourceSlice written without the Kubernetes client's models (vgpukit/k8s/dra/wire.py) reaches the API
server as the very request the client would send: method, URL, headers and body bytes, for creates and
replaces of every slice the plugin publishes on several hosts and releases (partitionable parts, counter
sets, tainted and shared devices); a body the models would not take goes through the client, which refuses it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.conftest import invoke, make_sim
from vgpukit.k8s.dra import wire

LIBRARY = "usr/lib/vgpukit/libvgpukit-cuda.so"
SENT: list[tuple[str, str, dict[str, str], bytes]] = []


class _Answer:
    def __init__(self, status: int, data: bytes) -> None:
        self.status, self.reason, self.data, self.headers = status, "x", data, {}

    def getheaders(self) -> dict[str, str]:
        return {}

    def getheader(self, name: str, default: Any = None) -> Any:
        return default


def _api(status: int = 201) -> Any:
    """A ResourceV1Api whose HTTP layer records each request (the body as the client encodes it) and answers
    ``status`` with the body echoed."""
    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:6443"
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    api_client = client.ApiClient(cfg)
    pool = api_client.rest_client.pool_manager

    def request(method: str, url: str, body: Any = None, headers: Any = None, **_kw: Any) -> _Answer:
        SENT.append((method, url, dict(headers or {}), body if isinstance(body, bytes) else str(body).encode()))
        return _Answer(status, body.encode() if isinstance(body, str) else body or b"{}")

    pool.request = request
    return client.ResourceV1Api(api_client)


def _both(doc: dict[str, Any], name: str | None) -> tuple[Any, Any]:
    SENT.clear()
    api = _api()
    if name is None:
        api.create_resource_slice(doc, _preload_content=False, _request_timeout=wire.API_TIMEOUT)
    else:
        api.replace_resource_slice(name, doc, _preload_content=False, _request_timeout=wire.API_TIMEOUT)
    stored = wire.write(_api(), wire.Order(), doc, name)
    assert len(SENT) == 2
    assert stored == json.loads(SENT[1][3])  # the answer, parsed
    return SENT[0], SENT[1]


def _slices(tmp_path: Path, profile: str, setup: list[list[str]], *args: str) -> list[dict[str, Any]]:
    sim = make_sim(tmp_path / profile, profile)
    for cmd in setup:
        if cmd == ["library"]:  # the CUDA interception library installed: GPUs can be shared by capacity
            (sim / LIBRARY).parent.mkdir(parents=True, exist_ok=True)
            (sim / LIBRARY).write_text("a stand-in\n")
            continue
        assert invoke(sim, *cmd).exit_code == 0, cmd
    r = invoke(sim, "k8s", "resources", "--node", "node-1", "--json", *args)
    assert r.exit_code in (0, 4, 6), r.output  # 6: a lost GPU not read (the rest shown)
    docs: list[dict[str, Any]] = json.loads(r.stdout)["resourceSlices"]
    assert docs
    return docs


CASES = [
    ("hgx-a100", [["sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci"], ["sim", "fault", "lost", "gpu5"]],
     ["--kubernetes", "1.37"]),
    ("hgx-a100", [["partition", "gpu0", "--mig", "3g.20gb"]], ["--kubernetes", "1.34"]),
    ("hgx-a100", [["library"], ["partition", "gpu1", "--mig", "3g.20gb,3g.20gb"]],
     ["--kubernetes", "1.36", "--share-by-capacity", "gpu,mig"]),
    ("hgx-a100", [["partition", "gpu2", "--mig", "3g.20gb"]], ["--kubernetes", "1.35"]),
    ("t4-mdev", [], ["--kubernetes", "1.37"]),
]  # fmt: skip


@pytest.mark.parametrize(("profile", "setup", "args"), CASES)
def test_a_slice_is_sent_as_the_client_sends_it(
    short_tmp: Path,
    profile: str,
    setup: list[list[str]],
    args: list[str],
) -> None:
    docs = _slices(short_tmp, profile, setup, *args)
    assert any(d["spec"].get("devices") for d in docs)
    for doc in docs:
        name = doc["metadata"]["name"]
        via_client, direct = _both(doc, None)
        assert direct == via_client, name
        doc["metadata"]["resourceVersion"] = "41"
        via_client, direct = _both(doc, name)
        assert direct == via_client, name
        assert direct[0] == "PUT" and direct[2].get("authorization") == "Bearer t0ken"


def test_the_cases_cover_counters_taints_and_shares(short_tmp: Path) -> None:
    """The cases above send what the plugin can publish: counter sets and consumptions, taints, shared
    devices' capacity policies."""
    seen = set()
    for profile, setup, args in CASES:
        for doc in _slices(short_tmp / f"{len(seen)}{len(args)}", profile, setup, *args):
            spec = doc["spec"]
            seen |= {"sharedCounters"} if spec.get("sharedCounters") else set()
            for d in spec.get("devices") or []:
                seen |= {k for k in ("consumesCounters", "taints", "allowMultipleAllocations") if d.get(k)}
                seen |= {"requestPolicy" for c in (d.get("capacity") or {}).values() if c.get("requestPolicy")}
    assert seen == {"sharedCounters", "consumesCounters", "taints", "allowMultipleAllocations", "requestPolicy"}


def _with_devices(short_tmp: Path) -> dict[str, Any]:
    return next(d for d in _slices(short_tmp, "t4-mdev", [], "--kubernetes", "1.37") if d["spec"].get("devices"))


def test_a_body_the_models_refuse_goes_through_the_client(short_tmp: Path) -> None:
    doc = _with_devices(short_tmp)
    doc["spec"]["devices"][0]["colour"] = "blue"  # no such field: the client's models refuse it
    SENT.clear()
    with pytest.raises(Exception, match="colour"):
        wire.write(_api(), wire.Order(), doc)
    assert SENT == []


def test_an_answer_that_is_not_2xx_raises_as_the_client_does(short_tmp: Path) -> None:
    doc = _with_devices(short_tmp)
    with pytest.raises(ApiException) as err:
        wire.write(_api(409), wire.Order(), doc, doc["metadata"]["name"])
    assert err.value.status == 409
