"""Several mutating commands at once on one host: they run one after the other (the host lock),
and the host ends exactly as the last one to finish asked, with every record kept."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

from tests.engine.helpers import facts, fresh, journal_left, start, vgpukit

ROUNDS = 12
SEED = 7


def test_four_commands_at_once(tmp_path: Path) -> None:
    rnd = random.Random(SEED)
    sim = fresh(tmp_path, "hgx-a100")
    for rnd_no in range(ROUNDS):
        asks = [(rnd.randint(2, 16), rnd.choice(["vfio-pci", "default"])) for _ in range(3)]
        procs: list[tuple[tuple[int, str] | None, subprocess.Popen[str]]] = [
            ((n, d), start(sim, "--wait", "120", "--json", "sriov", "enable", "nic0", "--vfs", str(n), "--driver", d))
            for n, d in asks
        ]
        procs.append((None, start(sim, "--wait", "120", "--json", "partition", "gpu0", "--mig", "3g.20gb")))
        outcomes = []
        for ask, proc in procs:
            out, err = proc.communicate(timeout=300)
            outcomes.append((ask, proc.returncode, out, err))
        assert all(rc == 0 for _, rc, _, _ in outcomes), [(a, rc, e) for a, rc, _, e in outcomes]
        # Each command reports the PF as it left it, read while it still held the lock: exactly what
        # it asked for (no other command's rollback or count change in between).
        for ask, _, out, _ in outcomes:
            if ask is None:
                continue
            pf_after = json.loads(out)["pf"]
            assert len(pf_after["vfs"]) == ask[0], f"round {rnd_no}: {ask} reported {len(pf_after['vfs'])} VFs"
            if ask[1] == "vfio-pci":
                assert {v["driver"] for v in pf_after["vfs"]} == {"vfio-pci"}, f"round {rnd_no}: {ask}"
        f = facts(sim)
        pf = f["pfs"]["0000:05:00.0"]
        final = (len(pf["vfs"]), "vfio-pci" if {d for _, d in pf["vfs"]} == {"vfio-pci"} else "default")
        assert final in [a for a, _, _, _ in outcomes], f"round {rnd_no}: {final} is no command's request"
        count, driver = final
        drivers = {d for _, d in pf["vfs"]}
        if driver == "vfio-pci":
            # every VF moved to vfio-pci keeps the record of where it came from
            assert all(f"{bdf}.json" in f["records"] for bdf, _ in pf["vfs"]), f"round {rnd_no}: lost records"
        else:
            assert "vfio-pci" not in drivers
        assert not journal_left(sim)
        again = vgpukit(sim, "--json", "sriov", "enable", "nic0", "--vfs", str(count), "--driver", driver)
        assert json.loads(again.stdout)["changed"] is False
        mig = json.loads(vgpukit(sim, "--json", "mig", "status", "gpu0").stdout)
        assert "3g.20gb" in json.dumps(mig)
    # bind --restore still knows where a VF came from
    r = vgpukit(sim, "sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci")
    assert r.returncode == 0
    vf = facts(sim)["pfs"]["0000:05:00.0"]["vfs"][0][0]
    r = vgpukit(sim, "bind", vf, "--restore")
    assert r.returncode == 0, r.stderr
    assert facts(sim)["drivers"][vf] == "mlx5_core"
