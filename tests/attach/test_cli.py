"""The commands end to end on simulated hosts, with libvirt's test driver behind test:/// URIs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import Run
from vgpukit.host import Host
from vgpukit.sim.kernel import SimKernel

from ..conftest import as_json
from .conftest import libvirt_or_skip, validate_domain_xml

MTTY_UUID = "c2177883-f1bb-47f0-914d-32a22e3a8804"
NIC0 = "0000:05:00.0"
NIC_VF = "0000:05:00.2"
NIC_VF2 = "0000:05:00.3"


def make_vfs(sim: Path, pf: str = NIC0, count: int = 2, vfio: tuple[str, ...] = (NIC_VF, NIC_VF2)) -> None:
    """SR-IOV VFs on the sim, bound to vfio-pci the way the kernel does it."""
    h = Host(sim, kernel=SimKernel(sim))
    h.write(h.pci_device(pf, "sriov_numvfs"), str(count))
    for vf in vfio:
        h.write(h.pci_device(vf, "driver_override"), "vfio-pci")
        drv = h.link_name(h.pci_device(vf, "driver"))
        if drv:
            h.write(h.pci_driver(drv, "unbind"), vf)
        h.write(h.sys("bus", "pci", "drivers_probe"), vf)


def make_mdev(sim: Path, uuid: str = MTTY_UUID) -> None:
    h = Host(sim, kernel=SimKernel(sim))
    h.write(h.sys("class", "mdev_bus", "mtty", "mdev_supported_types", "mtty-2", "create"), uuid)


def node_file(tmp: Path, holder_bus: str = "0x05", holder_fn: str = "0x3") -> str:
    """A test:/// node with domain 'vm1' (empty) and 'other' holding a VF."""
    f = tmp / "node.xml"
    f.write_text(f"""<node>
  <domain type='kvm'><name>vm1</name><memory unit='MiB'>1024</memory>
    <os><type arch='x86_64' machine='q35'>hvm</type></os></domain>
  <domain type='kvm'><name>other</name><memory unit='MiB'>1024</memory>
    <os><type arch='x86_64' machine='q35'>hvm</type></os>
    <devices><hostdev mode='subsystem' type='pci' managed='yes'><source>
      <address domain='0x0000' bus='{holder_bus}' slot='0x00' function='{holder_fn}'/></source></hostdev></devices>
  </domain>
</node>
""")
    return f"test://{f}"


