"""``vgpukit sim fault storage``: the faults in force are shown (``sim fault list``, ``sim info``) and cleared
(``sim fault clear``); a directory must be absolute without ``..`` (``relative/dir`` and ``../../etc`` became
/relative/dir and /etc); ``ok`` makes the file system holding DIR work again whichever directory its fault
was set on. ``sim fault pf-reset`` of a function without SR-IOV is refused (it said "0 VF(s) gone")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim


@pytest.fixture
def sim(tmp_path: Path) -> Path:
    return make_sim(tmp_path / "h", "hgx-a100")


def _ok(sim: Path, *args: str) -> str:
    r = invoke(sim, *args)
    assert r.exit_code == 0, r.output
    return r.stdout


def test_storage_faults_are_listed_shown_and_cleared(sim: Path) -> None:
    _ok(sim, "sim", "fault", "storage", "/run", "ENOSPC")
    _ok(sim, "sim", "fault", "add", "ResetGpu")
    listed = json.loads(_ok(sim, "sim", "fault", "list", "--json"))
    assert listed["storage"] == {"/run": "ENOSPC"} and len(listed["faults"]) == 1
    assert "/run" in _ok(sim, "sim", "fault", "list") and "ENOSPC" in _ok(sim, "sim", "info")
    assert json.loads(_ok(sim, "sim", "info", "--json"))["storage"] == {"/run": "ENOSPC"}
    _ok(sim, "sim", "fault", "clear")
    listed = json.loads(_ok(sim, "sim", "fault", "list", "--json"))
    assert listed == {"schema": "vgpukit.sim-faults/v1", "faults": [], "storage": {}}
    _ok(sim, "sriov", "enable", "nic0", "--vfs", "1")  # /run takes the lock's record again


@pytest.mark.parametrize("path", ["relative/dir", "../../etc", "/run/../etc", "run", ""])
def test_a_directory_must_be_absolute_without_dots(sim: Path, path: str) -> None:
    r = invoke(sim, "sim", "fault", "storage", path, "EROFS")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert json.loads(_ok(sim, "sim", "fault", "list", "--json"))["storage"] == {}


def test_ok_clears_the_file_system_holding_the_directory(sim: Path) -> None:
    _ok(sim, "sim", "fault", "storage", "/run", "ENOSPC")
    _ok(sim, "sim", "fault", "storage", "/etc/cdi", "EROFS")  # another file system, mounted there
    assert "/run ENOSPC" in _ok(sim, "sim", "fault", "storage", "/etc/cdi/x", "EIO")
    # the deepest fault is the file system holding a path: /etc/cdi/x's own
    r = invoke(sim, "sriov", "enable", "nic0", "--vfs", "1")
    assert r.exit_code == 1 and "(ENOSPC)" in r.stderr
    left = _ok(sim, "sim", "fault", "storage", "/run/vgpukit", "ok")  # the directory the error names: /run's
    assert left == "storage faults: /etc/cdi EROFS, /etc/cdi/x EIO\n"
    _ok(sim, "sriov", "enable", "nic0", "--vfs", "1")
    assert _ok(sim, "sim", "fault", "storage", "/etc/cdi/x/y", "ok") == "storage faults: /etc/cdi EROFS\n"
    assert _ok(sim, "sim", "fault", "storage", "/etc/cdi/x", "ok") == "storage faults: none\n"


def test_a_pf_reset_needs_an_sriov_pf(sim: Path) -> None:
    r = invoke(sim, "sim", "fault", "pf-reset", "0000:03:00.0")  # gpu0: no SR-IOV on an A100 SXM here
    assert r.exit_code == 2 and "not an SR-IOV PF" in r.stderr
    assert _ok(sim, "sim", "fault", "pf-reset", "0000:05:00.0") == "0000:05:00.0 reset: 0 VFs gone\n"
