"""libvirt domain lookup for mdev instances (optional): XML parsing and the mapping, on a fake source."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from vgpukit.errors import InvalidInput
from vgpukit.libvirt.domain import DomainXML
from vgpukit.mdev.domains import assignments, lookup

U1 = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
XML = f"""<domain type='kvm'><name>web1</name><devices>
  <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
    <source><address uuid='{U1.upper()}'/></source>
  </hostdev>
  <hostdev mode='subsystem' type='pci' managed='yes'>
    <source><address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/></source>
  </hostdev>
</devices></domain>"""


@dataclass
class Dom:
    name: str
    active: bool


class Source:
    def domains(self) -> list[Dom]:
        return [Dom("web1", True), Dom("idle", False)]

    def xml(self, name: str, inactive: bool = False) -> str:
        return XML if name == "web1" else XML.replace("web1", "idle")


def test_uuids_from_domain_xml() -> None:
    assert [d.key() for d in DomainXML.parse(XML).devices()] == [f"mdev:{U1}", "pci:0000:3b:00.0"]
    assert DomainXML.parse("<domain/>").devices() == []
    with pytest.raises(InvalidInput):
        DomainXML.parse("not xml")


def test_assignments_map_uuid_to_domains() -> None:
    assert assignments(Source()) == {U1: [{"name": "web1", "active": True}, {"name": "idle", "active": False}]}


def test_lookup_skips_cleanly_when_libvirt_is_absent() -> None:
    # Either the attach facade or libvirt-python is missing here, or no daemon answers at this URI.
    assert lookup("test:///nonexistent-vgpukit-uri") == ({}, None)
