from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from vgpukit.host import Host

from .fakehost import FakeHost

GPU_VF_VGPU = "0000:3b:00.5"
GPU_VF = "0000:3b:00.4"
GPU_PF = "0000:3b:00.0"
NIC_VF = "0000:5e:02.1"
MDEV = "c2177883-f1bb-47f0-914d-32a22e3a8804"
BAD_GPU = "0000:af:00.0"


def libvirt_or_skip() -> Any:
    try:
        import libvirt
    except ImportError:
        pytest.skip("libvirt-python is not installed (pip install 'vgpukit[libvirt]')")
    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    return libvirt


def validate_domain_xml(xml: str, tmp: Path) -> None:
    """libvirt's own RelaxNG schemas (virt-xml-validate, Debian package libvirt-clients)."""
    tool = shutil.which("virt-xml-validate")
    if tool is None:
        pytest.skip("virt-xml-validate not installed (apt-get install libvirt-clients)")
    f = tmp / "domain.xml"
    f.write_text(xml)
    res = subprocess.run([tool, str(f), "domain"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr + res.stdout


def wrap_device(snippet: str) -> str:
    """A minimal domain around one device element, as virt-xml-validate needs a whole domain."""
    return (
        "<domain type='kvm'><name>wrap</name><memory unit='MiB'>1024</memory><vcpu>1</vcpu>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os><devices>" + snippet + "</devices></domain>"
    )


@pytest.fixture
def fake(tmp_path: Path) -> FakeHost:
    root = tmp_path / "root"
    root.mkdir()
    return FakeHost(root)


@pytest.fixture
def host_tree(fake: FakeHost) -> FakeHost:
    """GPU PF + VF (vfio-pci) + vGPU VF, a NIC VF, an mdev, and a GPU in a non-viable group."""
    fake.node(0, "0-7", free_2m=4096)
    fake.node(1, "8-15", free_2m=16)
    fake.pci(GPU_PF, driver="nvidia", numa=1, group=10, files={"sriov_totalvfs": "16", "sriov_numvfs": "2"})
    fake.pci(GPU_VF, driver="vfio-pci", numa=1, group=20, physfn=GPU_PF)
    fake.pci(GPU_VF_VGPU, driver="nvidia", numa=1, group=21, physfn=GPU_PF, files={"nvidia/current_vgpu_type": "1414"})
    fake.pci("0000:5e:00.0", cls=0x020000, vendor="0x15b3", device="0x101d", driver="mlx5_core", numa=0, group=29)
    fake.pci(NIC_VF, cls=0x020000, vendor="0x15b3", device="0x101e", driver="mlx5_core", numa=0, group=30,
             physfn="0000:5e:00.0")  # fmt: skip
    fake.mdev(MDEV, GPU_PF, "nvidia-558", group=40)
    fake.pci(BAD_GPU, driver="vfio-pci", numa=0, group=50)
    fake.pci("0000:af:00.1", cls=0x040300, driver="snd_hda_intel", numa=0, group=50)
    return fake


@pytest.fixture
def host(host_tree: FakeHost) -> Host:
    return Host(host_tree.root)
