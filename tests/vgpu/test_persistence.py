"""One persistence story for vGPUs (docs/vgpu.md, "Keeping vGPUs across reboots"): ``vgpu create
--define [--auto]`` keeps them, ``vgpu list`` says which are (DEFINED: auto, manual, no), ``vgpu
remove`` takes the definition too (``--keep-definition`` leaves it), ``vgpu define/undefine`` change it
afterwards; ``mdev create --define`` and ``mdev define`` take a type's name (``T4-4Q``) as ``vgpu``
does. The next boot is ``mdev start --all`` (what mdevctl's boot service and vgpukit's run)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import as_json, invoke

GPU0 = "0000:3b:00.0"


def definitions(sim: Path) -> dict[str, dict[str, object]]:
    """uuid -> mdevctl definition under the simulated host's /etc/mdevctl.d."""
    out = {}
    for f in (sim / "etc/mdevctl.d").glob("*/*"):
        if f.is_file():
            out[f.name] = json.loads(f.read_text())
    return out


def listed(sim: Path) -> dict[str, dict[str, object]]:
    return {v["id"]: v for v in as_json(invoke(sim, "vgpu", "list", "--json"))["vgpus"]}


def reboot(sim: Path) -> None:
    """What a boot does to mdevs: the running ones are gone, the boot service starts the auto ones."""
    running = [v["id"] for v in listed(sim).values() if v["active"] and v["interface"] == "mdev"]
    if running:
        assert invoke(sim, "mdev", "remove", *running).exit_code == 0
    assert invoke(sim, "mdev", "start", "--all").exit_code == 0


