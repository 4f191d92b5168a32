"""The DRA commands' arguments: one line and exit 2 for what they cannot take (an option without the option it
goes with, a version that is not one, a node name the slices cannot be named after, an effect with no taint,
a share name that names no GPU or MIG slice); what ``k8s resources --kubernetes`` says of the release and of
the GPUs that offer less; ``dra-classes --json``; ``dra-taint-rules``: a rule for a GPU and every piece of it."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.conftest import invoke, make_sim

NODE = "node-1"


@pytest.fixture(scope="module")
def a100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sim = make_sim(tmp_path_factory.mktemp("a100") / "h")
    assert invoke(sim, "partition", "gpu1", "--mig", "3g.20gb").exit_code == 0
    return sim


def _refused(r: object, *words: str) -> None:
    assert r.exit_code == 2, (r.stdout, r.stderr)  # type: ignore[attr-defined]
    lines = r.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr  # type: ignore[attr-defined]
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--partitionable", "on"], ["--partitionable goes with --kubernetes"]),
        (["--node", "x"], ["--node goes with --kubernetes"]),
        (["--share-by-capacity", "gpu"], ["--share-by-capacity goes with --kubernetes"]),
        (["--kubernetes", "1.3e1"], ["not a Kubernetes version"]),
        (["--kubernetes", "2.0"], ["not a Kubernetes 1.x release"]),
        (["--kubernetes", "1.9999999"], ["not a Kubernetes version"]),
        (["--kubernetes", "1.33"], ["DRA needs 1.34 or later"]),
        (["--kubernetes", "1.37", "--node", "Bad_Node!"], ["--node", "Kubernetes node name"]),
        (["--kubernetes", "1.37", "--node", "a" * 243], ["--node", "at most 208 characters"]),
        (["--kubernetes", "1.37", "--node", "n1", "--share-by-capacity", "gpu,mig-nonsense"], ["mig-nonsense"]),
    ],
)
def test_k8s_resources_refuses_what_it_cannot_take(a100: Path, args: list[str], words: list[str]) -> None:
    _refused(invoke(a100, "k8s", "resources", *args), *words)


def test_the_longest_node_name_allowed_gives_slice_names_the_api_takes(a100: Path) -> None:
    node = "n" + "a" * 206 + "1"  # 208 characters: the most a node name may be here
    r = invoke(a100, "k8s", "resources", "--kubernetes", "1.37", "--node", node, "--partitionable", "on", "--json")
    assert r.exit_code == 0, r.stderr
    names = [d["metadata"]["name"] for d in json.loads(r.stdout)["resourceSlices"]]
    assert len(names) > 1 and max(map(len, names)) <= 253


def test_k8s_resources_says_which_rules_and_why_a_gpu_offers_less(a100: Path) -> None:
    later = invoke(a100, "k8s", "resources", "--kubernetes", "1.40", "--node", NODE)
    assert later.exit_code == 0, later.stderr
    assert "Kubernetes 1.40 (the rules of 1.37, the newest known)" in later.stdout
    off = invoke(a100, "k8s", "resources", "--kubernetes", "1.37", "--node", NODE, "--partitionable", "off")
    assert "static view (--partitionable off)" in off.stdout
    default = invoke(a100, "k8s", "resources", "--kubernetes", "1.35", "--node", NODE)
    assert "static view (DRAPartitionableDevices off in 1.35)" in default.stdout
    on = invoke(a100, "k8s", "resources", "--kubernetes", "1.37", "--node", NODE, "--json")
    notes = json.loads(on.stdout)["sliceNotes"]  # gpu0, MIG off on an A100: why it offers no slices
    assert any(n.startswith("0000:03:00.0 (NVIDIA A100-SXM4-40GB): MIG mode is off and changing it needs a GPU reset")
               for n in notes), notes  # fmt: skip


def test_a_lost_gpu_is_said_lost_not_in_mig_mode_off(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    assert invoke(sim, "sim", "fault", "lost", "gpu1").exit_code == 0
    r = invoke(sim, "k8s", "resources", "--kubernetes", "1.37", "--node", NODE, "--json")
    notes = [n for n in json.loads(r.stdout)["sliceNotes"] if n.startswith("0000:04:00.0")]
    assert notes == [
        "0000:04:00.0 (NVIDIA A100-SXM4-40GB): the GPU is lost (NVML cannot answer for it): no MIG slices offered "
        "(see: vgpukit health 0000:04:00.0)"
    ]


def test_k8s_resources_shows_the_devices_shared_by_capacity(a100: Path) -> None:
    library = a100 / "usr/lib/vgpukit/libvgpukit-cuda.so"
    library.parent.mkdir(parents=True, exist_ok=True)
    library.write_text("a stand-in\n")
    try:
        args = (
            "k8s",
            "resources",
            "--node",
            NODE,
            "--share-by-capacity",
            "gpu-0000-03-00-0,gpu-0000-99-00-0",
            "--json",
        )
        for release, shared in (("1.36", True), ("1.35", False)):  # the gate's default in the release
            r = invoke(a100, *args[:2], "--kubernetes", release, *args[2:])
            assert r.exit_code == 0, r.stderr
            doc = json.loads(r.stdout)
            names = {d["name"] for s in doc["resourceSlices"] for d in s["spec"].get("devices") or []}
            assert ("shared-gpu-0000-03-00-0" in names) == shared and ("gpu-0000-03-00-0" in names) != shared
            assert "gpu-0000-99-00-0: not shared by capacity: no such device on this node" in doc["sliceNotes"]
    finally:
        library.unlink()


def test_dra_plugin_refuses_an_effect_without_taints_a_bad_node_and_a_bad_share(a100: Path) -> None:
    base = ("k8s", "dra-plugin", "--kubeconfig", "/nonexistent")
    _refused(invoke(a100, *base, "--node", "n1", "--device-taints", "off", "--unhealthy-effect", "NoExecute"),
             "--unhealthy-effect")  # fmt: skip
    _refused(invoke(a100, *base, "--node", "Node_1"), "--node")
    _refused(
        invoke(a100, *base, "--node", "n1", "--share-by-capacity", "gpu-0000-99-00-0,mig-nonsense"), "mig-nonsense"
    )
    _refused(invoke(a100, "k8s", "dra-plugin", "--node", "n1", "--kubeconfig", "/etc/passwd"), "not a kubeconfig file")


@pytest.mark.parametrize(
    ("release", "api"), [("1.34", "v1alpha3"), ("1.35", "v1alpha3"), ("1.36", "v1beta2"), ("1.37", "v1")]
)
def test_taint_rules_cover_a_gpu_and_every_piece_of_it(a100: Path, release: str, api: str) -> None:
    """gpu1 is in MIG mode with a 3g.20gb slice: its rules name the slice and every slice it could make on
    demand; each rule validates against the release's schema; gpu0's name none of gpu1's devices."""
    r = invoke(a100, "k8s", "dra-taint-rules", "gpu1", "--node", NODE, "--kubernetes", release)
    assert r.exit_code == 0, r.stderr
    rules = list(yaml.safe_load_all(r.stdout))
    devices = {d["spec"]["deviceSelector"]["device"] for d in rules}
    assert any(d.startswith("mig-") for d in devices) and any("-mig-3g-20gb-" in d for d in devices)
    assert all(d.startswith(("mig-", "gpu-0000-04-00-0-")) for d in devices), devices
    for doc in rules:
        assert doc["apiVersion"] == f"resource.k8s.io/{api}" and doc["spec"]["deviceSelector"]["pool"] == NODE
        assert doc["spec"]["taint"] == {"key": "gpu.vgpukit.io/maintenance", "value": "planned", "effect": "NoExecute"}
        kubernetes_validate.validate(doc, release, strict=True)
    other = invoke(a100, "--json", "k8s", "dra-taint-rules", "gpu0", "--node", NODE, "--kubernetes", release)
    mine = {d["spec"]["deviceSelector"]["device"] for d in json.loads(other.stdout)["deviceTaintRules"]}
    assert mine == {"gpu-0000-03-00-0"} and not mine & devices


def test_taint_rules_refuse_a_dry_run_before_1_35_and_what_is_not_a_gpu(a100: Path) -> None:
    _refused(invoke(a100, "k8s", "dra-taint-rules", "gpu0", "--node", NODE, "--kubernetes", "1.34", "--effect", "None"),
             "effect None")  # fmt: skip
    r = invoke(a100, "k8s", "dra-taint-rules", "nic0", "--node", NODE)
    assert r.exit_code == 3 and "no GPU nic0" in r.stderr