def test_render_hostdev_gpu(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    res = run_cli(sim_dir, "render", "hostdev", "gpu1")
    assert res.exit_code == 0, res.stderr
    assert "bus='0x04' slot='0x00' function='0x0'" in res.stdout and "managed='yes'" in res.stdout


def test_render_hostdev_json_nic_vf(sim_dir: Path, run_cli: Run) -> None:
    make_vfs(sim_dir)
    res = run_cli(sim_dir, "render", "hostdev", NIC_VF, "--mac", "52:54:00:AA:00:01", "--vlan", "42", "--json")
    doc = as_json(res)
    assert doc["schema"] == "vgpukit.render/v1" and doc["key"] == f"pci:{NIC_VF}"
    assert "<interface type='hostdev'" in doc["xml"] and "52:54:00:aa:00:01" in doc["xml"]


def test_render_domain_validates_and_defines(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    make_vfs(sim_dir)
    res = run_cli(sim_dir, "render", "domain", "--name", "gpuvm", "--memory", "8192", "--vcpus", "8",
                  "--device", "gpu4", "--device", "gpu5", "--hugepages", "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = as_json(res)
    assert doc["numa_node"] == 1 and doc["firmware"] == "bios"
    assert "<vcpupin vcpu='7' cpuset='39'/>" in doc["xml"]  # node1 is 32-63,96-127
    validate_domain_xml(doc["xml"], tmp_path)
    libvirt = libvirt_or_skip()
    conn = libvirt.open("test:///default")
    try:
        assert conn.defineXML(doc["xml"]).name() == "gpuvm"
    finally:
        conn.close()


def test_render_domain_mdev_on_qemu_guest(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    make_mdev(qemu_sim)
    ovmf = qemu_sim / "usr/share/OVMF"
    ovmf.mkdir(parents=True)
    (ovmf / "OVMF_CODE_4M.fd").write_text("")
    (ovmf / "OVMF_VARS_4M.fd").write_text("")
    res = run_cli(qemu_sim, "render", "domain", "--name", "m", "--memory", "1024", "--vcpus", "1",
                  "--device", MTTY_UUID)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert f"<address uuid='{MTTY_UUID}'/>" in res.stdout
    assert "<loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>" in res.stdout
    validate_domain_xml(res.stdout, tmp_path)


def test_render_bad_input(sim_dir: Path, run_cli: Run) -> None:
    assert run_cli(sim_dir, "render", "hostdev", "gpu42").exit_code == 3
    assert run_cli(sim_dir, "render", "hostdev", "0000:05:00.0", "--mac", "52:54:00:00:00:01").exit_code == 2
    res = run_cli(sim_dir, "render", "domain", "--name", "x y", "--memory", "1024", "--vcpus", "1")
    assert res.exit_code == 2 and "invalid domain name" in res.stderr


def test_attach_detach_config_on_test_driver(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    libvirt_or_skip()
    make_vfs(sim_dir)
    uri = node_file(tmp_path, holder_bus="0x06")
    res = run_cli(sim_dir, "attach", "vm1", NIC_VF, "gpu0", "--config", "--connect", uri, "--json")
    assert res.exit_code == 0, res.stderr
    doc = as_json(res)
    assert doc["schema"] == "vgpukit.attach/v1" and doc["changed"] is True
    assert doc["plan"] == [f"attach {NIC_VF} to vm1 (config)", "attach 0000:03:00.0 to vm1 (config)"]
    res = run_cli(sim_dir, "--dry-run", "detach", "vm1", NIC_VF, "--config", "--connect", uri, "--json")
    assert res.exit_code == 0 and as_json(res)["plan"] == []  # fresh test:/// state: nothing attached there


def test_detach_held_device_on_test_driver(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    libvirt_or_skip()
    make_vfs(sim_dir)
    uri = node_file(tmp_path)
    res = run_cli(sim_dir, "detach", "other", NIC_VF2, "--config", "--connect", uri)
    assert res.exit_code == 0, res.stderr
    assert f"done: detach {NIC_VF2} from other (config)" in res.stdout


def test_attach_refusals(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    libvirt_or_skip()
    make_vfs(sim_dir)
    uri = node_file(tmp_path)
    res = run_cli(sim_dir, "attach", "vm1", NIC_VF2, "--config", "--connect", uri)
    assert res.exit_code == 4 and "already assigned to domain 'other'" in res.stderr
    res = run_cli(sim_dir, "attach", "nope", NIC_VF, "--config", "--connect", uri)
    assert res.exit_code == 3 and "no domain 'nope'" in res.stderr
    res = run_cli(sim_dir, "attach", "vm1", "0000:05:00.7", "--config", "--connect", uri)
    assert res.exit_code == 3
    res = run_cli(sim_dir, "attach", "vm1", NIC_VF, "--connect", uri)  # running domain: live is the default
    assert res.exit_code == 5 and "--config" in res.stderr
    res = run_cli(sim_dir, "attach", "vm1", "gpu0", "--config", "--connect", "qemu+unix:///system?socket=/nonexistent")
    assert res.exit_code == 1 and "cannot connect to qemu+unix:///system?socket=/nonexistent" in res.stderr


def test_without_libvirt_python(sim_dir: Path, tmp_path: Path) -> None:
    """A real interpreter where ``import libvirt`` fails: exit 5 and say how to install it."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "libvirt.py").write_text("raise ImportError('no libvirt here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shadow), str(Path(__file__).parents[2])]))
    res = subprocess.run(
        [sys.executable, "-m", "vgpukit", "--sim", str(sim_dir), "attach", "vm1", "gpu0", "--connect", "test:///default"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert res.returncode == 5, res.stderr
    assert "pip install 'vgpukit[libvirt]'" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "vgpukit", "--sim", str(sim_dir), "render", "hostdev", "gpu0"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert res.returncode == 0 and "<hostdev" in res.stdout


def test_attach_refuses_device_held_by_a_process(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    libvirt_or_skip()
    make_mdev(qemu_sim)
    uri = node_file(tmp_path)
    held = run_cli(qemu_sim, "sim", "hold", MTTY_UUID, "--vm", "stray", "--json")
    assert held.exit_code == 0, held.stderr
    res = run_cli(qemu_sim, "attach", "vm1", MTTY_UUID, "--config", "--connect", uri)
    assert res.exit_code == 4 and f"{MTTY_UUID} is in use: /dev/vfio/" in res.stderr
    assert run_cli(qemu_sim, "sim", "release", str(as_json(held)["pid"])).exit_code == 0
    res = run_cli(qemu_sim, "attach", "vm1", MTTY_UUID, "--config", "--connect", uri)
    assert res.exit_code == 0, res.stderr
