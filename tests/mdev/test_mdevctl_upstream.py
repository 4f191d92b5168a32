"""mdevctl's own test suite, run against the shim (``vgpukit mdev --mdevctl``) on simulated hosts.

The cases and expected files are mdevctl's test data (tests/data/mdevctl-upstream/cases.yaml says
from which upstream commit); each case builds a simulated host with the case's parents and types
(virtual mdev parents: a profile written here), its running devices (created through the simulated
kernel), its definition files and call-out scripts, runs the command and compares what mdevctl's
test compares. A case marked ``differs`` is a documented difference (docs/mdev.md, "mdevctl's own
test suite") and must still differ (strict xfail), so the table stays true.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Run, sim_host
from vgpukit.sim.build import init_sim

DATA = Path(__file__).resolve().parents[1] / "data" / "mdevctl-upstream"
SUITE: dict[str, Any] = yaml.safe_load((DATA / "cases.yaml").read_text())
UUIDS: dict[str, str] = SUITE["uuids"]


def _u(word: str) -> str:
    return UUIDS.get(word, word)


def _types(spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A simulated parent's pool and types from the case's ``{type: available | [available, api,
    name, description]}`` (the simulator shares a pool: cost = pool / available)."""
    rows = {t: (v if isinstance(v, list) else [v]) for t, v in spec.items()}
    counts = [r[0] for r in rows.values() if r[0] > 0]
    pool = math.lcm(*counts) if counts else 1
    types = {}
    for t, r in rows.items():
        doc: dict[str, Any] = {"name": r[2] if len(r) > 2 else "", "cost": pool // r[0] if r[0] else pool + 1}
        doc["device_api"] = r[1] if len(r) > 1 else ""
        if len(r) > 3:
            doc["description"] = r[3]
        types[t] = doc
    return pool, types


def _host(tmp: Path, setup: dict[str, Any]) -> Path:
    parents = []
    for name, spec in (setup.get("parents") or {}).items():
        pool, types = _types(spec)
        parents.append({"name": name, "path": f"virtual/upstream/{name}", "mdev": {"pool": pool, "types": types}})
    profile = {"version": 1, "name": "mdevctl-upstream", "description": "a case of mdevctl's test suite"}
    profile.update({"numa_nodes": {0: "0-1"}, "drivers": {}, "models": {}, "host_bridges": []})
    profile["virtual_mdev_parents"] = parents
    (tmp / "profile.yaml").write_text(yaml.safe_dump(profile))
    sim = tmp / "host"
    init_sim(sim, str(tmp / "profile.yaml"))
    host = sim_host(sim)
    for uid, parent, type_id in setup.get("active", []):
        host.write(host.sys("class", "mdev_bus", parent, "mdev_supported_types", type_id, "create"), _u(uid))
    for uid, parent, src in setup.get("defined", []):
        d = sim / "etc/mdevctl.d" / parent
        d.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(DATA / src, d / _u(uid))
    return sim


def _scripts(sim: Path, names: list[str]) -> None:
    d = sim / "etc/mdevctl.d/scripts.d/callouts"
    d.mkdir(parents=True, exist_ok=True)
    for name in names:
        (d / name).write_text("#!/bin/sh\n" + SUITE["scripts"][name] + "\n")
        (d / name).chmod(0o755)


def _param(case: dict[str, Any]) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=case["differs"])] if case.get("differs") else []
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in SUITE["cases"]])
def test_upstream_case(case: dict[str, Any], run_cli: Run, tmp_path: Path) -> None:
    setup = case.get("setup") or {}
    sim = _host(tmp_path, SUITE["setups"][setup] if isinstance(setup, str) else setup)
    _scripts(sim, case.get("scripts", []))
    argv = [_u(a) for a in case["argv"]]
    argv = [str(DATA / a) if (DATA / a).is_file() else a for a in argv]
    r = run_cli(sim, "mdev", "--mdevctl", *argv)
    if case.get("expect", "pass") == "fail":
        assert r.exit_code != 0, r.stdout
    else:
        assert r.exit_code == 0, r.stderr
    if "stderr" in case:
        assert case["stderr"] in r.stderr
    if "out" in case:  # mdevctl 1.2/1.3 print the listing and a newline; the 1.4 tree's test reads the listing
        assert r.stdout == (DATA / case["out"]).read_text() + "\n"
    if "file" in case:
        parent, uid, expected = case["file"]
        d = sim / "etc/mdevctl.d" / parent
        path = next(d.iterdir()) if uid == "*" else d / _u(uid)
        assert path.read_bytes() == (DATA / expected).read_bytes()
    if "active" in case:
        running = sim / "sys/bus/mdev/devices"
        assert sorted(p.name for p in running.iterdir()) == sorted(_u(u) for u in case["active"])
    if "listed" in case:  # the running device as mdevctl's list shows it (its call-out's attributes)
        uid, parent, expected = case["listed"]
        shown = run_cli(sim, "mdev", "--mdevctl", "list", "--dumpjson", "-u", _u(uid), "-p", parent)
        assert shown.exit_code == 0, shown.stderr
        assert json.loads(shown.stdout) == json.loads((DATA / expected).read_text())  # -u -p: the device alone
    if "gone" in case:
        uid, parent = case["gone"]
        base = sim / "etc/mdevctl.d"
        left = [p for p in base.glob(f"*/{_u(uid)}") if parent in (None, p.parent.name)]
        assert left == []
