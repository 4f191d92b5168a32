"""The XML model: each element parses what libvirt writes and writes what it parses (round trips)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from vgpukit.errors import InvalidInput
from vgpukit.libvirt.domain import (
    DomainXML,
    HostdevInterface,
    MdevHostdev,
    PciAddress,
    PciHostdev,
    assignments,
    device_keys,
    device_of,
    parse_device,
)
from vgpukit.libvirt.xmlbuilder import parse_c_uint

GOLDEN = Path(__file__).parents[1] / "attach" / "golden"
UUID = "c2177883-f1bb-47f0-914d-32a22e3a8804"


def reparse(obj: PciHostdev | MdevHostdev | HostdevInterface) -> PciHostdev | MdevHostdev | HostdevInterface:
    return parse_device(obj.to_xml())


# ----------------------------------------------------------------------------- PciAddress
def test_address_round_trip() -> None:
    addr = PciAddress.from_bdf("3b:02.1")
    assert (addr.type, addr.domain, addr.bus, addr.slot, addr.function) == (None, "0x0000", "0x3b", "0x02", "0x1")
    back = PciAddress.parse(addr.to_xml())
    assert back == addr and back.bdf == "0000:3b:02.1"


@pytest.mark.parametrize(
    ("attrs", "bdf"),
    [
        ("domain='0x0000' bus='0x3b' slot='0x02' function='0x1'", "0000:3b:02.1"),
        ("bus='59' slot='2' function='1'", "0000:3b:02.1"),  # decimal, domain defaults to 0 (as libvirt reads it)
        ("domain='0' bus='073' slot='0x2' function='1'", "0000:3b:02.1"),  # a leading 0 is octal in libvirt too
        ("domain='0x0000' bus='0x3b' slot='0x20' function='0x1'", None),  # slot out of range
        ("domain='0x0000' bus='zz' slot='0x02' function='0x1'", None),
        ("domain='0x0000' slot='0x02' function='0x1'", None),  # no bus
    ],
)
def test_address_reads_numbers_as_libvirt_does(attrs: str, bdf: str | None) -> None:
    assert PciAddress.parse(f"<address {attrs}/>").bdf == bdf


def test_parse_c_uint() -> None:
    assert [parse_c_uint(s) for s in ("0x1f", "31", "037", "0")] == [31, 31, 31, 0]
    with pytest.raises(ValueError):
        parse_c_uint("08")


# ----------------------------------------------------------------------------- hostdev type='pci'
def test_pci_hostdev_round_trip_and_golden() -> None:
    dev = PciHostdev(PciAddress.from_bdf("0000:3b:02.1"), managed=False)
    assert reparse(dev) == dev and dev.key() == "pci:0000:3b:02.1"
    golden = parse_device((GOLDEN / "hostdev-pci-unmanaged.xml").read_text())
    assert golden == dev  # the template writes what the model declares
    managed = parse_device((GOLDEN / "hostdev-pci-managed.xml").read_text())
    assert isinstance(managed, PciHostdev) and managed.managed is True and managed.mode == "subsystem"


def test_edits_keep_what_the_model_does_not_declare() -> None:
    xml = (
        "<hostdev mode='subsystem' type='pci' managed='yes'><driver name='vfio'/><source>"
        "<address domain='0x0000' bus='0x3b' slot='0x02' function='0x1'/></source><alias name='hostdev0'/>"
        "<address type='pci' domain='0x0000' bus='0x07' slot='0x00' function='0x0'/></hostdev>"
    )
    dev = parse_device(xml)
    assert isinstance(dev, PciHostdev) and dev.key() == "pci:0000:3b:02.1"  # the guest address is not the source
    dev.managed = False
    root = ET.fromstring(dev.to_xml())
    assert root.get("managed") == "no"
    assert root.find("alias") is not None and root.find("driver").get("name") == "vfio"  # type: ignore[union-attr]
    assert root.find("address").get("bus") == "0x07"  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- hostdev type='mdev'
def test_mdev_hostdev_round_trip_and_golden() -> None:
    dev = MdevHostdev(UUID, display=True)
    back = reparse(dev)
    assert back == dev and isinstance(back, MdevHostdev) and back.display is True and back.model == "vfio-pci"
    golden = parse_device((GOLDEN / "hostdev-mdev.xml").read_text())
    assert isinstance(golden, MdevHostdev) and golden.uuid == UUID and golden.display is False
    assert parse_device(dev.to_xml().replace(UUID, UUID.upper())).key() == f"mdev:{UUID}"


# ----------------------------------------------------------------------------- interface type='hostdev'
def test_interface_round_trip_and_golden() -> None:
    dev = HostdevInterface(PciAddress.from_bdf("0000:5e:02.1"), mac="52:54:00:6b:3c:58", vlan=42)
    assert reparse(dev) == dev and dev.key() == "pci:0000:5e:02.1"
    assert dev.address is not None and dev.address.type == "pci"
    golden = parse_device((GOLDEN / "interface-hostdev.xml").read_text())
    assert golden == dev
    plain = parse_device((GOLDEN / "interface-hostdev-plain.xml").read_text())
    assert isinstance(plain, HostdevInterface) and plain.mac is None and plain.vlan is None


def test_unsetting_a_property_removes_the_elements_it_emptied() -> None:
    dev = HostdevInterface(PciAddress.from_bdf("0000:5e:02.1"), mac="52:54:00:6b:3c:58", vlan=42)
    dev.vlan = None
    dev.mac = None
    root = ET.fromstring(dev.to_xml())
    assert root.find("vlan") is None and root.find("mac") is None and root.find("source/address") is not None


def test_interface_validation_when_built() -> None:
    addr = PciAddress.from_bdf("0000:5e:02.1")
    with pytest.raises(InvalidInput, match="MAC"):
        HostdevInterface(addr, mac="52:54:00:zz:00:01")
    with pytest.raises(InvalidInput, match="VLAN"):
        HostdevInterface(addr, vlan=5000)


def test_interface_on_a_non_pci_source_has_no_key() -> None:
    el = ET.fromstring("<interface type='hostdev'><source><address type='usb' bus='1' port='2'/></source></interface>")
    dev = device_of(el)
    assert isinstance(dev, HostdevInterface) and dev.key() is None


# ----------------------------------------------------------------------------- domain
DOMAIN = f"""<domain type='kvm'><name>vm</name><devices>
<disk type='file' device='disk'><source file='/x.qcow2'/><target dev='vda'/></disk>
<hostdev mode='subsystem' type='pci' managed='yes'><source>
  <address domain='0x0000' bus='0x3b' slot='0x02' function='0x1'/></source></hostdev>
