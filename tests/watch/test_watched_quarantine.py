"""A quarantine, a drain and a release reach the Kubernetes doors as they run: through the watch's model
(``sick`` and ``evicting``, as ``vgpukit k8s dra-plugin`` and ``device-plugin`` wire them), with no poll
and no safety net (``--resync`` an hour): the journaled change's commit wakes the watch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.k8s.apiserver import ApiServer
from tests.k8s.test_dra_plugin import NODE, opener
from tests.watch.helpers import app_of
from vgpukit.clikit.watch import start_watch
from vgpukit.k8s.dra.api import ClaimReader, resource_api
from vgpukit.k8s.dra.server import Driver
from vgpukit.k8s.dra.slices import Publisher, slice_name
from vgpukit.k8s.watched import dra_views


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    yield server
    server.close()


def ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.stderr


def test_the_watched_dra_driver_taints_a_quarantine_evicts_a_drain_and_follows_a_release(
    tmp_path: Path, api: ApiServer
) -> None:
    sim = make_sim(tmp_path / "h")
    ok(sim, "partition", "gpu0", "--mig", "3g.20gb,3g.20gb")
    app = app_of(sim)
    watch = start_watch(app, dra_views(), 3600.0)
    try:
        model = watch.model
        client = resource_api(str(api.kubeconfig(tmp_path / "kubeconfig")))
        driver = Driver(NODE, opener(sim), ClaimReader(client), lambda: model.get("sick") or {}, taints="on")
        driver.model = model
        driver.evicting = lambda: model.get("evicting") or {}
        pub = Publisher(client, NODE)

        def effects() -> dict[str, str]:
            pub.publish(*driver.publication())
            devices = api.slices[slice_name(NODE)]["spec"]["devices"]
            return {d["name"]: d["taints"][0]["effect"] for d in devices if d.get("taints")}

        def until(check: Callable[[dict[str, str]], bool]) -> dict[str, str]:
            end = time.monotonic() + 15
            now = effects()
            while not check(now) and time.monotonic() < end:
                time.sleep(0.1)
                now = effects()
            return now

        assert effects() == {}
        ok(sim, "quarantine", "gpu1")
        quarantined = until(bool)
        assert quarantined and set(quarantined.values()) == {"NoSchedule"}
        ok(sim, "drain", "gpu0")
        drained = until(lambda e: len(e) > len(quarantined))
        assert {drained[n] for n in set(drained) - set(quarantined)} == {"NoExecute"}
        ok(sim, "release", "gpu0")
        ok(sim, "release", "gpu1")
        assert until(lambda e: not e) == {}
    finally:
        watch.close()
        app.close()
