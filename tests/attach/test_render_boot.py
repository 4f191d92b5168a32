"""``render domain`` makes a VM that boots: disks (format from the image's header), CD-ROM, NICs, a
serial console, graphics; and ``render domain --from FILE`` adds devices to a user's own domain.
Every domain is checked with libvirt's schema (virt-xml-validate) and defined on libvirt's test driver;
the real libvirtd starts one in the real-kernel suite (tests/realkernel/kubevirt_guest.py)."""

from __future__ import annotations

import os
import stat
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import Run
from vgpukit.errors import InvalidInput

from ..conftest import as_json
from .conftest import libvirt_or_skip, validate_domain_xml
from .test_cli import MTTY_UUID, make_mdev

IMAGES = "/var/lib/libvirt/images"
BASE = ["render", "domain", "--name", "vm", "--memory", "1G", "--vcpus", "2"]


def qcow2_header(version: int = 3, backing: str = "", backing_format: str | None = None) -> bytes:
    """A qcow2 header as QEMU's docs/interop/qcow2.txt lays it out (not vgpukit's reader)."""
    length = 104 if version >= 3 else 72
    ext = b""
    if backing_format is not None:
        name = backing_format.encode()
        ext = struct.pack(">II", 0xE2792ACA, len(name)) + name + b"\0" * (-len(name) % 8)
    ext += struct.pack(">II", 0, 0)  # end of the header extensions
    name_at = length + len(ext) if backing else 0
    fields = struct.pack(">4sIQIIQ", b"QFI\xfb", version, name_at, len(backing), 16, 1 << 30)
    head = fields + b"\0" * (length - len(fields))
    if version >= 3:
        head = head[:100] + struct.pack(">I", length)
    return head + ext + backing.encode()


def image(sim: Path, name: str, data: bytes) -> str:
    path = sim / IMAGES.strip("/") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data + b"\0" * 4096)
    return f"{IMAGES}/{name}"


def parse(xml: str) -> ET.Element:
    return ET.fromstring(xml)


