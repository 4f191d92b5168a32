"""Planners consult the health fact: nothing is planned onto an unusable GPU (exit 6, the reason)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Run, make_sim
from tests.health import documents
from vgpukit.mig import layout
from vgpukit.nvml import NvmlGpu

MIG, HOST = documents.MIG, documents.host("vms")


def test_the_rule() -> None:
    g = NvmlGpu(0, "0000:03:00.0", "GPU-x", "NVIDIA A100-SXM4-40GB", True, False, False)
    layout.refuse_unusable(g, None, None)
    layout.refuse_unusable(g, None, {"0000:04:00.0": "lost"})
    with pytest.raises(layout.Unusable) as err:
        layout.refuse_unusable(g, "gpu0", {"0000:03:00.0": "the GPU stopped answering"})
    assert err.value.exit_code == 6 and "gpu0 is unusable: the GPU stopped answering" in str(err.value)


def r_args(how: str, tmp_path: Path) -> list[str]:
    f = tmp_path / "c.yaml"
    f.write_text(MIG if how == "mig-apply" else HOST)
    if how == "mig-apply":
        return ["mig", "apply", "-f", str(f), "-c", "all-3g"]
    return ["apply", "-f", str(f), "-c", "vms"]


@pytest.mark.parametrize("how", ["partition", "mig-apply", "apply"])
def test_an_unusable_gpu_is_refused_and_left_alone(run_cli: Run, tmp_path: Path, how: str) -> None:
    """partition refuses it; a config over every GPU (mig apply, apply) leaves it alone and applies the
    others, with the same refusal and exit 6."""
    sim = make_sim(tmp_path / "h", "hgx-a100")
    assert run_cli(sim, "sim", "fault", "ecc", "gpu0", "--double").exit_code == 0  # unusable, still answering
    before = json.loads(run_cli(sim, "mig", "status", "--json").stdout)["gpus"]
    if how == "partition":
        r = run_cli(sim, "partition", "gpu0", "--mig", "3g.20gb")
    else:
        r = run_cli(sim, *r_args(how, tmp_path))
    assert r.exit_code == 6, r.output
    assert "gpu0 (0000:03:00.0) is unusable: uncorrected ECC errors" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    after = json.loads(run_cli(sim, "mig", "status", "--json").stdout)["gpus"]
    assert after[0] == before[0]  # gpu0 untouched
    if how != "partition":
        assert all(len(g["gpu_instances"]) == 2 for g in after[1:])  # the other seven: applied
        doc = json.loads(run_cli(sim, *r_args(how, tmp_path), "--json").stdout)
        assert doc["plan"] == [] and [(s["device"], s["error"]) for s in doc["skipped"]] == [("gpu0", "unusable")]


def test_a_lost_gpu_is_refused_with_the_reason(run_cli: Run, sim_dir: Path) -> None:
    assert run_cli(sim_dir, "sim", "fault", "xid", "gpu0", "79").exit_code == 0
    r = run_cli(sim_dir, "partition", "gpu0", "--mig", "3g.20gb")
    assert r.exit_code == 6 and "XID 79" in r.stderr
    assert run_cli(sim_dir, "partition", "gpu1", "--mig", "3g.20gb").exit_code == 0  # the others are fine


def test_sriov_enable_on_an_unusable_pf_is_refused_but_repairing_missing_vfs_is_not(
    run_cli: Run, tmp_path: Path
) -> None:
    sim = make_sim(tmp_path / "h", "h100-vgpu")
    assert run_cli(sim, "health").exit_code == 0
    assert run_cli(sim, "sim", "fault", "pf-reset", "0000:41:00.0").exit_code == 0
    assert run_cli(sim, "health", "gpu0").exit_code == 1  # VFs configured but missing: degraded, re-create them
    r = run_cli(sim, "sriov", "disable", "gpu0")  # the repair: through 0 and back
    assert r.exit_code == 0, r.stderr
    assert run_cli(sim, "sriov", "enable", "gpu0", "--vfs", "4").exit_code == 0
    assert run_cli(sim, "sim", "fault", "aer", "0000:41:00.0", "fatal").exit_code == 0
    r = run_cli(sim, "sriov", "enable", "gpu0", "--vfs", "8")
    assert r.exit_code == 6 and "gpu0 (0000:41:00.0) is unusable: PCIe AER fatal errors counted" in r.stderr
    assert len(json.loads(run_cli(sim, "sriov", "list", "gpu0", "--json").stdout)["pfs"][0]["vfs"]) == 4
