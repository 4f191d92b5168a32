"""The inventory the watch keeps incrementally (vgpukit/node/update.py) equals a fresh collection after any
sequence of changes, and a change is followed function by function (the VFs of the functions that did not
change kept), not by collecting the whole host again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim
from tests.watch.helpers import app_of, read_all
from vgpukit.clikit.watch import opener
from vgpukit.holders import Holder, OpenFiles
from vgpukit.node import views as node_views
from vgpukit.node.inventory import Inventory, Options, collect
from vgpukit.node.views import inventory_views
from vgpukit.sim.uevents import FeedReader
from vgpukit.watch.model import HostModel
from vgpukit.watch.touch import Touch

NICS = {"nic0": "0000:05:00", "nic1": "0000:25:00", "nic2": "0000:85:00", "nic3": "0000:a5:00"}
OPTIONS = Options(replicas=2)


def vf(nic: str, n: int) -> str:
    return f"{NICS[nic]}.{n}"


nic = st.sampled_from(sorted(NICS))
STEPS = st.one_of(
    st.tuples(st.just("sriov"), st.just("enable"), nic, st.just("--vfs"), st.sampled_from(["2", "4", "6"])),
    st.tuples(st.just("sriov"), st.just("enable"), nic, st.just("--vfs"), st.sampled_from(["2", "4", "6"]),
              st.just("--driver"), st.just("vfio-pci")),
    st.tuples(st.just("sriov"), st.just("disable"), nic),
    st.builds(lambda n, i: ("bind", vf(n, i), "--driver", "vfio-pci"), nic, st.integers(1, 5)),
    st.builds(lambda n, i: ("bind", vf(n, i), "--restore"), nic, st.integers(1, 5)),
    st.builds(lambda n, i: ("unbind", vf(n, i)), nic, st.integers(1, 5)),
    st.builds(lambda n, i: ("sim", "hold", vf(n, i)), nic, st.integers(1, 5)),
    st.just(("partition", "gpu2", "--mig", "3g.20gb")),
    st.just(("cdi", "generate")),
)  # fmt: skip


class Counted:
    """The views' incremental update, counted: how often it answered (not None)."""

    def __init__(self) -> None:
        self.answered = 0
        self.real = node_views.update

    def __call__(self, *args: object, **kw: object) -> Inventory | None:
        out = self.real(*args, **kw)  # type: ignore[arg-type]
        self.answered += out is not None
        return out


def fresh(sim: Path) -> Inventory:
    app = app_of(sim)
    try:
        return collect(app.host, app.nvml, OPTIONS)
    finally:
        app.close()


def follow(model: HostModel, reader: FeedReader) -> None:
    """What the watch does for the events of a change before its journal goes (no ``docs`` yet): the
    uevents' functions, and the VFIO nodes (holders)."""
    touch = Touch()
    for ev in reader.read():
        touch.uevent(ev)
    touch.kinds.add("holders")
    model.refresh(touch)


def started(sim: Path) -> tuple[HostModel, FeedReader]:
    model = HostModel(opener(app_of(sim)), inventory_views(lambda _h: OPTIONS))
    reader = FeedReader(sim)
    reader.read()
    read_all(model, "start")
    return model, reader


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=1, max_size=6))
def test_an_incremental_inventory_equals_a_fresh_one_after_any_changes(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, ...]]
) -> None:
    sim = make_sim(tmp_path_factory.mktemp("inc") / "h")
    assert invoke(sim, "sriov", "enable", "nic3", "--vfs", "4", "--driver", "vfio-pci").exit_code == 0
    model, reader = started(sim)
    for args in steps:
        invoke(sim, *args)  # refused or not: the host is what it is
        follow(model, reader)
        if args[0] != "partition":  # a MIG change has no uevent: the watch hears NVML and the commit
            assert model.get("held") == fresh(sim), f"after {args}"
        full = Touch()
        full.kinds.add("docs")  # the change's journal removed: what the watch hears next
        model.refresh(full)
        assert model.get("held") == fresh(sim), f"after {args}, committed"


