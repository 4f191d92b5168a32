"""The DRA plugin's publication keeps the entries of the VFs that did not change (vgpukit/k8s/dra/slices.py
Entries) and equals one made afresh after any sequence of changes: VFs created, bound, unbound, held,
found unusable or drained, the taint options switched; the publisher then finds a stored slice the same
without comparing it device by device, and still writes every slice that changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim
from tests.watch.helpers import app_of, read_all
from vgpukit.clikit.watch import opener
from vgpukit.k8s.cli_host import _dra_opener
from vgpukit.k8s.dra import slices
from vgpukit.k8s.dra.server import Driver
from vgpukit.k8s.watched import dra_views
from vgpukit.watch.model import HostModel

NICS = {"nic0": "0000:05:00", "nic3": "0000:a5:00"}
nic = st.sampled_from(sorted(NICS))
vf = st.builds(lambda n, i: f"{NICS[n]}.{i}", nic, st.integers(1, 3))
STEPS = st.one_of(
    st.tuples(st.just("sriov"), st.just("enable"), nic, st.just("--vfs"), st.sampled_from(["2", "4"]),
              st.just("--driver"), st.just("vfio-pci")),
    st.tuples(st.just("sriov"), st.just("enable"), nic, st.just("--vfs"), st.just("3")),
    st.tuples(st.just("sriov"), st.just("disable"), nic),
    st.builds(lambda v: ("bind", v, "--driver", "vfio-pci"), vf),
    st.builds(lambda v: ("bind", v, "--restore"), vf),
    st.builds(lambda v: ("unbind", v), vf),
    st.builds(lambda v: ("sim", "hold", v), vf),
    st.builds(lambda v: ("sim", "fault", "aer", v, "fatal"), vf),
    st.builds(lambda v: ("quarantine", v, "--reason", "test"), vf),
    st.builds(lambda v: ("quarantine", v, "--evict"), vf),  # drained: its taint evicts
    st.builds(lambda v: ("release", v), vf),
    st.just(("taints",)),  # --device-taints switched (the API server found dropping them, or back)
    st.just(("effect",)),  # --unhealthy-effect switched
)  # fmt: skip


def _driver(app: Any, model: HostModel) -> Driver:
    driver = Driver("n1", _dra_opener(app), lambda *_: {}, lambda: model.get("sick") or {}, "off", "auto")
    driver.evicting = lambda: model.get("evicting") or {}
    driver.model = model
    return driver


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=1, max_size=6))
def test_a_publication_equals_one_made_afresh_after_any_changes(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, ...]]
) -> None:
    sim = make_sim(tmp_path_factory.mktemp("ent") / "h")
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci").exit_code == 0
    app = app_of(sim)
    try:
        model = HostModel(opener(app), dra_views())
        read_all(model, "start")
        kept = _driver(app, model)
        kept.publication()
        for args in steps:
            if args == ("taints",):
                kept.taints_ok = not kept.taints_ok
            elif args == ("effect",):
                kept.unhealthy_effect = "NoExecute" if kept.unhealthy_effect == "NoSchedule" else "NoSchedule"
            else:
                invoke(sim, *args)  # refused or not: the host is what it is
                read_all(model, str(args))
            fresh = _driver(app, model)
            fresh.taints_ok, fresh.unhealthy_effect = kept.taints_ok, kept.unhealthy_effect
            assert kept.publication() == fresh.publication(), f"after {args}"
    finally:
        app.close()


def test_unchanged_vfs_keep_their_entries(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "6", "--driver", "vfio-pci").exit_code == 0
    app = app_of(sim)
    try:
        model = HostModel(opener(app), dra_views())
        read_all(model, "start")
        driver = _driver(app, model)
        before = {e["name"]: e for e in driver.publication()[0]}
        assert invoke(sim, "bind", "0000:05:00.2", "--restore").exit_code == 0
        read_all(model, "bind")
        after = {e["name"]: e for e in driver.publication()[0]}
        kept = {n for n, e in after.items() if before.get(n) is e}
        assert "vf-0000-05-00-3" in kept and "vf-0000-05-00-2" not in kept
        assert after["vf-0000-05-00-2"] != before["vf-0000-05-00-2"]
    finally:
        app.close()


class _Counted:
    def __init__(self) -> None:
        self.calls = 0
        self.real = slices._same

    def __call__(self, *args: Any) -> bool:
        self.calls += 1
        return self.real(*args)


def test_a_slice_written_as_it_is_kept_is_not_compared_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.k8s.apiserver import ApiServer
    from vgpukit.k8s.dra.api import resource_api

    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "6", "--driver", "vfio-pci").exit_code == 0
    api = ApiServer("n1")
    app = app_of(sim)
    try:
        model = HostModel(opener(app), dra_views())
        read_all(model, "start")
        driver = _driver(app, model)
        pub = slices.Publisher(resource_api(str(api.kubeconfig(tmp_path / "kc"))), "n1", "off")
        assert pub.publish(*driver.publication()) is not None
        counted = _Counted()
        monkeypatch.setattr(slices, "_same", counted)
        pub.published = None  # told to forget what it published: the stored slices looked at again
        assert pub.publish(*driver.publication()) is None  # the same devices: nothing written
        assert counted.calls == 0
        with api.changed:  # someone else changed the slice: its new version is compared device by device
            name = next(iter(api.slices))
            api.slices[name]["spec"]["devices"] = api.slices[name]["spec"]["devices"][1:]
            api.version += 1
            api.slices[name]["metadata"]["resourceVersion"] = str(api.version)
        pub.published, pub.stored = None, None
        assert pub.publish(*driver.publication()) is not None
        assert counted.calls >= 1
    finally:
        app.close()
        api.close()
