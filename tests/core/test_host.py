"""The host door: root containment, dry-run, typed errors."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from vgpukit.errors import Busy, HostIOError, InvalidInput, NotFound, OutsideRoot, from_oserror
from vgpukit.host import Host, check_name


def test_paths_derive_from_root(tmp_path: Path) -> None:
    h = Host(tmp_path)
    assert h.sys("bus", "pci") == tmp_path / "sys" / "bus" / "pci"
    assert h.config_dir() == tmp_path / "etc" / "vgpukit"
    assert h.state_dir("x") == tmp_path / "run" / "vgpukit" / "x"
    assert h.display(h.dev("vfio", "3")) == "/dev/vfio/3"


@pytest.mark.parametrize("bad", ["..", "../etc", "/etc/passwd", "a/../../b"])
def test_path_refuses_escape(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidInput):
        Host(tmp_path).path("run", bad)


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "x\0y"])
def test_check_name(bad: str) -> None:
    with pytest.raises(InvalidInput):
        check_name(bad)


def test_write_refuses_symlink_escape(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "run").mkdir(parents=True)
    os.symlink(outside, root / "run" / "evil")
    h = Host(root)
    with pytest.raises(InvalidInput, match="outside the host root"):
        h.write_file(root / "run" / "evil" / "x", "data")
    assert not (outside / "x").exists()


def test_dry_run_records_and_changes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "sys" / "attr"
    target.parent.mkdir(parents=True)
    target.write_text("0\n")
    h = Host(tmp_path, dry_run=True)
    h.write(target, "5")
    h.write_file(tmp_path / "etc" / "vgpukit" / "x.yaml", "a: 1\n")
    assert target.read_text() == "0\n"
    assert not (tmp_path / "etc" / "vgpukit" / "x.yaml").exists()
    assert [c.describe() for c in h.changes] == ["write '5' > /sys/attr", "write file /etc/vgpukit/x.yaml"]


def test_write_file_atomic_and_mode(tmp_path: Path) -> None:
    h = Host(tmp_path)
    p = h.config_dir("a.yaml")
    h.write_file(p, "x: 1\n", mode=0o600)
    assert p.read_text() == "x: 1\n"
    assert p.stat().st_mode & 0o777 == 0o600
    assert [f.name for f in p.parent.iterdir()] == ["a.yaml"]


def test_write_missing_attr_is_not_found(tmp_path: Path) -> None:
    h = Host(tmp_path)
    (tmp_path / "sys").mkdir()
    with pytest.raises(NotFound) as ei:
        h.write(h.sys("nope"), "1")
    assert ei.value.errno == errno.ENOENT
    assert ei.value.path == "/sys/nope"


def test_errno_mapping() -> None:
    err = from_oserror(OSError(errno.EBUSY, "busy"), path="/sys/x", action="writing")
    assert isinstance(err, Busy) and err.errno == errno.EBUSY and err.exit_code == 4
    assert err.to_dict()["errno"] == "EBUSY"
    assert isinstance(from_oserror(OSError(errno.EIO, "io"), path="/x", action="reading"), HostIOError)


def test_reads(tmp_path: Path) -> None:
    h = Host(tmp_path)
    (tmp_path / "f").write_text(" 0x10de \n")
    assert h.read(tmp_path / "f") == "0x10de"
    assert h.read_int(tmp_path / "f") == 0x10DE
    assert h.read_opt(tmp_path / "missing") is None
    assert h.listdir(tmp_path / "missing") == []
    with pytest.raises(NotFound):
        h.read(tmp_path / "missing")


def test_char_device_numbers_only_for_real_nodes(tmp_path: Path) -> None:
    h = Host(tmp_path)
    plain = tmp_path / "dev" / "nvidia0"
    plain.parent.mkdir()
    plain.write_text("simulated")
    assert h.char_device(plain) is None
    assert h.char_device(tmp_path / "dev" / "missing") is None
    node = tmp_path / "dev" / "null"
    try:
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # the harmless null device
    except PermissionError:
        pytest.skip("mknod needs root")
    assert h.char_device(node) == (1, 3)


def test_files_reads_a_directory_by_name_contained(tmp_path: Path) -> None:
    """``Host.files``: one listing, then only listed files; links are followed only inside the root,
    a directory or an unlisted name is the default, and a link leading outside is refused."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    d = root / "sys" / "dev0"
    (d / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("s\n")
    (d / "vendor").write_text("0x10de\n")
    (root / "sys" / "shared").write_text("inside\n")
    (d / "linked").symlink_to("../shared")
    (d / "driver").symlink_to("../../drivers/vfio-pci")
    (d / "escape").symlink_to(outside / "secret")
    h = Host(root)
    with h.files(h.sys("dev0")) as f:
        assert f.names == {"vendor", "sub", "linked", "driver", "escape"}
        assert f.read("vendor") == "0x10de" and f.read("linked") == "inside"
        assert f.read("sub", "x") == "x" and f.read("missing", "y") == "y"
        assert f.link_name("driver") == "vfio-pci" and f.link_name("vendor") is None
        with pytest.raises(OutsideRoot):
            f.read("escape")
    with h.files(h.sys("absent")) as f:
        assert f.names == frozenset() and f.read("vendor") is None
