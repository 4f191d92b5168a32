"""Every name of one GPU is one QoS key (docs/qos.md, "GPU keys"): ``gpu0``, its ``GPU-`` UUID, its
PCI address long or short all become ``gpu0`` through ``qos set|tenant add|tenant rm|status`` and
``apply``, so the shares rule holds per physical GPU; a host config with two keys of one GPU is
refused (exit 2) naming both lines."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import as_json, invoke, make_sim
from tests.qos.conftest import DaemonProc


@pytest.fixture
def sleepers() -> Iterator[list[int]]:
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(3)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def gpu_uuid(sim: Path, alias: str) -> str:
    gpus = as_json(invoke(sim, "devices", "--json"))["devices"]
    return str(next(d["gpu"]["uuid"] for d in gpus if d.get("alias") == alias))


def test_every_name_of_a_gpu_is_one_key_through_the_qos_commands(tmp_path: Path, sleepers: list[int]) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    uuid = gpu_uuid(sim, "gpu0")
    d = DaemonProc(sim, sim=True).start()
    try:
        add = ["--class", "online", "--share", "90"]
        assert invoke(sim, "qos", "tenant", "add", "gpu0", "on1", *add, "--pid", str(sleepers[0])).exit_code == 0
        for i, name in enumerate((uuid, "0000:03:00.0", "03:00.0")):
            r = invoke(sim, "qos", "tenant", "add", name, f"on{i + 2}", *add, "--pid", str(sleepers[1]))
            assert r.exit_code == 4 and "gpu0: online shares add up to 180%" in r.stderr, (name, r.stderr)
        assert [g["gpu"] for g in d.req(op="status")["gpus"]] == ["gpu0"]
        r = invoke(sim, "qos", "set", "24:00.0", "--policy", "burst-share")
        assert r.exit_code == 0 and "gpu3" in r.stdout, r.stdout + r.stderr
        for name in ("gpu3", "0000:24:00.0", "24:00.0", gpu_uuid(sim, "gpu3")):
            st = invoke(sim, "qos", "status", name, "--json")
            assert st.exit_code == 0, (name, st.stderr)
            assert [g["gpu"] for g in as_json(st)["gpus"]] == ["gpu3"]
        dra = gpu_uuid(sim, "gpu2")  # a key written as given (the DRA plugin's UUID keys) is still found
        d.req(op="set", gpu=dra, policy="fixed-share", slice_ms=None, dry_run=False)
        assert [g["gpu"] for g in as_json(invoke(sim, "qos", "status", dra, "--json"))["gpus"]] == [dra]
        assert invoke(sim, "qos", "tenant", "rm", uuid, "on1").exit_code == 0
        assert d.status("gpu0") == {}
    finally:
        d.stop()


def test_apply_writes_the_canonical_key_and_refuses_two_keys_of_one_gpu(tmp_path: Path, sleepers: list[int]) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    t = {"class": "online", "share": 80}
    gpus = {"gpu1": {"tenants": {"a": {**t, "pids": [sleepers[0]]}}}, "0000:04:00.0": {"tenants": {"b": t}}}
    gpus["0000:04:00.0"]["tenants"]["b"]["pids"] = [sleepers[1]]
    f = tmp_path / "h.yaml"
    f.write_text(yaml.safe_dump({"version": "vgpukit.host/v1", "configs": {"c": {"qos": {"gpus": gpus}}}}))
    lines = f.read_text().splitlines()
    at = [n + 1 for n, line in enumerate(lines) if line.strip() in ("gpu1:", "0000:04:00.0:", "'0000:04:00.0':")]
    for cmd in ("diff", "apply", "assert"):
        r = invoke(sim, cmd, "-f", str(f))
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, (cmd, r.stderr)
        assert "GPU keys 0000:04:00.0 and gpu1 name one device (gpu1)" in r.stderr, r.stderr
        assert all(f"{f}:{n}:" in r.stderr for n in at), (at, r.stderr)
    del gpus["gpu1"]
    f.write_text(yaml.safe_dump({"version": "vgpukit.host/v1", "configs": {"c": {"qos": {"gpus": gpus}}}}))
    assert invoke(sim, "apply", "-f", str(f)).exit_code == 0
    written = yaml.safe_load((sim / "etc/vgpukit/qos.yaml").read_text())
    assert list(written["gpus"]) == ["gpu1"]
    assert invoke(sim, "assert", "-f", str(f)).exit_code == 0
    r = invoke(sim, "diff", "-f", str(f), "--json")
    assert r.exit_code == 0 and as_json(r)["plan"] == []


def test_a_key_on_a_gpu_the_configs_own_mig_switches_says_it_will_be(tmp_path: Path, sleepers: list[int]) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    f = tmp_path / "h.yaml"
    f.write_text(
        "version: vgpukit.host/v1\nconfigs:\n  c:\n    mig: m\n    qos:\n      gpus:\n        gpu1:\n"
        f"          tenants: {{t: {{class: online, share: 10, pids: [{sleepers[0]}]}}}}\n"
        "mig-configs:\n  m:\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {'3g.20gb': 1}\n"
    )
    r = invoke(sim, "diff", "-f", str(f))
    assert r.exit_code == 4 and "0000:04:00.0 will be in MIG mode (the config's mig: enables it)" in r.stderr, r.stderr
