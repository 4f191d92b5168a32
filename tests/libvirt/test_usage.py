"""sriov's in-use view of libvirt: every way a domain can hold a PCI function, through the one facade."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpukit.host import Host
from vgpukit.sriov.usage import User, libvirt_users

from ..attach.fakehost import FakeHost

VF, NIC_VF, PARENT = "0000:3b:00.4", "0000:5e:02.1", "0000:3b:00.0"
MDEV = "c2177883-f1bb-47f0-914d-32a22e3a8804"
GONE_MDEV = "6f1c1e4e-6a8f-4d0e-9b1e-3c2f7a9d8e01"

NODE = f"""<node>
<domain type='kvm'><name>gpu-vm</name><memory unit='MiB'>1024</memory>
<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>
<hostdev mode='subsystem' type='pci' managed='yes'><source>
  <address domain='0x0000' bus='0x3b' slot='0x00' function='0x4'/></source></hostdev>
<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{MDEV}'/></source></hostdev>
<hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='{GONE_MDEV}'/></source></hostdev>
</devices></domain>
<domain type='kvm' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'><name>net-vm</name>
<memory unit='MiB'>1024</memory><os><type arch='x86_64' machine='q35'>hvm</type></os><devices>
<interface type='hostdev' managed='yes'><source>
  <address type='pci' domain='0x0000' bus='0x5e' slot='0x02' function='0x1'/></source></interface>
</devices><test:runstate>5</test:runstate></domain>
</node>"""


def test_pci_hostdev_interface_and_mdev_are_assignments(tmp_path: Path) -> None:
    pytest.importorskip("libvirt")
    fake = FakeHost(tmp_path / "root")
    fake.pci(PARENT, driver="nvidia", group=10)
    fake.pci(VF, driver="vfio-pci", group=20, physfn=PARENT)
    fake.pci(NIC_VF, cls=0x020000, driver="vfio-pci", group=30)
    fake.mdev(MDEV, PARENT, "nvidia-558", group=40)
    node = tmp_path / "node.xml"
    node.write_text(NODE)
    users = libvirt_users(Host(fake.root), f"test://{node}")
    assert users == {
        VF: [User("libvirt", "gpu-vm", "running")],
        PARENT: [User("libvirt", "gpu-vm", f"mdev {MDEV}, running")],  # the mdev's parent; the gone mdev is skipped
        NIC_VF: [User("libvirt", "net-vm", "defined")],
    }


def test_unreachable_libvirt_adds_nobody(tmp_path: Path) -> None:
    assert libvirt_users(Host(tmp_path), "test:///nonexistent-vgpukit-node.xml") == {}