def test_create_define_auto_keeps_the_vgpus_and_list_says_so(t4_sim: Path) -> None:
    r = invoke(t4_sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2", "--define", "--auto", "--json")
    assert r.exit_code == 0, r.stderr
    made = [v["id"] for v in as_json(r)["vgpus"]]
    assert {v["start"] for v in as_json(r)["vgpus"]} == {"auto"}
    defs = definitions(t4_sim)
    assert set(defs) == set(made) and {d["start"] for d in defs.values()} == {"auto"}
    assert {d["mdev_type"] for d in defs.values()} == {"nvidia-232"}
    rows = listed(t4_sim)
    assert all(rows[u]["defined"] and rows[u]["start"] == "auto" and rows[u]["active"] for u in made)
    table = invoke(t4_sim, "vgpu", "list").stdout
    assert table.splitlines()[0].split()[-1] == "DEFINED" and all(
        line.split()[-1] == "auto" for line in table.splitlines()[1:]
    )
    reboot(t4_sim)
    assert {u for u, v in listed(t4_sim).items() if v["active"]} == set(made)


def test_remove_takes_the_definition_so_nothing_comes_back_at_boot(t4_sim: Path) -> None:
    r = invoke(t4_sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--define", "--auto", "--json")
    (uid,) = [v["id"] for v in as_json(r)["vgpus"]]
    r = invoke(t4_sim, "vgpu", "remove", uid)
    assert r.exit_code == 0, r.stderr
    assert "undefine" in r.stdout and uid not in definitions(t4_sim)
    reboot(t4_sim)
    assert listed(t4_sim) == {}


def test_keep_definition_leaves_it_listed_as_not_running_and_it_comes_back(t4_sim: Path) -> None:
    r = invoke(t4_sim, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--define", "--auto", "--json")
    (uid,) = [v["id"] for v in as_json(r)["vgpus"]]
    assert invoke(t4_sim, "vgpu", "remove", uid, "--keep-definition").exit_code == 0
    row = listed(t4_sim)[uid]
    assert (row["active"], row["start"], row["name"]) == (False, "auto", "GRID T4-4Q")
    assert "not running (made at boot)" in invoke(t4_sim, "vgpu", "list").stdout
    reboot(t4_sim)
    assert listed(t4_sim)[uid]["active"]
    # a vGPU that is only defined is removed by removing its definition
    assert invoke(t4_sim, "vgpu", "remove", uid, "--keep-definition").exit_code == 0
    assert invoke(t4_sim, "vgpu", "remove", uid).exit_code == 0
    assert listed(t4_sim) == {} and definitions(t4_sim) == {}


def test_define_and_undefine_a_running_vgpu(t4_sim: Path) -> None:
    r = invoke(t4_sim, "vgpu", "create", "gpu1", "--type", "T4-2Q", "--json")
    (uid,) = [v["id"] for v in as_json(r)["vgpus"]]
    assert listed(t4_sim)[uid]["start"] is None and "no" in invoke(t4_sim, "vgpu", "list").stdout.split()
    assert invoke(t4_sim, "vgpu", "define", uid).exit_code == 0
    assert definitions(t4_sim)[uid]["start"] == "manual"
    assert invoke(t4_sim, "vgpu", "define", uid, "--auto").exit_code == 0
    assert definitions(t4_sim)[uid]["start"] == "auto"
    assert as_json(invoke(t4_sim, "vgpu", "define", uid, "--auto", "--json"))["plan"] == []  # again: nothing
    assert invoke(t4_sim, "vgpu", "undefine", uid).exit_code == 0
    assert definitions(t4_sim) == {} and listed(t4_sim)[uid]["active"]


def test_mdev_commands_take_the_vgpu_type_name(t4_sim: Path) -> None:
    r = invoke(t4_sim, "mdev", "create", GPU0, "T4-4Q", "--define", "--json")
    assert r.exit_code == 0, r.stderr
    (made,) = as_json(r)["instances"]
    assert made["type"] == "nvidia-232" and definitions(t4_sim)[made["uuid"]]["mdev_type"] == "nvidia-232"
    r = invoke(t4_sim, "mdev", "define", "-p", "gpu1", "-t", "GRID T4-2Q", "--json")
    assert r.exit_code == 0, r.stderr
    assert as_json(r)["definition"]["type"] == "nvidia-231"
    r = invoke(t4_sim, "mdev", "create", "--type", "grid t4-8q", "--count", "2")
    assert r.exit_code == 0, r.stderr
    assert invoke(t4_sim, "mdev", "create", GPU0, "T4-99Q").exit_code == 3


def test_vgpus_on_vfs_have_no_definitions_and_say_where_persistence_is(h100_sim: Path) -> None:
    r = invoke(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-4C", "--define")
    assert r.exit_code == 5 and r.stderr.count("\n") == 1
    assert "no definitions to keep" in r.stderr and "boot-unit" in r.stderr
    assert invoke(h100_sim, "vgpu", "create", "gpu0", "--type", "H100-4C").exit_code == 0
    vf = next(iter(listed(h100_sim)))
    assert listed(h100_sim)[vf]["defined"] is False and invoke(h100_sim, "vgpu", "define", vf).exit_code == 5


def test_mdev_remove_says_an_auto_definition_stays(t4_sim: Path) -> None:
    r = invoke(t4_sim, "mdev", "create", GPU0, "nvidia-232", "--define", "--auto", "--json")
    (made,) = as_json(r)["instances"]
    r = invoke(t4_sim, "mdev", "remove", made["uuid"])
    assert r.exit_code == 0 and "stays defined (start auto: it is made again at boot)" in r.stderr
    invoke(t4_sim, "mdev", "start", "--all")
    r = invoke(t4_sim, "mdev", "remove", made["uuid"], "--json")
    assert as_json(r)["kept_definitions"] == [{"uuid": made["uuid"], "parent": GPU0, "start": "auto"}]


def test_a_host_config_names_an_mdev_type_by_its_name(t4_sim: Path, tmp_path: Path) -> None:
    doc = tmp_path / "host.yaml"
    doc.write_text(
        "version: vgpukit.host/v1\nconfigs:\n  c:\n    mdev:\n      - {parent: gpu0, type: T4-4Q, count: 2}\n"
    )
    r = invoke(t4_sim, "apply", "-f", str(doc), "--json")
    assert r.exit_code == 0, r.stderr
    assert {v["type_id"] for v in listed(t4_sim).values()} == {"nvidia-232"} and len(listed(t4_sim)) == 2
    assert as_json(invoke(t4_sim, "apply", "-f", str(doc), "--json"))["plan"] == []
