"""Every template: golden output, libvirt's RelaxNG schema, and libvirt's own parser (test:///)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import msgspec
import pytest

from vgpukit.attach.model import Disk, DomainSpec, Firmware, GuestPlacement, Nic
from vgpukit.attach.templates import TemplateSet
from vgpukit.errors import InvalidInput, NotFound
from vgpukit.host import Host
from vgpukit.libvirt.domain import Device, HostdevInterface, MdevHostdev, PciAddress, PciHostdev, device_keys

from .conftest import libvirt_or_skip, validate_domain_xml, wrap_device

GOLDEN = Path(__file__).parent / "golden"
VF = PciAddress.from_bdf("0000:3b:02.1")

DEVICES: dict[str, Device] = {
    "hostdev-pci-managed": PciHostdev(VF, managed=True),
    "hostdev-pci-unmanaged": PciHostdev(VF, managed=False),
    "hostdev-mdev": MdevHostdev("c2177883-f1bb-47f0-914d-32a22e3a8804"),
    "interface-hostdev": HostdevInterface(PciAddress.from_bdf("0000:5e:02.1"), mac="52:54:00:6b:3c:58", vlan=42),
    "interface-hostdev-plain": HostdevInterface(PciAddress.from_bdf("0000:5e:02.1")),
}

DOMAINS: dict[str, DomainSpec] = {
    "domain-efi-pinned": DomainSpec(
        name="vgpu-vm",
        memory_mib=8192,
        vcpus=4,
        devices=(DEVICES["hostdev-pci-unmanaged"], DEVICES["hostdev-mdev"], DEVICES["interface-hostdev"]),
        firmware=Firmware("efi"),
        placement=GuestPlacement(numa_node=1, cpuset="8-15", pins=((0, 8), (1, 9), (2, 10), (3, 11))),
        hugepages=True,
    ),
    "domain-pflash-floating": DomainSpec(
        name="vm2",
        memory_mib=4096,
        vcpus=16,
        devices=(PciHostdev(PciAddress.from_bdf("0000:3b:00.0")),),
        firmware=Firmware("pflash", "/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"),
        placement=GuestPlacement(numa_node=0, cpuset="0-7"),
    ),
    "domain-bios-bare": DomainSpec(name="bare", memory_mib=1024, vcpus=1),
    "domain-installer-qemu": DomainSpec(
        name="installer",
        memory_mib=2048,
        vcpus=2,
        devices=(DEVICES["hostdev-mdev"],),
        disks=(
            Disk("/var/lib/libvirt/images/vm.qcow2", "qcow2", "vda"),
            Disk("/dev/vg0/data", "raw", "vdb", source="block"),
            Disk("/srv/iso/debian-12.iso", "raw", "sda", device="cdrom", bus="sata"),
        ),
        nics=(Nic("network", "default"), Nic("bridge", "br0")),
        graphics="vnc",
        domain_type="qemu",
    ),
}


@pytest.fixture
def tpl(tmp_path: Path) -> TemplateSet:
    return TemplateSet(Host(tmp_path))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.xml"
    if os.environ.get("VGPUKIT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from {path} (VGPUKIT_UPDATE_GOLDEN=1 to accept)"


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_device_golden_and_schema(name: str, tpl: TemplateSet, tmp_path: Path) -> None:
    xml = tpl.device(DEVICES[name])
    check_golden(name, xml)
    validate_domain_xml(wrap_device(xml), tmp_path)


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_domain_golden_and_schema(name: str, tpl: TemplateSet, tmp_path: Path) -> None:
    xml = tpl.domain(DOMAINS[name])
    check_golden(name, xml)
    validate_domain_xml(xml, tmp_path)


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_domain_roundtrips_through_libvirt(name: str, tpl: TemplateSet) -> None:
    libvirt = libvirt_or_skip()
    spec = DOMAINS[name]
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXML(tpl.domain(spec))
        back = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    finally:
        conn.close()
    assert device_keys(back) == {d.key() for d in spec.devices}
    root = ET.fromstring(back)
    assert root.findtext("name") == spec.name
    assert root.findtext("vcpu") == str(spec.vcpus)
    assert len(root.findall("cputune/vcpupin")) == len(spec.placement.pins)
    if spec.placement.numa_node is not None:
        assert root.find("numatune/memory").get("nodeset") == str(spec.placement.numa_node)  # type: ignore[union-attr]
    assert (root.find("memoryBacking/hugepages") is not None) == spec.hugepages
    os_el = root.find("os")
    assert os_el is not None
    assert (os_el.get("firmware") == "efi") == (spec.firmware.kind == "efi")
    if spec.firmware.kind == "pflash":
        assert os_el.findtext("loader") == spec.firmware.loader
    assert [b.get("dev") for b in root.findall("os/boot")] == list(spec.boot)
    assert [d.get("device") for d in root.findall("devices/disk")] == [d.device for d in spec.disks]
    assert [t.get("dev") for t in root.findall("devices/disk/target")] == [d.target for d in spec.disks]
    assert [d.get("type") for d in root.findall("devices/disk/driver")] == [d.format for d in spec.disks]
    for nic in spec.nics:  # a virtio NIC on each network or bridge
        assert root.find(f"devices/interface[@type='{nic.kind}']/source[@{nic.kind}='{nic.source}']") is not None
    assert root.find("devices/console[@type='pty']/target[@type='serial']") is not None  # virsh console NAME
    assert (root.find("devices/graphics") is not None) == bool(spec.graphics)
    iface = root.find("devices/interface[@type='hostdev']")
    if iface is not None:
        assert iface.find("mac").get("address") == "52:54:00:6b:3c:58"  # type: ignore[union-attr]
        assert iface.find("vlan/tag").get("id") == "42"  # type: ignore[union-attr]


def test_each_device_roundtrips_alone(tpl: TemplateSet) -> None:
    libvirt = libvirt_or_skip()
    conn = libvirt.open("test:///default")
    try:
        for name, dev in DEVICES.items():
            back = conn.defineXML(wrap_device(tpl.device(dev)).replace("wrap", name)).XMLDesc(0)
            assert device_keys(back) == {dev.key()}, name
            el = ET.fromstring(back).find("devices")[0]  # type: ignore[index]
            if isinstance(dev, PciHostdev):
                assert el.get("managed") == ("yes" if dev.managed else "no")
    finally:
        conn.close()


def test_user_override_wins(tmp_path: Path) -> None:
    host = Host(tmp_path)
    over = host.config_dir("templates", "libvirt", "hostdev-mdev.xml.j2")
    over.parent.mkdir(parents=True)
    over.write_text("<hostdev mode='subsystem' type='mdev' model='vfio-ccw'><source><address uuid='{{ dev.uuid }}'/>"
                    "</source></hostdev>")  # fmt: skip
    tpl = TemplateSet(host)
    assert "vfio-ccw" in tpl.device(MdevHostdev("c2177883-f1bb-47f0-914d-32a22e3a8804"))
    assert tpl.origin("libvirt/hostdev-mdev.xml.j2") == str(over)
    assert "managed='yes'" in tpl.device(PciHostdev(VF))  # others still come from the shipped set


def test_override_with_unknown_field_is_an_error(tmp_path: Path) -> None:
    host = Host(tmp_path)
    over = host.config_dir("templates", "libvirt", "hostdev-pci.xml.j2")
    over.parent.mkdir(parents=True)
    over.write_text("<hostdev>{{ dev.rom_bar }}</hostdev>")
    with pytest.raises(InvalidInput, match="failed to render"):
        TemplateSet(host).device(PciHostdev(VF))


def test_override_must_render_the_same_device(tmp_path: Path) -> None:
    """Template output is parsed back with the model: an override cannot hand the VM another device."""
    host = Host(tmp_path)
    over = host.config_dir("templates", "libvirt", "hostdev-pci.xml.j2")
    over.parent.mkdir(parents=True)
    over.write_text("<hostdev mode='subsystem' type='pci'><source><address domain='0' bus='0x3b' slot='2' "
                    "function='{{ 2 }}'/></source></hostdev>")  # fmt: skip
    with pytest.raises(InvalidInput, match=r"rendered pci:0000:3b:02.2 for pci:0000:3b:02.1"):
        TemplateSet(host).device(PciHostdev(VF))
    over.write_text("<disk type='file'/>")
    with pytest.raises(InvalidInput, match="rendered no usable device"):
        TemplateSet(host).device(PciHostdev(VF))


def test_missing_template_is_not_found(tpl: TemplateSet) -> None:
    with pytest.raises(NotFound):
        tpl.render("libvirt/nope.xml.j2")


def test_values_are_escaped(tpl: TemplateSet) -> None:
    # names are validated, but the template must not trust the model either
    spec = DomainSpec(name="ok", memory_mib=128, vcpus=1)
    msgspec.structs.force_setattr(spec, "name", "a<b&'c")  # past the validation, as a bug would
    root = ET.fromstring(tpl.domain(spec))
    assert root.findtext("name") == "a<b&'c"


@pytest.mark.parametrize(
    ("kw", "msg"),
    [({"name": "bad name"}, "domain name"), ({"memory_mib": 10}, "too small"), ({"vcpus": 0}, "vcpus")],
)
def test_domain_spec_validation(kw: dict[str, object], msg: str) -> None:
    base: dict[str, object] = {"name": "vm", "memory_mib": 1024, "vcpus": 1} | kw
    with pytest.raises(InvalidInput, match=msg):
        DomainSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mac", "vlan"), [("52:54:00:zz:00:01", None), (None, 5000)])
def test_interface_validation(mac: str | None, vlan: int | None) -> None:
    with pytest.raises(InvalidInput):
        HostdevInterface(VF, mac=mac, vlan=vlan)


def test_schema_validation_can_fail(tmp_path: Path) -> None:
    bad = wrap_device("<hostdev mode='subsystem' type='pci' managed='maybe'><source/></hostdev>")
    with pytest.raises(AssertionError):
        validate_domain_xml(bad, tmp_path)
