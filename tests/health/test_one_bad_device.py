"""One lost GPU never stops a whole-host read (issue 35 §0): every read shows the devices it can read,
marks the one it cannot (its table and ``unreadable`` in ``--json``) and exits 6 with one line naming it.

The host: a simulated hgx-a100 with MIG slices on gpu2 and gpu3, two VFs on nic1, then gpu3 lost
(``sim fault lost``, and XID 79, which loses it too).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Run, invoke, make_sim
from tests.core.test_json_schemas import validator

LOST = "gpu3 (0000:24:00.0)"
READS = [
    ["mig", "status"],
    ["mig", "status", "gpu3"],
    ["mig", "export"],
    ["export"],
    ["topo"],
    ["topo", "--matrix"],
    ["devices"],
    ["k8s", "resources"],
    ["k8s", "labels"],
    ["cdi", "generate", "--dry-run"],
]


def _ok(sim: Path, *args: str) -> None:
    r = invoke(sim, *args)
    assert r.exit_code == 0, (args, r.stderr)


@pytest.fixture(scope="module", params=["lost", "xid 79"])
def lost_host(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    sim = make_sim(tmp_path_factory.mktemp("lost") / "h", "hgx-a100")
    _ok(sim, "partition", "gpu2", "--mig", "1g.5gb")
    _ok(sim, "partition", "gpu3", "--mig", "3g.20gb,3g.20gb")
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "2")
    _ok(sim, "sim", "fault", *("lost gpu3" if request.param == "lost" else "xid gpu3 79").split())
    return sim


@pytest.mark.parametrize("argv", READS, ids=" ".join)
def test_a_whole_host_read_shows_the_rest_and_marks_the_lost_gpu(lost_host: Path, argv: list[str]) -> None:
    r = invoke(lost_host, *argv)
    assert r.exit_code == 6, (r.exit_code, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vgpukit: error: not read: {LOST}: "), r.stderr
    assert "is lost" in lines[0] and "see: vgpukit health 0000:24:00.0" in lines[0]
    assert ("everything else is shown" in lines[0]) == (argv[-1] != "gpu3")  # asked for gpu3 alone: nothing else
    assert "Traceback" not in r.output
    if argv[-1] != "gpu3" and argv[0] != "k8s":  # the others are there (k8s: the documents below)
        assert any(s in r.stdout for s in ("0000:23:00.0", "gpu2", "GPU2", "1g.5gb", "vgpukit.io/mig: 2:0")), r.stdout


@pytest.mark.parametrize("argv", READS, ids=" ".join)
def test_its_json_document_names_the_lost_gpu_and_validates(lost_host: Path, argv: list[str]) -> None:
    r = invoke(lost_host, *argv, "--json")
    assert r.exit_code == 6, r.stderr
    doc = json.loads(r.stdout)  # still the command's own document, the only one on stdout
    kind = doc["schema"].removeprefix("vgpukit.").removesuffix("/v1")
    errors = sorted(validator(kind).iter_errors(doc), key=str)
    assert not errors, errors[0]
    assert [(u["device"], u["bdf"]) for u in doc["unreadable"]] == [("gpu3", "0000:24:00.0")]


def test_mig_status_shows_every_other_gpu_and_marks_gpu3(lost_host: Path) -> None:
    doc = json.loads(invoke(lost_host, "mig", "status", "--json").stdout)
    by = {g["gpu"]: g for g in doc["gpus"]}
    assert sorted(by) == [f"gpu{i}" for i in range(8)]
    assert "is lost" in by["gpu3"]["unreadable"] and "gpu_instances" not in by["gpu3"]
    assert [gi["profile"] for gi in by["gpu2"]["gpu_instances"]] == ["1g.5gb"]
    human = invoke(lost_host, "mig", "status").stdout
    assert "gpu3  0000:24:00.0  NVIDIA A100-SXM4-40GB  MIG: ? (not read:" in human and "1g.5gb" in human


def test_export_leaves_the_lost_gpu_out_and_applying_it_leaves_it_alone(lost_host: Path, tmp_path: Path) -> None:
    r = invoke(lost_host, "export", "--json")
    doc = json.loads(r.stdout)["document"]
    entries = doc["mig-configs"]["current"]
    assert all(e["devices"] != "all" and 3 not in e["devices"] for e in entries), entries
    assert {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.5gb": 1}} in entries
    assert {"device": "nic1", "vfs": 2, "driver": "default"} in doc["configs"]["current"]["sriov"]
    text = invoke(lost_host, "export").stdout
    assert text.startswith(f"# not read, left out (applying this leaves it alone): {LOST}: ")
    path = tmp_path / "exported.yaml"
    path.write_text(text)
    r = invoke(lost_host, "apply", "-f", str(path), "--dry-run")
    assert r.exit_code == 0 and "nothing to do" in r.stdout, r.output


def test_the_device_plugins_resources_keep_the_other_gpus(lost_host: Path) -> None:
    doc = json.loads(invoke(lost_host, "k8s", "resources", "--json").stdout)
    shares = {d["id"].rsplit("-", 1)[0] for d in doc["resources"]["vgpukit.io/gpu-share"]}
    assert {"0000:03:00.0", "0000:04:00.0", "0000:83:00.0"} <= shares  # the others (gpu3: kept while NVML names it)
    assert len(doc["resources"]["vgpukit.io/mig-1g.5gb"]) == 1  # gpu2's slice (gpu3's cannot be listed)
    assert not any(k.startswith("vgpukit.io/mig-3g") for k in doc["resources"])
    labels = json.loads(invoke(lost_host, "k8s", "labels", "--json").stdout)["labels"]
    assert labels["health"] == "unusable" and labels["health.unusable.count"] == "1"


def test_topo_marks_the_lost_gpu(lost_host: Path) -> None:
    doc = json.loads(invoke(lost_host, "devices", "--kind", "gpu", "--json").stdout)
    gpu3 = next(d for d in doc["devices"] if d["bdf"] == "0000:24:00.0")
    assert gpu3["gpu"]["lost"] is True and "GPU lost (NVML: not read)" in gpu3["capabilities"]
    others = [d for d in doc["devices"] if d["bdf"] != "0000:24:00.0"]
    assert all("lost" not in d["gpu"] for d in others) and len(others) == 7


def test_the_exporter_scrapes_the_rest(lost_host: Path) -> None:
    r = invoke(lost_host, "exporter", "--once")
    assert r.exit_code == 6 and f"not read: {LOST}" in r.stderr
    health = [line for line in r.stdout.splitlines() if line.startswith("vgpukit_device_health{")]
    assert any('device="gpu3"' in line and 'state="unusable"' in line for line in health)
    assert any('device="gpu2"' in line and 'state="healthy"' in line for line in health)
    assert "DCGM_FI_DEV_GPU_UTIL{" in r.stdout and 'gpu="2"' in r.stdout


def test_a_host_without_a_bad_device_exits_0_with_nothing_unread(run_cli: Run, tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    for argv in READS:
        r = run_cli(sim, *argv, "--json")
        assert r.exit_code == 0, (argv, r.stderr)
        assert json.loads(r.stdout)["unreadable"] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["partition", "gpu3", "--mig", "1g.5gb"],
        ["mig", "destroy", "gpu3", "--all"],
        ["mig", "disable", "gpu3"],
        ["mig", "profiles", "gpu3"],
        ["mig", "apply", "-c", "gpu3"],
    ],
    ids=" ".join,
)
def test_a_command_about_the_lost_gpu_gives_the_one_refusal(lost_host: Path, tmp_path: Path, argv: list[str]) -> None:
    if argv[:2] == ["mig", "apply"]:
        cfg = tmp_path / "mig.yaml"
        cfg.write_text("version: v1\nmig-configs:\n  gpu3:\n    - {devices: [3], mig-enabled: false}\n")
        argv = [*argv, "-f", str(cfg)]
    r = invoke(lost_host, *argv)
    assert r.exit_code == 6, r.output
    partition = invoke(lost_host, "partition", "gpu3", "--mig", "1g.5gb").stderr  # the one refusal
    assert partition.startswith(f"vgpukit: error: {LOST} is unusable: the GPU stopped answering (NVML: GPU is lost)")
    assert partition.rstrip().endswith("(see: vgpukit health 0000:24:00.0)")
    assert r.stderr == partition


def test_mig_assert_says_left_alone_as_the_host_configs_assert(lost_host: Path, tmp_path: Path) -> None:
    """Trial 2: ``mig assert`` named the lost GPU ``cannot be applied:`` where ``assert`` says ``left alone:``."""
    cfg = tmp_path / "mig.yaml"
    cfg.write_text("version: v1\nmig-configs:\n  c:\n  - devices: [3]\n    mig-enabled: true\n    mig-devices: {}\n")
    r = invoke(lost_host, "mig", "assert", "-f", str(cfg), "-c", "c", "--json")
    assert r.exit_code == 1, r.output
    (line,) = json.loads(r.stdout)["differences"]
    assert line.startswith("left alone: ") and "0000:24:00.0" in line, line
