"""``sim client add`` and ``sim fault xid`` take a MIG device's UUID, as docs/cli.md lists them among the
commands that take every shown name: it names the GPU, its GPU instance (and compute instance)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import as_json, invoke


def test_sim_client_and_xid_take_a_mig_uuid(sim_dir: Path) -> None:
    assert invoke(sim_dir, "partition", "gpu1", "--mig", "3g.20gb").exit_code == 0
    st = as_json(invoke(sim_dir, "mig", "status", "--json"))
    text = str(st)
    uuid = text[text.index("MIG-") :].split("'")[0]
    r = invoke(sim_dir, "sim", "client", "add", uuid, "job")
    assert r.exit_code == 0 and r.stdout.strip().isdigit(), r.stderr
    r = invoke(sim_dir, "sim", "fault", "xid", uuid, "43")
    assert r.exit_code == 0 and "on GPU 1, GPU instance" in r.stdout, r.stderr
    r = invoke(sim_dir, "sim", "client", "add", uuid, "job2", "--gi", "1")
    assert r.exit_code == 2 and "no --gi/--ci" in r.stderr
