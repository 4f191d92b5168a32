"""mig-parted v1 configs: strict parsing with line numbers, idempotent apply, assert, export."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import as_json, invoke
from vgpukit.errors import InvalidInput
from vgpukit.mig import config
from vgpukit.sim import nvml as simdrv
from vgpukit.sim.build import init_sim
from vgpukit.sim.nvml import SimNvml

from .test_cli import layout

CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  balanced:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
    - devices: [2]
      device-filter: ["0x20B010DE"]
      mig-enabled: true
      mig-devices:
        "1c.3g.20gb": 3
        "7g.40gb": 0
  other-model:
    - devices: all
      device-filter: "0x233010DE"
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
"""


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = tmp_path / "hgx"
    init_sim(root, "hgx-a100")
    return root


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(CONFIG)
    return p


def test_parse() -> None:
    configs = config.parse(CONFIG, "c.yaml")
    assert list(configs) == ["all-disabled", "balanced", "other-model"]
    e = configs["balanced"][1]
    assert (e.line, e.devices, e.mig_devices) == (13, [2], {"1c.3g.20gb": 3})
    assert e.device_filter == [config.DeviceId(0x20B0, 0x10DE)]
    assert configs["all-disabled"][0].devices is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            CONFIG.replace("      mig-enabled: false", "      mig-enable: false"),
            "c.yaml:5: unknown key in a device entry",
        ),
        (CONFIG.replace("version: v1", "version: v2"), "c.yaml:1: version must be v1"),
        (CONFIG.replace("mig-configs:", "mig-config:"), "c.yaml:2: unknown key in the config"),
        (CONFIG.replace('"2g.10gb": 1', '"2g.10gb": two'), "c.yaml:11: mig-devices: a count"),
        (CONFIG.replace("devices: [2]", "devices: [x]"), "c.yaml:13: devices"),
        ("version: v1\nmig-configs:\n  a:\n    - devices: all\n", "c.yaml:4: a device entry lacks 'mig-enabled'"),
        ("[1, 2", "not valid YAML"),
    ],
)
def test_parse_rejects_with_the_line_at_fault(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message.replace(".", r"\.").replace("[", r"\[")):
        config.parse(text, "c.yaml")


def test_apply_is_idempotent_and_assert_agrees(host: Path, cfg: Path) -> None:
    r = invoke(host, "mig", "apply", "-f", str(cfg), "-c", "balanced", "--no-reset")
    assert r.exit_code == 4 and "--no-reset" in r.stderr and SimNvml(host).mig_mode(0) == (False, False)
    assert invoke(host, "mig", "assert", "-f", str(cfg), "-c", "balanced").exit_code == 1
    r = invoke(host, "mig", "apply", "-f", str(cfg), "-c", "balanced", "--reset", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["changed"]
    assert sorted(p for p, _, _ in layout(host, 0)) == [9, 14, 19, 19]
    assert layout(host, 2) == [(9, 4, (1, 1, 1))]
    assert layout(host, 3) == []
    r = invoke(host, "mig", "apply", "-f", str(cfg), "-c", "balanced", "--reset", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["plan"] == []
    assert invoke(host, "mig", "assert", "-f", str(cfg), "-c", "balanced").exit_code == 0


def test_apply_keeps_matching_instances_and_never_destroys_busy_ones(host: Path, cfg: Path) -> None:
    invoke(host, "partition", "gpu0", "--mig", "3g.20gb,7g.40gb", "--reset", "--dry-run")
    invoke(host, "partition", "gpu0", "--mig", "3g.20gb,4g.20gb", "--reset")
    keep = next(g for g in SimNvml(host).gpu_instances(0) if g.profile_id == 9)
    busy = next(g for g in SimNvml(host).gpu_instances(0) if g.profile_id == 5)
    pid = simdrv.add_client(host, 0, "trainer", gi=busy.id)
    r = invoke(host, "mig", "apply", "-f", str(cfg), "-c", "balanced", "--reset")
    assert r.exit_code == 4 and "trainer" in r.stderr
    assert sorted(p for p, _, _ in layout(host, 0)) == [5, 9]  # nothing half-done
    simdrv.remove_client(host, pid)
    assert invoke(host, "mig", "apply", "-f", str(cfg), "-c", "balanced", "--reset").exit_code == 0
    assert keep.id in {g.id for g in SimNvml(host).gpu_instances(0)}


def test_device_filter_and_disable(host: Path, cfg: Path) -> None:
    r = invoke(host, "mig", "apply", "-f", str(cfg), "-c", "other-model", "--reset", "--json")
    doc = as_json(r)
    assert r.exit_code == 0 and doc["plan"] == []  # no H100 here: the filter selects nothing
    invoke(host, "partition", "gpu5", "--mig", "2g.10gb", "--reset")
    assert invoke(host, "mig", "apply", "-f", str(cfg), "-c", "all-disabled", "--reset").exit_code == 0
    assert SimNvml(host).mig_mode(5) == (False, False)


def test_export_round_trips(host: Path, tmp_path: Path) -> None:
    invoke(host, "partition", "gpu0", "--mig", "1g.5gb=3,3g.20gb", "--ci", "1c.3g.20gb=2", "--reset")
    invoke(host, "partition", "gpu1", "--mig", "3g.20gb=2", "--ci", "2c.3g.20gb,1c.3g.20gb", "--reset")
    invoke(host, "partition", "gpu4", "--mig", "7g.40gb", "--reset")
    r = invoke(host, "mig", "export", "-c", "saved")
    assert r.exit_code == 0 and "1c.3g.20gb: 2" in r.stdout
    saved = tmp_path / "saved.yaml"
    saved.write_text(r.stdout)
    other = tmp_path / "other"
    init_sim(other, "hgx-a100")
    assert invoke(other, "mig", "apply", "-f", str(saved), "--reset").exit_code == 0
    assert invoke(other, "mig", "assert", "-f", str(saved)).exit_code == 0
    assert [p for p, _, _ in layout(other, 4)] == [0]
    assert sorted(c for _, _, c in layout(other, 0)) == [(1,), (1,), (1,), (1, 1)]
    assert sorted(c for _, _, c in layout(other, 1)) == [(2, 1), (2, 1)]  # mixed CI layouts survive


def test_config_errors_exit_2_with_line(host: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONFIG.replace('"2g.10gb": 1', '"2g.11gb": 1'))
    r = invoke(host, "mig", "apply", "-f", str(bad), "-c", "balanced", "--reset")
    assert r.exit_code == 2 and "unknown MIG profile '2g.11gb'" in r.stderr
    assert re.search(r"\.yaml:11:20: unknown MIG profile", r.stderr), r.stderr  # FILE:LINE:COLUMN of its count
    r = invoke(host, "mig", "apply", "-f", str(bad))
    assert r.exit_code == 2 and "choose one with -c" in r.stderr


def test_apply_failure_on_a_later_gpu_rolls_back_all_gpus(host: Path, cfg: Path) -> None:
    invoke(host, "partition", "gpu0", "--mig", "7g.40gb", "--reset")  # gpu0 must be re-carved by the config
    before = [layout(host, i) for i in range(3)]
    simdrv.add_fault(host, "CreateGpuInstance", "UNKNOWN", nth=6)  # gpu0: 4 GIs, gpu1: 4 -> fails on gpu1
    r = invoke(host, "mig", "apply", "-f", str(cfg), "-c", "balanced", "--reset")
    assert r.exit_code == 1 and "rolled back" in r.stderr
    assert [layout(host, i) for i in range(3)] == before
    assert [SimNvml(host).mig_mode(i) for i in range(3)] == [(True, True), (False, False), (False, False)]
