"""Device names that match what users see elsewhere: ``gpuN`` is ``nvidia-smi -i N`` and never the
BMC's console VGA, names stay put when a device changes driver, the console is not rebound without
--force, model names come from the system's PCI ID database."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Run, as_json, make_sim, sim_host
from vgpukit import naming
from vgpukit.data.pci_names import PciNames
from vgpukit.errors import NotFound
from vgpukit.host import Host
from vgpukit.pci import Scan
from vgpukit.sim.build import builtin_profiles
from vgpukit.sim.nvml import SimNvml

BMC = {"hgx-a100": "0000:11:00.0", "t4-mdev": "0000:02:00.0", "h100-vgpu": "0000:02:00.0"}


@pytest.mark.parametrize("profile", sorted(builtin_profiles()))
def test_gpu_n_is_the_nvml_index_on_every_profile(tmp_path: Path, profile: str) -> None:
    sim = make_sim(tmp_path / profile, profile)
    names = naming.aliases(Scan(sim_host(sim)))
    gpus = SimNvml(sim).gpus()
    assert [names[g.bdf] for g in gpus] == [f"gpu{g.index}" for g in gpus]
    if profile in BMC:  # the console VGA is there, behind its own bridge, and has no gpuN
        dev = Scan(sim_host(sim)).device(BMC[profile])
        assert (dev.ids, dev.boot_vga, dev.kind) == ("1a03:2000", True, "display")
        assert BMC[profile] not in names and len(dev.parents) == 2


def test_the_bmc_on_bus_02_is_not_gpu0(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    host = sim_host(sim)
    assert naming.resolve(host, "gpu0").bdf == "0000:3b:00.0"
    with pytest.raises(NotFound, match="it has 2 GPUs"):
        naming.resolve(host, "gpu2")
    doc = as_json(run_cli(sim, "devices", "--kind", "display", "--json"))
    assert [(d["bdf"], d["alias"], d["boot_vga"]) for d in doc["devices"]] == [("0000:02:00.0", None, True)]


PROFILE = """
version: 1
name: mixed
numa_nodes: {0: '0-3'}
drivers: {nvidia: ['10de:1eb8'], amdgpu: ['1002:740f'], ast: ['1a03:2000'], pcieport: ['class:0604']}
models:
  rp: {ids: '8086:2030', class: '0x060400'}
  t4: {ids: '10de:1eb8', class: '0x030200', gpu: {name: Tesla T4, model: Tesla-T4, mig_capable: false}}
  mi210: {ids: '1002:740f', class: '0x038000'}
  vga: {ids: '1a03:2000', class: '0x030000', boot_vga: true}
host_bridges:
- name: pci0000:80
  devices:
  - {bdf: '0000:80:01.0', model: rp, children: [{bdf: '0000:81:00.0', model: t4}]}
- name: pci0000:00
  devices:
  - {bdf: '0000:00:01.0', model: rp, children: [{bdf: '0000:01:00.0', model: mi210}]}
  - {bdf: '0000:00:02.0', model: rp, children: [{bdf: '0000:02:00.0', model: vga}]}
  - {bdf: '0000:00:03.0', model: rp, children: [{bdf: '0000:03:00.0', model: t4}]}
