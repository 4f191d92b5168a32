"""``mdev list -p NAME`` takes every name of a parent, as ``mdev types`` does (docs/mdev.md): ``gpu0``,
its PCI address long or short give one listing; an unknown parent is exit 3, not an empty listing
(mdevctl's compatible output keeps mdevctl's empty answer)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import as_json, invoke, make_sim


def test_every_name_of_a_parent_lists_its_instances_and_an_unknown_one_is_not_found(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    r = invoke(sim, "mdev", "create", "0000:3b:00.0", "nvidia-232", "--count", "2", "--json")
    assert r.exit_code == 0, r.stderr
    made = sorted(i["uuid"] for i in as_json(r)["instances"])
    assert invoke(sim, "mdev", "create", "0000:d8:00.0", "nvidia-232").exit_code == 0
    for name in ("0000:3b:00.0", "gpu0", "3b:00.0", "3B:00.0"):
        r = invoke(sim, "mdev", "list", "-p", name, "--json")
        assert r.exit_code == 0, (name, r.stderr)
        assert sorted(i["uuid"] for i in as_json(r)["instances"]) == made, name
        assert all(u in invoke(sim, "mdev", "list", "-p", name).stdout for u in made)
    for name in ("nosuch", "gpu7", "00:1f.0"):
        r = invoke(sim, "mdev", "list", "-p", name)
        assert r.exit_code == 3 and r.stderr.count("\n") == 1, (name, r.stderr)
