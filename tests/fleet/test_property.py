"""Properties of ``vgpukit apply`` over random valid host configs, on simulated hosts (hypothesis).

For a random document A on a fresh host, then a random document B on top of it:

* applying A succeeds; applying A again plans nothing; ``assert`` says the host matches;
* ``export`` of the host, applied, plans nothing and changes nothing;
* applying B either converges (then a re-run plans nothing) or is refused with exit 4 (in use / no
  capacity) and leaves the host exactly as it was.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import as_json, invoke, make_sim
from tests.fleet.test_apply import sysfs

UUIDS = [f"{n:08x}-0000-4000-8000-00000000000{n}" for n in range(1, 6)]
MIG_LAYOUTS = [{}, {"7g.40gb": 1}, {"3g.20gb": 2}, {"1g.5gb": 7}, {"2g.10gb": 1, "1g.5gb": 2}, {"4g.20gb": 1}]
DRIVERS = st.sampled_from(["default", "vfio-pci", "none"])


@st.composite
def guest_config(draw: st.DrawFn) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    if draw(st.booleans()):
        cfg["sriov"] = [{"device": "nvme0", "vfs": draw(st.integers(0, 3)), "driver": draw(DRIVERS)}]
    if draw(st.booleans()):
        two = draw(st.integers(0, 12))
        one = draw(st.integers(0, 24 - 2 * two))
        pins = draw(st.lists(st.sampled_from(UUIDS), unique=True, max_size=min(3, one + two)))
        cut = draw(st.integers(0, len(pins)))
        p1, p2 = pins[:cut][:one], pins[cut:][:two]
        cfg["mdev"] = [
            {"parent": "mtty", "type": "mtty-1", "count": one, **({"uuids": p1} if p1 else {})},
            {"parent": "mtty", "type": "mtty-2", "count": two, **({"uuids": p2} if p2 else {})},
        ]
    return cfg


@st.composite
def a100_config(draw: st.DrawFn) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    nics = draw(st.lists(st.sampled_from(["nic0", "nic1", "nic2", "nic3"]), unique=True, max_size=2))
    if nics:
        cfg["sriov"] = [{"device": n, "vfs": draw(st.integers(0, 16)), "driver": draw(DRIVERS)} for n in nics]
    if draw(st.booleans()):
        cfg["vfio"] = [{"device": "nvme0"}]
    gpus = draw(st.lists(st.integers(0, 7), unique=True, max_size=2))
    if gpus:
        cfg["mig"] = "m"
        layouts = [draw(st.sampled_from([None, *MIG_LAYOUTS])) for _ in gpus]
        cfg["_mig"] = [
            {"devices": [g], "mig-enabled": lay is not None} | ({"mig-devices": lay} if lay is not None else {})
            for g, lay in zip(gpus, layouts, strict=True)
        ]
    if draw(st.booleans()):  # tenants on a GPU the config leaves out of MIG mode (the QoS planner's rule)
        share = draw(st.integers(1, 100))
        key = f"gpu{min(set(range(8)) - set(gpus))}"
        cfg["qos"] = {"gpus": {key: {"policy": "fixed-share", "tenants": {"a": {"share": share, "cgroup": "a.slice"}}}}}
    return cfg


@st.composite
def mixed_config(draw: st.DrawFn) -> dict[str, Any]:
    """mixed-a100-t4: MIG on the two A100s (NVML 0, 2); the T4 (1) may only be asked for MIG off."""
    gpus = draw(st.lists(st.integers(0, 2), unique=True, max_size=3))
    if not gpus:
        return {}
    entries = []
    for g in gpus:
        lay = None if g == 1 else draw(st.sampled_from([None, *MIG_LAYOUTS]))
        entries.append(
            {"devices": [g], "mig-enabled": lay is not None} | ({"mig-devices": lay} if lay is not None else {})
        )
    return {"mig": "m", "_mig": entries}


@st.composite
def t4_config(draw: st.DrawFn) -> dict[str, Any]:
    sizes = {"T4-1Q": 16, "T4-2Q": 8, "T4-4Q": 4, "T4-8Q": 2, "T4-16Q": 1}
    out = []
    for gpu in draw(st.lists(st.sampled_from(["gpu0", "gpu1"]), unique=True, max_size=2)):
        t = draw(st.sampled_from(sorted(sizes)))
        out.append({"device": gpu, "type": t, "count": draw(st.integers(0, sizes[t]))})
    return {"vgpu": out} if out else {}


@st.composite
def h100_config(draw: st.DrawFn) -> dict[str, Any]:
    vfs = draw(st.sampled_from([0, 4, 8, 32]))
    cfg: dict[str, Any] = {"sriov": [{"device": "gpu0", "vfs": vfs}]} if draw(st.booleans()) else {}
    limit = vfs if cfg else 32
    if limit and draw(st.booleans()):
        t, most = draw(st.sampled_from([("H100-4C", 20), ("H100-10C", 8), ("H100-40C", 2)]))
        cfg["vgpu"] = [{"device": "gpu0", "type": t, "count": draw(st.integers(0, min(most, limit)))}]
    return cfg


def document(cfg: dict[str, Any]) -> str:
    cfg = dict(cfg)
    mig = cfg.pop("_mig", None)
    doc: dict[str, Any] = {"version": "vgpukit.host/v1", "configs": {"c": cfg}}
    if mig is not None:
        doc["mig-configs"] = {"m": mig}
    return yaml.safe_dump(doc, sort_keys=False)


PROFILES = {
    "mixed-a100-t4": mixed_config(),
    "qemu-guest": guest_config(),
    "hgx-a100": a100_config(),
    "t4-mdev": t4_config(),
    "h100-vgpu": h100_config(),
}
# kept small (the suite's time budget); VGPUKIT_FUZZ_EXAMPLES=10 runs ten times as many
SCALE = float(os.environ.get("VGPUKIT_FUZZ_EXAMPLES", "1"))
BASE = {"mixed-a100-t4": 3, "qemu-guest": 5, "hgx-a100": 3, "t4-mdev": 3, "h100-vgpu": 3}
EXAMPLES = {p: max(1, int(n * SCALE)) for p, n in BASE.items()}


def apply(sim: Path, path: Path, text: str) -> tuple[int, dict[str, Any]]:
    path.write_text(text)
    r = invoke(sim, "apply", "-f", str(path), "--json")
    return r.exit_code, as_json(r)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_apply_converges_export_is_a_no_op_and_refusals_change_nothing(
    tmp_path_factory: pytest.TempPathFactory, profile: str
) -> None:
    base = make_sim(tmp_path_factory.mktemp("template") / "host", profile)
    work = tmp_path_factory.mktemp("work")

    @settings(
        max_examples=EXAMPLES[profile],
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(first=PROFILES[profile], second=PROFILES[profile])
    def check(first: dict[str, Any], second: dict[str, Any]) -> None:
        sim = work / "host"
        shutil.rmtree(sim, ignore_errors=True)
        shutil.copytree(base, sim, symlinks=True)
        doc = work / "a.yaml"
        rc, out = apply(sim, doc, document(first))
        assert rc == 0, out
        rc, out = apply(sim, doc, document(first))
        assert (rc, out["plan"]) == (0, []), out
        assert invoke(sim, "assert", "-f", str(doc)).exit_code == 0
        exported = invoke(sim, "export").stdout
        tree = sysfs(sim)
        rc, out = apply(sim, work / "export.yaml", exported)
        assert (rc, out["plan"]) == (0, []), out
        assert sysfs(sim) == tree
        rc, out = apply(sim, work / "b.yaml", document(second))
        if rc == 0:
            rc, out = apply(sim, work / "b.yaml", document(second))
            assert (rc, out["plan"]) == (0, []), out
        else:
            assert rc == 4 and out["error"] in ("in-use", "no-capacity", "conflict"), out
            assert sysfs(sim) == tree, out

    check()
