"""The health rule through every door: nothing is planned onto a GPU the health layer finds unusable.

MIG onto an unusable GPU (an uncorrected ECC error, the GPU still answering; or lost: XID 79) is
refused the same way by the area command (``partition``), ``mig apply``, ``apply``, the node agent's
apply and the Ansible module: exit 6, error kind ``unusable``, the reason, the host unchanged (the
SR-IOV row is in test_doors_sriov.py). A config over more than the bad GPU applies the rest and
leaves it alone, with the same refusal and exit code, through every config door.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from tests.doors import harness
from tests.health import documents

SAYS = {"ecc": "gpu0 (0000:03:00.0) is unusable: uncorrected ECC errors", "lost": "gpu0 (0000:03:00.0) is unusable:"}
ONLY_GPU0 = """mig-configs:
  gpu0-3g:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
"""
FAULT = {"ecc": ["ecc", "gpu0", "--double"], "lost": ["xid", "gpu0", "79"]}


@pytest.mark.parametrize("fault", sorted(FAULT))
def test_mig_onto_an_unusable_gpu_is_refused_through_every_door(tmp_path: Path, fault: str) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    r = invoke(sim, "sim", "fault", *FAULT[fault])
    assert r.exit_code == 0, r.stderr
    mig_file = tmp_path / "mig.yaml"
    mig_file.write_text("version: v1\n" + ONLY_GPU0)
    answers = harness.every_door(
        sim, tmp_path, "mig: gpu0-3g", ["partition", "gpu0", "--mig", "3g.20gb"], top=ONLY_GPU0
    )
    before = harness.host_state(sim)
    answers.append(harness.area(sim, ["mig", "apply", "-f", str(mig_file), "-c", "gpu0-3g"]))
    assert harness.host_state(sim) == before, "mig apply changed the host"
    assert harness.same_answer(answers[1:], answers[0]) == [], answers
    for answer in answers:
        assert (answer.code, answer.kind) == (6, "unusable"), answer
        assert SAYS[fault] in answer.message, answer


def test_a_config_over_every_gpu_applies_the_rest_and_leaves_the_bad_one_alone(tmp_path: Path) -> None:
    """``mig: all-3g`` with gpu0 unusable: every config door applies gpu1..gpu7 and reports gpu0 with the
    area command's refusal, exit 6 (the agent: partial); a second run plans nothing more."""
    mig_file = tmp_path / "mig.yaml"
    mig_file.write_text(documents.MIG)
    host_file = harness.host_config(tmp_path, "mig: all-3g", documents.MIG_CONFIGS)
    doors = {
        "mig apply": lambda s: harness.area(s, ["mig", "apply", "-f", str(mig_file), "-c", "all-3g"]),
        **harness.config_doors(host_file, tmp_path),
    }
    first = None
    for name, door in doors.items():
        sim = make_sim(tmp_path / name.replace(" ", "-"), "hgx-a100")
        assert invoke(sim, "sim", "fault", "ecc", "gpu0", "--double").exit_code == 0
        answer = door(sim)
        refusal = harness.area(sim, ["partition", "gpu0", "--mig", "3g.20gb"])
        first = first or refusal
        assert harness.same_answer([answer], refusal) == [], (name, answer, refusal)
        status = json.loads(invoke(sim, "mig", "status", "--json").stdout)["gpus"]
        layouts = {g["gpu"]: [gi["profile"] for gi in g.get("gpu_instances", [])] for g in status}
        assert layouts["gpu0"] == [], name  # left alone
        assert all(layouts[f"gpu{i}"] == ["3g.20gb", "3g.20gb"] for i in range(1, 8)), (name, layouts)
        again = door(sim)
        assert (again.code, again.kind) == (6, "unusable"), (name, again)
    assert first is not None and (first.code, first.kind) == (6, "unusable")
