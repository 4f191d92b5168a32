"""Planted symlinks out of the host root, one per area that reads, lists, binds or creates files.

Every case: a link inside the simulated host points at a directory or file outside it (with a
secret in it); the command is refused with exit 2 naming the path as the user sees it, nothing of
the secret shows up, and nothing outside changes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from vgpukit.cli.main import main
from vgpukit.errors import OutsideRoot
from vgpukit.host import Host

from .harness import FuzzHost, Outcome, snapshot

SECRET = "root:$6$s3cr3t-hash:19000:0:99999:7:::"
UUID = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"


@pytest.fixture
def host(fuzz_host: FuzzHost) -> Iterator[FuzzHost]:
    fuzz_host.restore()
    yield fuzz_host
    fuzz_host.restore()


@pytest.fixture
def outside(fuzz_host: FuzzHost) -> Iterator[Path]:
    d = fuzz_host.work.parent / "outside"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    (d / "shadow").write_text(SECRET + "\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def link_out(host: FuzzHost, rel: str, target: Path) -> None:
    p = host.work / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()
    p.symlink_to(target)


def refused(res: Outcome, shown: str) -> None:
    assert res.rc == 2, res
    assert "outside the host root" in res.err or "leads outside" in res.err, res.err
    assert shown in res.err, res.err
    assert "s3cr3t" not in res.err + res.out


def run(host: FuzzHost, *argv: str) -> Outcome:
    host.before = snapshot(host.work)  # the planted link is part of the "before"
    try:
        return host.run(list(argv), group="containment")
    finally:
        host.before = host.pristine_snapshot


def test_qos_config_linked_to_a_secret_file(host: FuzzHost, outside: Path) -> None:
    link_out(host, "etc/vgpukit/qos.yaml", outside / "shadow")
    refused(run(host, "qos", "daemon"), "/etc/vgpukit/qos.yaml")


def test_template_overrides_in_a_linked_directory(host: FuzzHost, outside: Path) -> None:
    tpl = outside / "templates" / "libvirt" / "hostdev-pci.xml.j2"
    tpl.parent.mkdir(parents=True)
    tpl.write_text(f"<hostdev>{SECRET}</hostdev>")
    link_out(host, "etc/vgpukit/templates", outside / "templates")
    refused(run(host, "render", "hostdev", "gpu0"), "/etc/vgpukit/templates/libvirt/hostdev-pci.xml.j2")


def test_mdevctl_definitions_in_a_linked_directory(host: FuzzHost, outside: Path) -> None:
    d = outside / "mdevctl.d" / "mtty"
    d.mkdir(parents=True)
    (d / UUID).write_text('{"mdev_type": "mtty-1", "start": "auto"}')
    link_out(host, "etc/mdevctl.d", outside / "mdevctl.d")
    refused(run(host, "mdev", "list", "--defined"), "/etc/mdevctl.d")


def test_one_mdevctl_definition_linked_out(host: FuzzHost, outside: Path) -> None:
    (outside / "def").write_text('{"mdev_type": "mtty-1", "start": "auto"}')
    link_out(host, f"etc/mdevctl.d/mtty/{UUID}", outside / "def")
    refused(run(host, "mdev", "start", "--all"), f"/etc/mdevctl.d/mtty/{UUID}")


def test_qos_socket_directory_linked_out(host: FuzzHost, outside: Path) -> None:
    from vgpukit.qos import control, demand

    link_out(host, "run/vgpukit/qos", outside)
    h = Host(host.work)
    with pytest.raises(OutsideRoot, match=r"/run/vgpukit/qos/demand\.sock"):
        demand.open_server(h)
    with pytest.raises(OutsideRoot, match=r"/run/vgpukit/qos/control\.sock"):
        control.ControlServer(h, lambda req, peer: {})  # type: ignore[arg-type,return-value]
    assert sorted(p.name for p in outside.iterdir()) == ["shadow"]  # no socket was created there
    refused(run(host, "qos", "status"), "/run/vgpukit/qos/control.sock")
    refused(run(host, "qos", "notify", "gpu0", "a", "busy"), "/run/vgpukit/qos/demand.sock")


def test_bind_records_in_a_linked_directory(host: FuzzHost, outside: Path) -> None:
    (outside / "0000:05:00.0.json").write_text('{"driver": "vfio-pci", "override": null}')
    link_out(host, "run/vgpukit/bind", outside)
    refused(run(host, "bind", "nic0", "--restore"), "/run/vgpukit/bind/0000:05:00.0.json")


def setup(host: FuzzHost, *argv: str) -> None:
    """A change that stays (the harness would restore the host after it)."""
    assert main(["--sim", str(host.work), *argv]) == 0


def test_cdi_output_directory_linked_out(host: FuzzHost, outside: Path) -> None:
    setup(host, "sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci")
    setup(host, "cdi", "generate", "--class", "vf")
    # the same specs, outside: a read through the link would find them up to date and say nothing
    shutil.copytree(host.work / "etc" / "cdi", outside / "cdi")
    link_out(host, "etc/cdi", outside / "cdi")
    before = snapshot(outside)
    refused(run(host, "cdi", "generate", "--class", "vf"), "/etc/cdi/vgpukit-vf.yaml")
    assert snapshot(outside) == before


def test_sysfs_attribute_linked_out(host: FuzzHost, outside: Path) -> None:
    link_out(host, "sys/devices/pci0000:00/0000:05:00.0/vendor", outside / "shadow")
    refused(run(host, "devices"), "/sys/bus/pci/devices/0000:05:00.0/vendor")  # the path as it was read


def test_device_directory_linked_out(host: FuzzHost, outside: Path) -> None:
    shutil.copytree(host.work / "sys/devices/pci0000:00/0000:05:00.0", outside / "dev", symlinks=True)
    link_out(host, "sys/bus/pci/devices/0000:05:00.0", outside / "dev")
    refused(run(host, "devices"), "/sys/bus/pci/devices/0000:05:00.0")


def test_firmware_descriptors_in_a_linked_directory(host: FuzzHost, outside: Path) -> None:
    (outside / "fw").mkdir()
    (outside / "fw" / "50-edk2.json").write_text('{"interface-types": ["uefi"]}')
    link_out(host, "usr/share/qemu/firmware", outside / "fw")
    res = run(host, "render", "domain", "--name", "vm", "--memory", "1024", "--vcpus", "1", "--no-pin")
    refused(res, "/usr/share/qemu/firmware")


def test_sim_reactions_never_write_outside(host: FuzzHost, outside: Path) -> None:
    """The simulated kernel creates IOMMU groups for new VFs: a planted group directory is refused."""
    shutil.copytree(host.work / "sys/kernel/iommu_groups", outside / "groups", symlinks=True)
    link_out(host, "sys/kernel/iommu_groups", outside / "groups")
    before = snapshot(outside)
    res = run(host, "sriov", "enable", "nic0", "--vfs", "2")
    assert res.rc == 2 and "outside" in res.err, res
    assert snapshot(outside) == before


def test_sim_state_file_linked_out(host: FuzzHost, outside: Path) -> None:
    shutil.copy(host.work / ".vgpukit-sim/nvml.json", outside / "nvml.json")
    link_out(host, ".vgpukit-sim/nvml.json", outside / "nvml.json")
    res = run(host, "mig", "status")
    assert res.rc == 2 and "nvml.json" in res.err and "sim init" in res.err, res


def test_links_within_the_root_are_followed(host: FuzzHost) -> None:
    """/sys is full of links inside it (driver, physfn, iommu_group): those are fine."""
    res = run(host, "sriov", "enable", "nic0", "--vfs", "2")
    assert res.rc == 0 and "create 2 VFs" in res.out, res
    res = run(host, "devices", "--all")
    assert res.rc == 0 and "0000:05:00.0" in res.out, res


def test_read_doc_rules(tmp_path: Path) -> None:
    h = Host(tmp_path)
    (tmp_path / "big").write_bytes(b"x" * 2000)
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Exception, match="larger than 1000 bytes"):
        h.read_doc(tmp_path / "big", "config", 1000)
    with pytest.raises(Exception, match="not UTF-8"):
        h.read_doc(tmp_path / "bin", "config")
    with pytest.raises(Exception, match="not a regular file"):
        h.read_doc(tmp_path / "fifo", "config")  # returns at once: never blocks on a FIFO
    with pytest.raises(Exception, match="not a regular file"):
        h.read_doc("/dev/zero", "config", user_file=True)
    assert h.read_doc(tmp_path / "missing", "config", missing_ok=True) is None


def test_ld_so_cache_linked_to_a_file_outside(host: FuzzHost, outside: Path) -> None:
    """Issue 29: the CDI collector read /etc/ld.so.cache with a plain open() and followed a planted link."""
    (outside / "ld.so.cache").write_bytes(b"glibc-ld.so.cache1.1" + SECRET.encode())
    link_out(host, "etc/ld.so.cache", outside / "ld.so.cache")
    refused(run(host, "cdi", "generate", "--dry-run", "--class", "gpu"), "/etc/ld.so.cache")
