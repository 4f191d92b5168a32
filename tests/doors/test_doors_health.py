"""The health rule through every door: nothing is planned onto a GPU the health layer finds unusable.

MIG onto an unusable GPU (an uncorrected ECC error, the GPU still answering) is refused the same way
by the area command (``partition``), ``apply``, the node agent's apply and the Ansible module: exit 6,
error kind ``unusable``, the reason, the host unchanged (the SR-IOV row is in test_doors_sriov.py).
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import invoke, make_sim
from tests.doors import harness
from tests.health import documents

SAYS = "gpu0 (0000:03:00.0) is unusable: uncorrected ECC errors"


def test_mig_onto_an_unusable_gpu_is_refused_through_every_door(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    r = invoke(sim, "sim", "fault", "ecc", "gpu0", "--double")
    assert r.exit_code == 0, r.stderr
    answers = harness.every_door(
        sim, tmp_path, "mig: all-3g", ["partition", "gpu0", "--mig", "3g.20gb"], top=documents.MIG_CONFIGS
    )
    for answer in answers:
        assert (answer.code, answer.kind) == (6, "unusable"), answer
        assert SAYS in answer.message, answer
