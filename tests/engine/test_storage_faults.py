"""A full, over-quota, read-only or failing file system under any file vgpukit writes: one line naming
the file and what to free or fix, exit 1, the host as before, and the same command working once the
fault is gone (docs/engine.md, "Storage faults"). The matrix and its two means (the simulated host's
own storage faults; real file systems mounted on the simulated host: a full tmpfs, a read-only bind
mount) are in tests/engine/storage_matrix.py, which also prints the table."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.engine import storage_matrix as m
from tests.engine.helpers import fresh

KNOB_ROWS = [pytest.param(c, p, id=f"{c.name}:{p}") for c in m.CASES for p in m.fault_paths(c)]
MOUNT_ROWS = [pytest.param(c, p, id=f"{c.name}:{p}") for c in m.CASES for p in m.mount_paths(c)]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("storage")


def need_root() -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        why = "mounting a tmpfs and a read-only bind mount needs root and mount(8)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def check_row(case: m.Case, path: str, outcomes: dict[str, m.Outcome]) -> None:
    for error, o in outcomes.items():
        where = f"{case.name}, {path}, {error}: {o.line!r}"
        if o.code == 0:  # a command that only removes files there: a full file system lets it
            assert error in ("ENOSPC", "EDQUOT"), where
            continue
        assert o.code == 1, where
        assert o.line.count("\n") == 0 and o.line.startswith("vgpukit: error: "), where
        assert "internal error" not in o.line and "Traceback" not in o.line, where
        assert path in o.line or (path == "/run/vgpukit" and "/run/vgpukit/" in o.line), where
        assert f"({error})" in o.line and "then run" in o.line, where
        if case.name == "recover":  # it puts back what it can; its journal stays for the next command
            assert o.unchanged or o.journal_left, where
        else:
            assert o.unchanged and not o.journal_left, where
        assert o.again == 0, where


@pytest.mark.parametrize(("case", "path"), KNOB_ROWS)
def test_storage_fault_of_the_simulated_host(case: m.Case, path: str, base: Path) -> None:
    check_row(case, path, m.row(case, path, "knob", base))


@pytest.mark.parametrize(("case", "path"), MOUNT_ROWS)
def test_real_full_and_read_only_file_systems(case: m.Case, path: str, base: Path) -> None:
    need_root()
    check_row(case, path, m.row(case, path, "mount", base))


ALL_HALF = """version: v1
mig-configs:
  half:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
"""


def test_the_journal_filling_up_mid_command_rolls_back(tmp_path: Path) -> None:
    """/run/vgpukit a real tmpfs with one free page: the journal's first page fits, its second does not.
    ``mig apply`` on 8 GPUs journals each inverse before its change (about 40), so MIG modes were
    changed and slices made when the journal runs out of room: all of it put back, one line."""
    need_root()
    sim = fresh(tmp_path, "hgx-a100")
    config = tmp_path / "mig.yaml"
    config.write_text(ALL_HALF)
    layout = invoke(sim, "mig", "export").stdout
    before = m.state(sim)
    run = sim / "run" / "vgpukit"
    run.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(run)], check=True)
    try:
        (run / "lock").write_text("1\nan earlier holder's record\n")  # its page is the next holder's
        slack = os.open(run / ".slack", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(slack, b"\0" * 4096)
        os.close(slack)
        fill = os.open(run / m.FILL, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fill, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fill)
        os.unlink(run / ".slack")  # one page free: the journal's first
        r = invoke(sim, "mig", "apply", "-f", str(config), "-c", "half")
        assert r.exit_code == 1, r.stderr
        line = r.stderr.strip()
        assert line.count("\n") == 0 and "writing /run/vgpukit/journal failed: no space left" in line, line
        assert "; rolled back the " in line and "steps done" in line, line  # it had changed the GPUs
        assert invoke(sim, "mig", "export").stdout == layout
        assert {k: v for k, v in m.state(sim).items() if k != "run/vgpukit/lock"} == before
        assert not (run / "journal").exists()
        os.unlink(run / m.FILL)
        again = invoke(sim, "mig", "apply", "-f", str(config), "-c", "half")
        assert again.exit_code == 0, again.stderr
    finally:
        subprocess.run(["umount", "-l", str(run)], check=True)


def test_a_kernel_enospc_is_still_no_capacity(tmp_path: Path) -> None:
    """ENOSPC from a kernel control file (mdev's ``create`` when the parent is full) is the kernel's
    "no room", exit 4, not a full disk."""
    sim = fresh(tmp_path, "t4-mdev")
    assert invoke(sim, "mdev", "create", m.T4, "nvidia-234").exit_code == 0
    r = invoke(sim, "--json", "mdev", "create", m.T4, "nvidia-234")
    assert r.exit_code == 4 and '"storage"' not in r.stdout, r.stderr
