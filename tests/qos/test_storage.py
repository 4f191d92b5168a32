"""QoS changes through the daemon on a full, over-quota, read-only or failing /run (docs/engine.md,
"Storage faults"): ``qos set`` / ``qos tenant add|rm`` get one line naming the daemon's run-time record,
exit 1; the daemon keeps running what it ran (its record in memory too), and the same change works
once the fault is gone. The simulated host's own storage faults (vgpukit.sim.storage)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import invoke, make_sim
from tests.qos.conftest import DaemonProc
from vgpukit.sim import storage

RECORD = "/run/vgpukit/qos/runtime.json"


def settings(d: DaemonProc) -> list[object]:
    """What the daemon runs: each GPU's policy and slice, its tenants' class and share."""
    gpus = d.req(op="status")["gpus"]
    return [
        (g["gpu"], g["policy"], g["slice_ms"], [(t["name"], t["class"], t["share"]) for t in g["tenants"]])
        for g in gpus
    ]


def record(sim: Path) -> bytes | None:
    path = sim / RECORD.lstrip("/")
    return path.read_bytes() if path.exists() else None


def test_qos_changes_on_a_faulty_run(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    sim = make_sim(tmp_path / "host")
    d = DaemonProc(sim, sim=True).start()
    try:
        p = spawn()
        changes = (
            ["qos", "set", "gpu0", "--policy", "burst-share", "--slice-ms", "7"],
            ["qos", "tenant", "add", "gpu0", "a", "--class", "online", "--share", "30", "--pid", str(p.pid)],
            ["qos", "tenant", "rm", "gpu0", "a"],
        )
        # a change that failed leaves nothing in the daemon's memory: the next change records only its own
        storage.set_fault(sim, "/run/vgpukit/qos", "ENOSPC")
        assert invoke(sim, *changes[0]).exit_code == 1
        storage.set_fault(sim, "/run/vgpukit/qos", None)
        assert invoke(sim, *changes[1]).exit_code == 0
        assert "burst-share" not in (record(sim) or b"").decode()
        assert invoke(sim, *changes[2]).exit_code == 0
        for argv in changes:
            before, kept = settings(d), record(sim)
            for error in storage.ERRORS:
                storage.set_fault(sim, "/run/vgpukit/qos", error)
                try:
                    r = invoke(sim, *argv)
                finally:
                    storage.set_fault(sim, "/run/vgpukit/qos", None)
                line = r.stderr.strip()
                assert r.exit_code == 1 and line.count("\n") == 0, (argv, error, r.stderr)
                assert f"writing {RECORD} failed" in line and f"({error})" in line and "then run" in line, line
                assert settings(d) == before and record(sim) == kept, (argv, error)
            assert invoke(sim, *argv).exit_code == 0, argv  # the space is back
            assert settings(d) != before
    finally:
        assert d.stop() == 0