<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{UUID}'/></source></hostdev>
<hostdev mode='capabilities' type='storage'><source><block>/dev/sdb</block></source></hostdev>
<interface type='network'><source network='default'/></interface>
<interface type='hostdev' managed='yes'><source>
  <address type='pci' domain='0x0000' bus='0x5e' slot='0x02' function='0x1'/></source></interface>
</devices></domain>"""


def test_domain_lists_only_the_passed_through_devices() -> None:
    dom = DomainXML.parse(DOMAIN)
    assert dom.name == "vm"
    assert [type(d).__name__ for d in dom.devices()] == ["PciHostdev", "MdevHostdev", "HostdevInterface"]
    assert device_keys(DOMAIN) == {"pci:0000:3b:02.1", f"mdev:{UUID}", "pci:0000:5e:02.1"}


def test_domain_edit_round_trip() -> None:
    dom = DomainXML.parse(DOMAIN)
    dom.remove_devices({"pci:0000:3b:02.1", f"mdev:{UUID}"})
    dom.add_device(PciHostdev(PciAddress.from_bdf("0000:af:00.0")))
    back = DomainXML.parse(dom.to_xml())
    assert set(back.keyed()) == {"pci:0000:5e:02.1", "pci:0000:af:00.0"}
    assert (
        back.node.find("devices/disk") is not None and back.node.find("devices/interface[@type='network']") is not None
    )


def test_domain_parse_errors_are_bad_input() -> None:
    with pytest.raises(InvalidInput, match="cannot parse"):
        DomainXML.parse("<domain>")
    with pytest.raises(InvalidInput, match="expected a <domain>"):
        DomainXML.parse("<hostdev/>")
    with pytest.raises(InvalidInput):
        parse_device("<disk type='file'/>")


def test_model_round_trips_through_libvirt_and_sees_inactive_definitions() -> None:
    """test:///default: domain 'test' runs and is persistent; a define changes only its inactive XML."""
    pytest.importorskip("libvirt")
    from vgpukit.libvirt.connection import connect

    lv = connect("test:///default")
    try:
        dom = DomainXML.parse(lv.xml("test", inactive=True))
        dom.add_device(HostdevInterface(PciAddress.from_bdf("0000:5e:02.1"), mac="52:54:00:00:00:07", vlan=7))
        dom.add_device(MdevHostdev(UUID))
        lv.define(dom.to_xml())
        stored = DomainXML.parse(lv.xml("test", inactive=True)).keyed()
        assert set(stored) == {"pci:0000:5e:02.1", f"mdev:{UUID}"}
        iface = stored["pci:0000:5e:02.1"]
        assert isinstance(iface, HostdevInterface) and (iface.mac, iface.vlan) == ("52:54:00:00:00:07", 7)
        assert device_keys(lv.xml("test")) == set()  # not in the running VM ...
        found = assignments(lv)  # ... but assigned all the same
        assert {k: [(a.domain, a.state) for a in v] for k, v in found.items()} == {
            "pci:0000:5e:02.1": [("test", "running")],
            f"mdev:{UUID}": [("test", "running")],
        }
        assert assignments(lv, skip="test") == {}
    finally:
        lv.close()
