"""The suite's own guard: a session that leaves something in the temporary directory fails under CI
(a CI run's tmpfs filled up with what tests had left there, 2026-11-29)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LEAKY = """
import tempfile

def test_leaves_a_directory():
    tempfile.mkdtemp(prefix="left-behind-")
"""
TIDY = """
import tempfile

def test_cleans_up():
    with tempfile.TemporaryDirectory(prefix="tidy-"):
        pass
"""


def _session(tmp_path: Path, body: str, ci: str) -> subprocess.CompletedProcess[str]:
    where = tmp_path / "session"
    where.mkdir()
    (where / "test_one.py").write_text(body)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "CI": ci, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest"]
    return subprocess.run(
        [*argv, "--rootdir", str(where), str(where / "test_one.py")],
        cwd=where,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("ci", ["true", ""])
def test_a_session_that_leaves_a_directory_fails_under_ci(tmp_path: Path, ci: str) -> None:
    r = _session(tmp_path, LEAKY, ci)
    assert "\nLEFT BEHIND: the session left an entry in" in r.stdout and "left-behind-" in r.stdout, r.stdout
    assert r.returncode == (1 if ci else 0), r.stdout + r.stderr


def test_a_tidy_session_passes_under_ci(tmp_path: Path) -> None:
    r = _session(tmp_path, TIDY, "true")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "LEFT BEHIND" not in r.stdout
