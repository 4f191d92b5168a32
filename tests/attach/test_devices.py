"""DEVICE resolution, IOMMU viability, NUMA placement and firmware detection on hand-built trees."""

from __future__ import annotations

import pytest

from vgpukit.attach import render
from vgpukit.attach.devices import resolve
from vgpukit.attach.hostfacts import detect_firmware, parse_cpulist
from vgpukit.attach.planner import check_iommu
from vgpukit.errors import Conflict, InvalidInput, NotFound, Unsupported
from vgpukit.host import Host
from vgpukit.libvirt.domain import HostdevInterface, MdevHostdev, PciHostdev

from .conftest import BAD_GPU, GPU_PF, GPU_VF, GPU_VF_VGPU, MDEV, NIC_VF
from .fakehost import FakeHost


def test_vf_bdf_is_a_managed_pci_hostdev(host: Host) -> None:
    t = resolve(host, "3b:00.4")
    assert (t.kind, t.bdf, t.iommu_group, t.numa_node, t.is_vf) == ("pci", GPU_VF, 20, 1, True)
    el = t.element()
    assert isinstance(el, PciHostdev) and el.managed and el.address.bdf == GPU_VF


def test_vgpu_vf_is_unmanaged(host: Host) -> None:
    t = resolve(host, GPU_VF_VGPU)
    assert t.vgpu_type == "1414"
    el = t.element()
    assert isinstance(el, PciHostdev) and not el.managed
    forced = t.element(managed=True)
    assert isinstance(forced, PciHostdev) and forced.managed


def test_gpu_alias_resolves_through_naming(host: Host) -> None:
    t = resolve(host, "gpu0")
    assert t.bdf == GPU_PF and not t.is_vf


def test_nic_vf_becomes_interface_with_mac_and_vlan(host: Host) -> None:
    el = resolve(host, NIC_VF).element(mac="52:54:00:00:00:01", vlan=42)
    assert isinstance(el, HostdevInterface) and el.vlan == 42 and el.mac == "52:54:00:00:00:01"


def test_mac_on_a_gpu_is_refused(host: Host) -> None:
    with pytest.raises(InvalidInput, match="NIC VFs"):
        resolve(host, GPU_VF).element(mac="52:54:00:00:00:01")


def test_mdev_uuid(host: Host) -> None:
    t = resolve(host, MDEV.upper())
    assert (t.kind, t.uuid, t.parent, t.mdev_type, t.iommu_group, t.numa_node) == (
        "mdev", MDEV, GPU_PF, "nvidia-558", 40, 1
    )  # fmt: skip
    assert isinstance(t.element(), MdevHostdev)


@pytest.mark.parametrize(
    ("name", "err"),
    [
        ("0000:3b:07.0", NotFound),
        ("11111111-2222-3333-4444-555555555555", NotFound),
        ("gpu9", NotFound),
        ("MIG-5c1a1f8e-0d1e-5e6b-9f0e-3b1c2d3e4f50", Unsupported),
        ("../../etc", InvalidInput),
    ],
)
def test_bad_devices(host: Host, name: str, err: type[Exception]) -> None:
    with pytest.raises(err):
        resolve(host, name)


def test_iommu_viability(host: Host, host_tree: FakeHost) -> None:
    check_iommu(host, resolve(host, GPU_VF))
    check_iommu(host, resolve(host, MDEV))
    with pytest.raises(Conflict, match=r"group 50 .* 0000:af:00.1 is bound to snd_hda_intel"):
        check_iommu(host, resolve(host, BAD_GPU))
    # unbinding the audio function makes the group viable
    (host_tree.sys / "devices" / "pci0000:3a" / "0000:af:00.1" / "driver").unlink()
    check_iommu(host, resolve(host, BAD_GPU))


def test_bridge_in_group_is_fine(host: Host, host_tree: FakeHost) -> None:
    host_tree.pci("0000:3a:00.0", cls=0x060400, driver="weird_bridge_drv", group=20)
    check_iommu(host, resolve(host, GPU_VF))


def test_no_iommu_group(host: Host, host_tree: FakeHost) -> None:
    host_tree.pci("0000:3c:00.0", driver="vfio-pci")
    with pytest.raises(Conflict, match="no IOMMU group"):
        check_iommu(host, resolve(host, "0000:3c:00.0"))


def test_domain_placement_follows_the_device(host: Host) -> None:
    spec, warnings = render.domain(host, name="vm", memory_mib=2048, vcpus=4, devices=[GPU_VF, MDEV])
    assert spec.placement.numa_node == 1 and spec.placement.cpuset == "8-15"
    assert spec.placement.pins == ((0, 8), (1, 9), (2, 10), (3, 11))
    assert any("SeaBIOS" in w for w in warnings)


def test_domain_too_many_vcpus_float(host: Host) -> None:
    spec, warnings = render.domain(host, name="vm", memory_mib=2048, vcpus=12, devices=[GPU_VF])
    assert spec.placement.pins == () and spec.placement.cpuset == "8-15"
    assert any("float" in w for w in warnings)


def test_domain_split_numa_warns(host: Host) -> None:
    spec, warnings = render.domain(host, name="vm", memory_mib=2048, vcpus=2, devices=[NIC_VF, GPU_VF])
    assert spec.placement.numa_node == 0
    assert any("NUMA nodes [0, 1]" in w for w in warnings)


def test_hugepages_shortage_warns(host: Host) -> None:
    _, warnings = render.domain(host, name="vm", memory_mib=2048, vcpus=2, devices=[GPU_VF], hugepages=True)
    assert any("32 MiB of free hugepages" in w for w in warnings)  # node1 has 16 x 2 MiB
    _, warnings = render.domain(host, name="vm", memory_mib=2048, vcpus=2, devices=[NIC_VF], hugepages=True)
    assert not any("hugepages" in w for w in warnings)  # node0 has 8 GiB free


def test_firmware_detection_order(fake: FakeHost) -> None:
    host = Host(fake.root)
    assert detect_firmware(host).kind == "bios"
    with pytest.raises(NotFound, match="no UEFI firmware"):
        render.domain(host, name="vm", memory_mib=256, vcpus=1, devices=[], firmware="efi")
    fake.file("usr/share/OVMF/OVMF_CODE.fd", "")
    fw = detect_firmware(host)
    assert (fw.kind, fw.loader, fw.nvram_template) == ("pflash", "/usr/share/OVMF/OVMF_CODE.fd", None)
    fake.file("usr/share/OVMF/OVMF_CODE_4M.fd", "")
    fake.file("usr/share/OVMF/OVMF_VARS_4M.fd", "")
    fw = detect_firmware(host)
    assert (fw.loader, fw.nvram_template) == ("/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd")
    fake.file("usr/share/qemu/firmware/60-edk2.json", '{"interface-types": ["uefi"], "mapping": {}}')
    assert detect_firmware(host).kind == "efi"
    spec, _ = render.domain(host, name="vm", memory_mib=256, vcpus=1, devices=[], firmware="bios")
    assert spec.firmware.kind == "bios"


def test_parse_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    with pytest.raises(InvalidInput):
        parse_cpulist("0-x")


def test_domain_render_warns_about_non_viable_group(host: Host) -> None:
    _, warnings = render.domain(host, name="vm", memory_mib=2048, vcpus=1, devices=[BAD_GPU])
    assert any("not viable" in w for w in warnings)
