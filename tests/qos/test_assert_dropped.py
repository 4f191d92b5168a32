"""A tenant the daemon dropped (its processes gone) is a difference for ``assert`` (exit 1, naming it),
and ``apply`` says it cannot start it (docs/qos.md, "Vanished targets")."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.conftest import as_json, invoke, make_sim
from tests.qos.conftest import DaemonProc, wait_for


def test_assert_with_a_dropped_tenant_differs_and_apply_says_it_cannot(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]
    web, batch = ({"class": c, "share": 40, "pids": [p.pid]} for c, p in zip(("online", "offline"), procs, strict=True))
    f = tmp_path / "h1.yaml"
    qos = {"gpus": {"gpu0": {"policy": "fixed-share", "tenants": {"web": web, "batch": batch}}}}
    f.write_text(yaml.safe_dump({"version": "vgpukit.host/v1", "configs": {"c": {"qos": qos}}}))
    d = DaemonProc(sim, sim=True).start()
    try:
        assert invoke(sim, "apply", "-f", str(f)).exit_code == 0
        assert invoke(sim, "assert", "-f", str(f)).exit_code == 0
        procs[0].kill()
        procs[0].wait()
        assert wait_for(lambda: bool(d.req(op="status")["config"]["dropped"]), timeout=10)
        st = invoke(sim, "qos", "status").stdout
        assert "tenant web (dropped: " in st and "(dropped: tenant web" not in st, st  # the tenant is named once
        r = invoke(sim, "assert", "-f", str(f), "--json")
        assert r.exit_code == 1, r.stdout + r.stderr
        (diff,) = as_json(r)["differences"]
        assert diff.startswith("differs: qos: gpu0: tenant web is not running ("), diff
        human = invoke(sim, "assert", "-f", str(f))
        assert human.exit_code == 1 and "1 difference:" in human.stdout and "tenant web" in human.stdout
        r = invoke(sim, "apply", "-f", str(f))
        assert r.exit_code == 0 and "tenant web is not running" in r.stderr and "apply cannot start it" in r.stderr
        d.stop()
        d = DaemonProc(sim, sim=True).start()  # dropped as it loads the file: the reason names no tenant again
        st = invoke(sim, "qos", "status").stdout
        assert "not running: gpu0: tenant web (dropped: none of the processes" in st, st
    finally:
        d.stop()
        for p in procs:
            p.kill()
            p.wait()
