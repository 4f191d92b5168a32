"""``k8s labels --write`` changes the host through the change engine: under the host lock, after
repairing an interrupted command, journaled, dry-run, and twice in a row changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import as_json, invoke, make_sim
from vgpukit.engine.files import PutFile
from vgpukit.engine.journal import Journal
from vgpukit.engine.lock import host_lock
from vgpukit.engine.step import to_entry
from vgpukit.host import Host

FEATURES = "etc/kubernetes/node-feature-discovery/features.d/vgpukit"


def test_write_waits_for_the_host_lock(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    with host_lock(Host(sim), "vgpukit other", 0):
        res = invoke(sim, "--wait", "0", "k8s", "labels", "--write")
        assert res.exit_code == 4, res.stderr
        assert "another vgpukit command is changing this host" in res.stderr
        assert invoke(sim, "--wait", "0", "k8s", "labels").exit_code == 0  # reading takes no lock
    assert not (sim / FEATURES).exists()


def test_write_repairs_an_interrupted_change_first(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    book = Journal(Host(sim), "vgpukit killed")
    book.add(to_entry(PutFile("/etc/vgpukit/marker", "as before\n")))
    os.close(book.fd)  # killed: the journal stays
    res = invoke(sim, "k8s", "labels", "--write")
    assert res.exit_code == 0, res.stderr
    assert "recovering an interrupted change" in res.stderr
    assert (sim / "etc/vgpukit/marker").read_text() == "as before\n"


def test_write_is_planned_dry_run_and_idempotent(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    dry = invoke(sim, "--dry-run", "k8s", "labels", "--write", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert as_json(dry)["plan"] == [f"write /{FEATURES}"] and not as_json(dry)["written"]
    assert not (sim / FEATURES).exists()
    first = as_json(invoke(sim, "k8s", "labels", "--write", "--json"))
    assert first["written"] and first["plan"] == [f"write /{FEATURES}"]
    stamp = (sim / FEATURES).stat().st_mtime_ns
    again = as_json(invoke(sim, "k8s", "labels", "--write", "--json"))
    assert not again["written"] and again["plan"] == []
    assert (sim / FEATURES).stat().st_mtime_ns == stamp
    assert not (sim / "run/vgpukit/journal").exists()


def test_the_health_label_follows_the_worst_device(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    assert as_json(invoke(sim, "k8s", "labels", "--json"))["labels"]["health"] == "healthy"
    assert invoke(sim, "sim", "fault", "xid", "gpu3", "79").exit_code == 0
    labels = as_json(invoke(sim, "k8s", "labels", "--json"))["labels"]
    assert labels["health"] == "unusable" and labels["health.unusable.count"] == "1"