"""


def test_nvidia_gpus_first_in_nvml_order_then_the_others(tmp_path: Path) -> None:
    """The profile lists the GPUs out of bus order; the simulated driver numbers them in bus order
    (as NVML does) and gpuN follows; the AMD GPU comes after the NVIDIA ones; the console never."""
    (tmp_path / "mixed.yaml").write_text(PROFILE)
    sim = make_sim(tmp_path / "sim", str(tmp_path / "mixed.yaml"))
    assert [(g.index, g.bdf) for g in SimNvml(sim).gpus()] == [(0, "0000:03:00.0"), (1, "0000:81:00.0")]
    names = naming.aliases(Scan(sim_host(sim)))
    assert {b: n for b, n in names.items() if n.startswith("gpu")} == {
        "0000:03:00.0": "gpu0",
        "0000:81:00.0": "gpu1",
        "0000:01:00.0": "gpu2",
    }


def test_names_stay_when_a_gpu_moves_to_vfio(sim_dir: Path, run_cli: Run) -> None:
    host = sim_host(sim_dir)
    before = naming.aliases(Scan(host))
    gpu1 = naming.resolve(host, "gpu1").bdf
    r = run_cli(sim_dir, "bind", "gpu0", "--driver", "vfio-pci")
    assert r.exit_code == 0, r.stderr
    assert Scan(host).device(naming.resolve(host, "gpu0").bdf or "").driver == "vfio-pci"
    assert naming.resolve(host, "gpu1").bdf == gpu1 == "0000:04:00.0"
    assert naming.aliases(Scan(host)) == before


def test_the_console_is_not_rebound_without_force(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    for args in (("bind", "02:00.0", "--driver", "vfio-pci"), ("unbind", "0000:02:00.0")):
        r = run_cli(sim, *args)
        assert r.exit_code == 4 and r.stderr.count("\n") == 1, r.stderr
        assert "console display device (boot_vga)" in r.stderr and "--force" in r.stderr
        assert Scan(sim_host(sim)).device("0000:02:00.0").driver == "ast"  # nothing done
    r = run_cli(sim, "bind", "02:00.0", "--driver", "vfio-pci", "--force")
    assert r.exit_code == 0 and Scan(sim_host(sim)).device("0000:02:00.0").driver == "vfio-pci"
    assert run_cli(sim, "bind", "02:00.0", "--restore").exit_code == 4  # moving it back is a move too
    assert run_cli(sim, "bind", "02:00.0", "--restore", "--force").exit_code == 0


# ----------------------------------------------------------------------------- the PCI ID database
PCI_IDS = """\
# a pci.ids in the host's format (vendor, tab device, two tabs subvendor subdevice)
10de  NVIDIA Corporation (sim db)
\t1eb7  TU104GL [Not this one]
\t1eb8  TU104GL [Tesla T4]
\t\t10de 12a2  Tesla T4 16GB (sim db)
\t\t10de 12a3  Tesla T4 other board
\t1eb9  TU104GL [Next]
\t\t10de 12a2  wrong device's board
1a03  ASPEED Technology, Inc.
\t2000  ASPEED Graphics Family
1a04  Next vendor
\t1eb8  not NVIDIA
C 03  Display controller
"""
HWDB = """\
# hwdb text, as udev ships it
pci:v000010DE*
 ID_VENDOR_FROM_DATABASE=NVIDIA Corporation (hwdb)

pci:v000010DEd00001EB8*
 ID_MODEL_FROM_DATABASE=TU104GL [Tesla T4] (hwdb)

pci:v000010DEd00001EB8sv000010DEsd000012A2*
 ID_MODEL_FROM_DATABASE=Tesla T4 16GB (hwdb)
