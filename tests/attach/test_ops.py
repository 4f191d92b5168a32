"""attach / detach against libvirt's test driver (real XML parsing and storage, in-process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vgpukit.attach import ops
from vgpukit.errors import Conflict, HostIOError, NotFound, Unsupported, VgpukitError
from vgpukit.host import Host
from vgpukit.libvirt.connection import Libvirt, connect
from vgpukit.libvirt.domain import DomainXML, device_keys, parse_device

from .conftest import BAD_GPU, GPU_VF, GPU_VF_VGPU, MDEV, NIC_VF, libvirt_or_skip

VM = """<domain type='kvm'><name>{name}</name><memory unit='MiB'>1024</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>{devices}</devices></domain>"""
HOLDS_GPU_VF = (
    "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
    "<address domain='0x0000' bus='0x3b' slot='0x00' function='0x4'/></source></hostdev>"
)


@pytest.fixture
def lv() -> Iterator[Libvirt]:
    libvirt_or_skip()
    conn = connect("test:///default")
    conn.define(VM.format(name="vm1", devices=""))
    conn.define(VM.format(name="other", devices=HOLDS_GPU_VF))
    yield conn
    conn.close()


def config_keys(lv: Libvirt, name: str = "vm1") -> set[str]:
    return set(device_keys(lv.xml(name, inactive=True)))


def test_attach_config_then_idempotent(host: Host, lv: Libvirt) -> None:
    out = ops.attach(host, lv, "vm1", [MDEV, GPU_VF_VGPU, NIC_VF])
    assert [s.scopes() for s in out.steps] == ["config"] * 3
    assert config_keys(lv) == {f"mdev:{MDEV}", f"pci:{GPU_VF_VGPU}", f"pci:{NIC_VF}"}
    xml = lv.xml("vm1", inactive=True)
    assert "managed='no'" in xml and "<interface type='hostdev'" in xml
    again = ops.attach(host, lv, "vm1", [MDEV, GPU_VF_VGPU, NIC_VF], config=True)
    assert again.steps == [] and again.unchanged == [MDEV, GPU_VF_VGPU, NIC_VF]


def test_attach_nic_with_mac_vlan(host: Host, lv: Libvirt) -> None:
    ops.attach(host, lv, "vm1", [NIC_VF], config=True, mac="52:54:00:00:00:09", vlan=42)
    xml = lv.xml("vm1", inactive=True)
    assert "52:54:00:00:00:09" in xml and "<tag id='42'/>" in xml


def test_device_held_by_another_domain(host: Host, lv: Libvirt) -> None:
    before = lv.xml("vm1", inactive=True)
    with pytest.raises(Conflict, match="already assigned to domain 'other'"):
        ops.attach(host, lv, "vm1", [MDEV, GPU_VF], config=True)
    assert lv.xml("vm1", inactive=True) == before


def test_non_viable_group_refused_before_libvirt(host: Host, lv: Libvirt) -> None:
    before = lv.xml("vm1", inactive=True)
    with pytest.raises(Conflict, match="not viable"):
        ops.attach(host, lv, "vm1", [MDEV, BAD_GPU], config=True)
    assert lv.xml("vm1", inactive=True) == before


def test_unknown_domain_and_device(host: Host, lv: Libvirt) -> None:
    with pytest.raises(NotFound, match="no domain 'nope' on test:///default"):
        ops.attach(host, lv, "nope", [MDEV])
    with pytest.raises(NotFound, match="no PCI device"):
        ops.attach(host, lv, "vm1", ["0000:3b:09.0"])


def test_live_needs_running_domain(host: Host, lv: Libvirt) -> None:
    with pytest.raises(Conflict, match="not running"):
        ops.attach(host, lv, "vm1", [MDEV], live=True)


def test_live_on_test_driver_is_unsupported_and_changes_nothing(host: Host, lv: Libvirt) -> None:
    before = lv.xml("test", inactive=True)
    with pytest.raises(Unsupported, match="cannot attach devices live"):
        ops.attach(host, lv, "test", [MDEV])  # running + persistent: default scopes include live
    assert lv.xml("test", inactive=True) == before
    ops.attach(host, lv, "test", [MDEV], config=True)
    assert f"mdev:{MDEV}" in config_keys(lv, "test")


def test_dry_run_changes_nothing(host: Host, lv: Libvirt) -> None:
    out = ops.attach(host, lv, "vm1", [MDEV], config=True, dry_run=True)
    assert out.plan("attach") == [f"attach {MDEV} to vm1 (config)"]
    assert config_keys(lv) == set()


def test_detach(host: Host, lv: Libvirt) -> None:
    ops.attach(host, lv, "vm1", [MDEV, NIC_VF], config=True)
    out = ops.detach(host, lv, "vm1", [NIC_VF], config=True)
    assert [s.label for s in out.steps] == [NIC_VF]
    assert config_keys(lv) == {f"mdev:{MDEV}"}
    again = ops.detach(host, lv, "vm1", [NIC_VF], config=True)
    assert again.steps == [] and again.unchanged == [NIC_VF]


def test_detach_device_gone_from_host(host: Host, lv: Libvirt) -> None:
    lv.define(VM.format(name="vm2", devices=HOLDS_GPU_VF.replace("0x3b", "0x3e")))
    out = ops.detach(host, lv, "vm2", ["0000:3e:00.4"], config=True)
    assert out.steps and config_keys(lv, "vm2") == set()


class FlakyLibvirt(Libvirt):
    """A driver with hotplug whose second attach fails: the first must be rolled back."""

    calls: list[str]

    @property
    def is_test_driver(self) -> bool:
        return False

    def attach(self, name: str, device_xml: str, flags: int) -> None:
        self.calls.append("attach")
        if len(self.calls) == 2:
            raise HostIOError("simulated hotplug failure")
        dom = DomainXML.parse(self.xml(name, inactive=True))
        dom.add_device(parse_device(device_xml))
        self.define(dom.to_xml())

    def detach(self, name: str, device_xml: str, flags: int) -> None:
        self.calls.append("detach")
        key = parse_device(device_xml).key()
        assert key is not None
        dom = DomainXML.parse(self.xml(name, inactive=True))
        dom.remove_devices({key})
        self.define(dom.to_xml())


def test_failure_rolls_back(host: Host, lv: Libvirt) -> None:
    flaky = FlakyLibvirt(lv.lv, lv.conn, lv.uri)
    flaky.calls = []
    with pytest.raises(VgpukitError, match="simulated hotplug failure"):
        ops.attach(host, flaky, "vm1", [MDEV, NIC_VF], config=True)
    assert flaky.calls == ["attach", "attach", "detach"]
    assert config_keys(lv) == set()


def test_unreachable_uri() -> None:
    libvirt_or_skip()
    with pytest.raises(HostIOError, match=r"cannot connect to qemu\+unix:///system\?socket=/nonexistent"):
        connect("qemu+unix:///system?socket=/nonexistent")


def test_mac_needs_exactly_one_device(host: Host, lv: Libvirt) -> None:
    from vgpukit.errors import InvalidInput

    with pytest.raises(InvalidInput, match="exactly one DEVICE"):
        ops.attach(host, lv, "vm1", [NIC_VF, MDEV], config=True, mac="52:54:00:00:00:01")
    with pytest.raises(InvalidInput, match="named twice"):
        ops.attach(host, lv, "vm1", [NIC_VF, "5e:02.1"], config=True)