def define(xml: str) -> ET.Element:
    """Define on libvirt's test driver and read back what libvirt stored."""
    libvirt = libvirt_or_skip()
    conn = libvirt.open("test:///default")
    try:
        return ET.fromstring(conn.defineXML(xml).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    finally:
        conn.close()


def test_the_rendered_vm_has_what_booting_needs(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    """The simulated host's own qcow2 image and installer ISO, its default network: a VM that boots."""
    res = run_cli(sim_dir, *BASE, "--device", "gpu1", "--disk", f"{IMAGES}/demo.qcow2",
                  "--cdrom", f"{IMAGES}/debian-12-netinst.iso", "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = as_json(res)
    assert doc["disks"] == [
        {"path": f"{IMAGES}/demo.qcow2", "format": "qcow2", "device": "disk", "target": "vda"},
        {"path": f"{IMAGES}/debian-12-netinst.iso", "format": "raw", "device": "cdrom", "target": "sda"},
    ]
    assert doc["networks"] == [{"type": "network", "source": "default"}] and doc["graphics"] is None
    assert not [w for w in doc["warnings"] if "network" in w or "nothing to boot" in w], doc["warnings"]
    validate_domain_xml(doc["xml"], tmp_path)
    back = define(doc["xml"])
    assert [b.get("dev") for b in back.findall("os/boot")] == ["cdrom", "hd"]
    disk, cdrom = back.findall("devices/disk")
    assert disk.find("driver").get("type") == "qcow2" and disk.find("target").get("bus") == "virtio"  # type: ignore[union-attr]
    assert cdrom.get("device") == "cdrom" and cdrom.find("readonly") is not None
    assert back.find("devices/interface[@type='network']/source").get("network") == "default"  # type: ignore[union-attr]
    assert back.find("devices/console[@type='pty']/target[@type='serial']") is not None
    assert back.find("devices/graphics") is None  # a serial console only, unless asked
    assert back.find("devices/hostdev/source/address").get("bus") == "0x04"  # type: ignore[union-attr]


def test_nothing_to_boot_from_is_said(sim_dir: Path, run_cli: Run) -> None:
    res = run_cli(sim_dir, *BASE)
    assert res.exit_code == 0 and "nothing to boot from" in res.stderr, res.stderr


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (qcow2_header(), "qcow2"),
        (qcow2_header(version=2), "qcow2"),
        (qcow2_header(version=1), "qcow"),
        (b"QED\0" + b"\0" * 60, "qed"),
        (b"KDMV" + b"\0" * 60, "vmdk"),
        (b"# Disk DescriptorFile\nversion=1\n", "vmdk"),
        (b"\0" * 64 + struct.pack("<I", 0xBEDA107F), "vdi"),
        (b"conectix" + b"\0" * 56, "vpc"),
        (b"\xeb\x63\x90" + b"\0" * 509, "raw"),  # an MBR boot sector: raw
        (b"", "raw"),
    ],
    ids=["qcow2", "qcow2-v2", "qcow", "qed", "vmdk", "vmdk-descriptor", "vdi", "vpc", "mbr", "empty"],
)
def test_disk_format_comes_from_the_header(sim_dir: Path, run_cli: Run, data: bytes, fmt: str, tmp_path: Path) -> None:
    path = image(sim_dir, "disk.img", data)
    res = run_cli(sim_dir, *BASE, "--disk", path, "--json")
    assert res.exit_code == 0, res.stderr
    doc = as_json(res)
    assert doc["disks"][0]["format"] == fmt
    assert parse(doc["xml"]).find("devices/disk/driver").get("type") == fmt  # type: ignore[union-attr]
    validate_domain_xml(doc["xml"], tmp_path)


def test_an_image_libvirt_cannot_take_is_refused_with_the_conversion(sim_dir: Path, run_cli: Run) -> None:
    path = image(sim_dir, "win.vhdx", b"vhdxfile" + b"\0" * 56)
    res = run_cli(sim_dir, *BASE, "--disk", path)
    assert res.exit_code == 2 and "is a vhdx image, which libvirt does not take" in res.stderr, res.stderr
    assert f"qemu-img convert -O qcow2 {path} {IMAGES}/win.qcow2" in res.stderr


def test_the_format_said_wins_over_the_header(sim_dir: Path, run_cli: Run) -> None:
    """A raw image whose guest wrote a qcow2 header stays raw when told; a wrong format is refused."""
    path = image(sim_dir, "guest-wrote-a-header.img", qcow2_header(backing="/etc/shadow"))
    res = run_cli(sim_dir, *BASE, "--disk", f"path={path},format=raw", "--json")
    assert res.exit_code == 0, res.stderr
    assert as_json(res)["disks"][0]["format"] == "raw" and "shadow" not in res.stderr
    res = run_cli(sim_dir, *BASE, "--disk", f"{path},format=vmdk")
    assert res.exit_code == 2 and "is not vmdk (its header says qcow2)" in res.stderr, res.stderr
    res = run_cli(sim_dir, *BASE, "--disk", f"{path},cache=none")
    assert res.exit_code == 2 and "PATH,format=FMT" in res.stderr, res.stderr


def test_a_backing_file_is_named_and_an_unrecorded_format_warned(sim_dir: Path, run_cli: Run) -> None:
    """libvirt (since 6.0) refuses to start an overlay whose backing format is not recorded."""
    plain = image(sim_dir, "plain.qcow2", qcow2_header(backing="base.qcow2"))
    res = run_cli(sim_dir, *BASE, "--disk", plain)
    assert res.exit_code == 0 and "backing file (base.qcow2) whose format the image does not record" in res.stderr
    assert "qemu-img rebase -u -F qcow2 -b base.qcow2" in res.stderr
    recorded = image(sim_dir, "recorded.qcow2", qcow2_header(backing="base.qcow2", backing_format="qcow2"))
    res = run_cli(sim_dir, *BASE, "--disk", recorded)
    assert res.exit_code == 0 and "is an overlay of base.qcow2" in res.stderr and "refuses" not in res.stderr


def test_missing_and_odd_images(sim_dir: Path, run_cli: Run) -> None:
    res = run_cli(sim_dir, *BASE, "--disk", f"{IMAGES}/nope.qcow2")
    assert res.exit_code == 3 and "qemu-img create -f qcow2" in res.stderr, res.stderr
    res = run_cli(sim_dir, *BASE, "--cdrom", "/var/lib/libvirt")
    assert res.exit_code == 2 and "not a regular file or a block device" in res.stderr, res.stderr
    outside = sim_dir.parent / "outside.qcow2"
    outside.write_bytes(qcow2_header())
    os.symlink(outside, sim_dir / IMAGES.strip("/") / "link.qcow2")
    res = run_cli(sim_dir, *BASE, "--disk", f"{IMAGES}/link.qcow2")
    assert res.exit_code == 2 and "outside" in res.stderr, res.stderr  # the host door holds


def test_a_block_device_is_raw_and_never_read(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    dev = sim_dir / "dev" / "vg0-data"
    os.mknod(dev, stat.S_IFBLK | 0o600, os.makedev(7, 0))  # loop0's numbers: stat only, never opened
    res = run_cli(sim_dir, *BASE, "--disk", "/dev/vg0-data", "--json")
    assert res.exit_code == 0, res.stderr
    el = parse(as_json(res)["xml"]).find("devices/disk")
    assert el is not None and el.get("type") == "block" and el.find("source").get("dev") == "/dev/vg0-data"  # type: ignore[union-attr]
    assert el.find("driver").get("type") == "raw"  # type: ignore[union-attr]
    validate_domain_xml(as_json(res)["xml"], tmp_path)


def test_networks_as_virt_install_spells_them(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    (sim_dir / "sys/class/net/br0/bridge").mkdir(parents=True)
    res = run_cli(sim_dir, *BASE, "--network", "network=default", "--bridge", "br0", "--network", "bridge=br0",
                  "--graphics", "spice", "--json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = as_json(res)
    assert doc["networks"] == [
        {"type": "network", "source": "default"},
        {"type": "bridge", "source": "br0"},
        {"type": "bridge", "source": "br0"},
    ]
    assert not [w for w in doc["warnings"] if "network" in w or "bridge" in w], doc["warnings"]
    validate_domain_xml(doc["xml"], tmp_path)
    back = define(doc["xml"])
    assert back.find("devices/graphics").get("type") == "spice"  # type: ignore[union-attr]
    for args in (["--no-network"], ["--network", "none"]):
        res = run_cli(sim_dir, *BASE, *args, "--json")
        assert res.exit_code == 0 and as_json(res)["networks"] == [], res.stderr
        assert parse(as_json(res)["xml"]).find("devices/interface") is None


def test_a_network_or_bridge_the_host_lacks_is_warned(sim_dir: Path, run_cli: Run) -> None:
    res = run_cli(sim_dir, *BASE, "--network", "lab", "--bridge", "br9")
    assert res.exit_code == 0
    assert "libvirt network 'lab' is not defined on this host" in res.stderr
    assert "bridge br9 does not exist on this host" in res.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--no-network", "--bridge", "br0"],
        ["--network", "none", "--network", "default"],
        ["--network", "vlan=7"],
        ["--network", "bridge=a/b"],
        ["--bridge", "a-name-longer-than-15"],
    ],
)
def test_bad_network_options(sim_dir: Path, run_cli: Run, args: list[str]) -> None:
    res = run_cli(sim_dir, *BASE, *args)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr


def test_virt_type_qemu_for_hosts_without_kvm(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    res = run_cli(sim_dir, *BASE, "--virt-type", "qemu", "--no-network")
    assert res.exit_code == 0, res.stderr
    root = parse(res.stdout)
    assert root.get("type") == "qemu" and root.find("cpu").get("mode") == "maximum"  # type: ignore[union-attr]
    validate_domain_xml(res.stdout, tmp_path)


# ------------------------------------------------------------------------------------ --from
USER_XML = """<?xml version='1.0'?>
<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>mine</name>
  <memory unit='GiB'>2</memory>
  <vcpu>2</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/></os>
  <devices>
    <!-- the system disk -->
    <disk type='file' device='disk'><driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/mine.qcow2'/><target dev='vda' bus='virtio'/></disk>
    <interface type='network'><source network='default'/><model type='virtio'/></interface>
  </devices>
  <qemu:commandline><qemu:arg value='-no-user-config'/></qemu:commandline>
</domain>
"""


def test_from_adds_devices_and_placement_and_keeps_the_rest(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    src = tmp_path / "mine.xml"
    src.write_text(USER_XML)
    res = run_cli(sim_dir, "render", "domain", "--from", str(src), "--device", "gpu4", "--device", "gpu5", "--json")
    assert res.exit_code == 0, res.stderr
    doc = as_json(res)
    assert doc["name"] == "mine" and doc["from"] == str(src) and doc["numa_node"] == 1
    xml = doc["xml"]
    validate_domain_xml(xml, tmp_path)
    root = parse(xml)
    assert [a.get("bus") for a in root.findall("devices/hostdev/source/address")] == ["0x83", "0x84"]
    assert root.find("vcpu").get("cpuset") == "32-63,96-127"  # type: ignore[union-attr]
    assert [(p.get("vcpu"), p.get("cpuset")) for p in root.findall("cputune/vcpupin")] == [("0", "32"), ("1", "33")]
    assert root.find("numatune/memory").get("nodeset") == "1"  # type: ignore[union-attr]
    # what the model does not know stays: the disk, the NIC, the comment, the qemu: namespace and its prefix
    assert root.find("devices/disk/source").get("file") == "/var/lib/libvirt/images/mine.qcow2"  # type: ignore[union-attr]
    assert root.find("devices/interface[@type='network']") is not None
    assert "<!-- the system disk -->" in xml and "<qemu:commandline>" in xml and "ns0:" not in xml
    back = define(xml)
    assert len(back.findall("devices/hostdev")) == 2
    # twice in a row changes nothing
    again = tmp_path / "again.xml"
    again.write_text(xml)
    res2 = run_cli(sim_dir, "render", "domain", "--from", str(again), "--device", "gpu4", "--device", "gpu5")
    assert res2.exit_code == 0 and res2.stdout == xml
    assert res2.stderr.count("is already in domain mine") == 2


def test_from_replaces_a_placement_on_another_node(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    src = tmp_path / "placed.xml"
    src.write_text(USER_XML.replace("<vcpu>2</vcpu>", "<vcpu cpuset='0-3'>2</vcpu><cputune><vcpupin vcpu='0' "
                                    "cpuset='0'/><emulatorpin cpuset='4'/></cputune>"))  # fmt: skip
    res = run_cli(sim_dir, "render", "domain", "--from", str(src), "--device", "gpu4", "--no-pin", "--hugepages")
    assert res.exit_code == 0, res.stderr
    assert "placement replaced by NUMA node 1's" in res.stderr
    root = parse(res.stdout)
    assert root.find("cputune/vcpupin") is None and root.find("cputune/emulatorpin") is not None
    assert root.find("memoryBacking/hugepages") is not None
    assert "NUMA node 1 has 0 MiB of free hugepages, the VM needs 2048 MiB" in res.stderr
    validate_domain_xml(res.stdout, tmp_path)


def test_from_with_an_mdev_on_the_qemu_guest(qemu_sim: Path, run_cli: Run, tmp_path: Path) -> None:
    make_mdev(qemu_sim)
    src = tmp_path / "mine.xml"
    src.write_text(USER_XML)
    res = run_cli(qemu_sim, "render", "domain", "--from", str(src), "--device", MTTY_UUID)
    assert res.exit_code == 0, res.stderr
    assert parse(res.stdout).find("devices/hostdev[@type='mdev']/source/address").get("uuid") == MTTY_UUID  # type: ignore[union-attr]
    validate_domain_xml(res.stdout, tmp_path)


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("<domain><name>x</name>", 2, "cannot parse <domain> XML"),
        ("<network><name>x</name></network>", 2, "expected a <domain> element"),
        ("<!DOCTYPE d [<!ENTITY a 'aaaa'>]><domain><name>&a;</name><vcpu>1</vcpu></domain>", 2, "entity"),
        ("<domain><vcpu>1</vcpu></domain>", 2, "has no <name>"),
        ("<domain><name>x</name></domain>", 2, "has no <vcpu> count"),
    ],
)
def test_from_bad_files(sim_dir: Path, run_cli: Run, tmp_path: Path, text: str, code: int, message: str) -> None:
    src = tmp_path / "bad.xml"
    src.write_text(text)
    res = run_cli(sim_dir, "render", "domain", "--from", str(src), "--device", "gpu1")
    assert res.exit_code == code and message in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert "aaaa" not in res.stderr  # errors never quote the file


def test_from_refuses_the_options_of_a_new_vm(sim_dir: Path, run_cli: Run, tmp_path: Path) -> None:
    src = tmp_path / "mine.xml"
    src.write_text(USER_XML)
    for args in (["--memory", "4G"], ["--disk", "/x.img"], ["--bridge", "br0"], ["--virt-type", "qemu"]):
        res = run_cli(sim_dir, "render", "domain", "--from", str(src), *args)
        assert res.exit_code == 2 and "does not go with --from" in res.stderr, (args, res.stderr)
    res = run_cli(sim_dir, "render", "domain", "--from", str(tmp_path / "none.xml"))
    assert res.exit_code == 3 and "does not exist" in res.stderr, res.stderr
    res = run_cli(sim_dir, "render", "domain", "--memory", "1G")
    assert res.exit_code == 2 and "--name --vcpus required (or --from FILE)" in res.stderr, res.stderr


# ------------------------------------------------------------------------------ properties
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_disk_argument_is_a_request_or_one_refusal(text: str) -> None:
    from vgpukit.attach import media

    try:
        req = media.DiskRequest.parse(text)
    except InvalidInput as exc:
        assert "\n" not in str(exc).strip()
        return
    assert req.path and (req.format is None or req.format in media.formats())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_network_argument_is_a_nic_or_one_refusal(text: str) -> None:
    from vgpukit.attach import media

    try:
        nic = media.nic(text)
    except InvalidInput:
        return
    assert nic is None or (nic.kind in ("network", "bridge") and "/" not in nic.source and "'" not in nic.source)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_header_has_a_format(data: bytes) -> None:
    from vgpukit.attach import media

    assert media.image_format(data) in {*media.formats(), "vhdx"}
    media.qcow2_backing(data)  # never raises on a short or odd header