"""


def _t4_name(sim: Path) -> str:
    return Scan(sim_host(sim)).device("0000:3b:00.0").name


def test_names_come_from_the_hosts_pci_ids(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    assert _t4_name(sim) == "NVIDIA Tesla T4"  # neither database under this root: the built-in list
    (sim / "usr/lib/udev/hwdb.d").mkdir(parents=True)
    (sim / "usr/lib/udev/hwdb.d/20-pci-vendor-model.hwdb").write_text(HWDB)
    assert _t4_name(sim) == "NVIDIA Corporation (hwdb) TU104GL [Tesla T4] (hwdb)"
    names = PciNames(sim_host(sim))
    assert names.subsystem_name("10de", "1eb8", "10de:12a2") == "Tesla T4 16GB (hwdb)"
    (sim / "usr/share/misc").mkdir(parents=True)
    (sim / "usr/share/misc/pci.ids").write_text(PCI_IDS)  # pci.ids wins over hwdb
    assert _t4_name(sim) == "NVIDIA Corporation (sim db) TU104GL [Tesla T4]"
    names = PciNames(sim_host(sim))
    assert names.source == "pci.ids"
    assert names.subsystem_name("10de", "1eb8", "10de:12a2") == "Tesla T4 16GB (sim db)"
    assert names.subsystem_name("10de", "1eb8", "10de:ffff") is None
    assert names.subsystem_name("10de", "1eb7", "10de:12a2") is None  # only under its own device
    assert names.device_name("1a03", "1eb8") == "ASPEED Technology, Inc. device 1eb8"  # not the next vendor's
    assert names.device_name("10de", "20b0") == "NVIDIA Corporation (sim db) A100-SXM4-40GB"  # too old: built-in
    assert names.device_name("abcd", "0001") == "[abcd:0001]"
    doc = as_json(run_cli(sim, "devices", "--kind", "gpu", "--json"))
    assert doc["devices"][0]["name"] == "NVIDIA Corporation (sim db) TU104GL [Tesla T4]"
    assert doc["devices"][0]["subsystem_name"] == "Tesla T4 16GB (sim db)"  # the board (10de:12a2)


def test_a_database_linked_out_of_the_root_is_not_read(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    outside = tmp_path / "outside.ids"
    outside.write_text(PCI_IDS.replace("(sim db)", "(outside)"))
    (sim / "usr/share/misc").mkdir(parents=True)
    (sim / "usr/share/misc/pci.ids").symlink_to(outside)
    assert _t4_name(sim) == "NVIDIA Tesla T4"


def test_the_systems_pci_ids_is_used(tmp_path: Path) -> None:
    """The real database (Debian's pci.ids, installed by scripts/setup.sh), read where it is."""
    if not Path("/usr/share/misc/pci.ids").is_file():
        if os.environ.get("CI"):
            pytest.fail("/usr/share/misc/pci.ids is missing: scripts/setup.sh installs the pci.ids package")
        pytest.skip("no /usr/share/misc/pci.ids (apt-get install pci.ids)")
    names = PciNames(Host())
    assert names.source == "pci.ids"
    assert names.device_name("10de", "1eb8") == "NVIDIA Corporation TU104GL [Tesla T4]"
    assert names.device_name("1a03", "2000") == "ASPEED Technology, Inc. ASPEED Graphics Family"
    # a root that carries a copy of it reads the copy
    (tmp_path / "usr/share/misc").mkdir(parents=True)
    (tmp_path / "usr/share/misc/pci.ids").write_bytes(Path("/usr/share/misc/pci.ids").read_bytes())
    assert PciNames(Host(tmp_path)).device_name("15b3", "101b") == "Mellanox Technologies MT28908 Family [ConnectX-6]"


def test_json_devices_carry_boot_vga(tmp_path: Path, run_cli: Run) -> None:
    sim = make_sim(tmp_path / "h100", "h100-vgpu")
    doc = as_json(run_cli(sim, "devices", "--json"))
    flags = {d["bdf"]: d["boot_vga"] for d in doc["devices"] if d["kind"] in ("gpu", "display")}
    assert flags["0000:02:00.0"] is True and flags["0000:41:00.0"] is False
    assert json.dumps(doc).count('"boot_vga": true') == 1


def test_the_console_goes_to_a_vm_only_after_a_forced_bind(tmp_path: Path, run_cli: Run) -> None:
    from vgpukit.attach.planner import targets_for
    from vgpukit.errors import Busy

    sim = make_sim(tmp_path / "t4", "t4-mdev")
    with pytest.raises(Busy, match="console display device"):  # libvirt would take it from its driver
        targets_for(sim_host(sim), ["02:00.0"])
    r = run_cli(sim, "render", "domain", "--name", "vm", "--memory", "1024", "--vcpus", "1", "--device", "02:00.0")
    assert r.exit_code == 0 and "console display device" in r.stderr  # rendering warns
    assert run_cli(sim, "bind", "02:00.0", "--driver", "vfio-pci", "--force").exit_code == 0
    assert [t.bdf for t in targets_for(sim_host(sim), ["02:00.0"])] == ["0000:02:00.0"]