def test_a_vf_bound_is_followed_function_by_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counted = Counted()
    monkeypatch.setattr(node_views, "update", counted)
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "sriov", "enable", "nic3", "--vfs", "4").exit_code == 0
    assert invoke(sim, "sriov", "enable", "nic0", "--vfs", "4", "--driver", "vfio-pci").exit_code == 0
    model, reader = started(sim)
    for args in [
        ("bind", "0000:a5:00.2", "--driver", "vfio-pci"),
        ("sriov", "enable", "nic2", "--vfs", "3", "--driver", "vfio-pci"),
        ("unbind", "0000:05:00.3"),
        ("sriov", "disable", "nic2"),
    ]:
        assert invoke(sim, *args).exit_code == 0, args
        before = counted.answered
        follow(model, reader)
        assert counted.answered == before + 1, f"{args}: the whole inventory was collected again"
        assert model.get("held") == fresh(sim), args
    inv = model.get("inventory")
    assert "0000:a5:00.2" in {d.id for d in inv.resources["vgpukit.io/vf-15b3-101b"]}
    assert invoke(sim, "partition", "gpu2", "--mig", "3g.20gb").exit_code == 0  # heard as its commit
    before = counted.answered
    committed = Touch()
    committed.kinds.add("docs")
    model.refresh(committed)
    assert counted.answered == before + 1  # the GPUs' side read again, the VFs kept
    assert model.get("held") == fresh(sim)
    assert invoke(sim, "cdi", "enable", "--hook", "/usr/bin/nvidia-cdi-hook").exit_code in (0, 2)
    settings = Touch()
    settings.kinds.add("docs")
    settings.settings = True  # a configuration file of vgpukit's: everything again
    model.refresh(settings)
    assert counted.answered == before + 1
    assert model.get("held") == fresh(sim)
    assert model.get("held") == fresh(sim)


def test_the_watch_follows_a_bind_without_collecting_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the watch's own loop (uevents from the simulated feed, inotify on /dev/vfio): the VFIO group
    node a bind creates is the bound function's change (``pci``, its group), not a file of vgpukit's."""
    from vgpukit.clikit.watch import nvml_events
    from vgpukit.watch.loop import Watch

    counted = Counted()
    monkeypatch.setattr(node_views, "update", counted)
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "sriov", "enable", "nic3", "--vfs", "4").exit_code == 0
    app = app_of(sim)
    model = HostModel(opener(app), inventory_views(lambda _h: OPTIONS))
    watch = Watch(model, app.host, FeedReader(sim), nvml_events(app), resync=3600).start()
    try:
        seen = model.version
        assert invoke(sim, "bind", "0000:a5:00.3", "--driver", "vfio-pci").exit_code == 0
        end = time.monotonic() + 20
        while time.monotonic() < end and not (counted.answered and model.get("held") == fresh(sim)):
            seen = model.wait(seen, 0.2)
        assert counted.answered, "the bind was followed by collecting everything"
        assert model.get("held") == fresh(sim)
    finally:
        watch.close()
        app.close()


def test_a_refresh_scans_proc_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Who holds the devices is read once per refresh, by the ``held`` view: the inventory reads none
    (three scans of /proc per change before, each over every process of the host)."""
    scans: list[int] = []
    real = OpenFiles._scan

    def counted(self: OpenFiles) -> dict[str, list[Holder]]:
        scans.append(1)
        return real(self)

    monkeypatch.setattr(OpenFiles, "_scan", counted)
    sim = make_sim(tmp_path / "h")
    assert invoke(sim, "sriov", "enable", "nic3", "--vfs", "4", "--driver", "vfio-pci").exit_code == 0
    model, reader = started(sim)
    assert model.get("held") == fresh(sim)
    for args in [("bind", "0000:a5:00.2", "--restore"), ("sim", "hold", "0000:a5:00.3"), ("unbind", "0000:a5:00.4")]:
        assert invoke(sim, *args).exit_code == 0, args
        scans.clear()
        follow(model, reader)
        assert model.get("held") is not None and len(scans) == 1, (args, len(scans))
        assert model.get("held") == fresh(sim), args
