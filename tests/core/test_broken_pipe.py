"""A reader that goes away (``vgpukit sriov list | head -1``): vgpukit ends quietly with 141, what a shell
reports for ls or cat killed by SIGPIPE (click's answer was exit 1, the code of a failure), whatever the
command and its output (a table, --json, mdevctl's fast reads)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_sim


@pytest.mark.parametrize(
    "args",
    [("sriov", "list"), ("devices", "--json"), ("mdev", "--mdevctl", "types"), ("k8s", "kubevirt-config"), ("health",)],
)
def test_a_closed_pipe_ends_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    sim = make_sim(tmp_path / "h", "t4-mdev")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        p = subprocess.run(
            [sys.executable, "-m", "vgpukit", "--sim", str(sim), *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert p.returncode == 141
    assert "Traceback" not in p.stderr and "error" not in p.stderr and "Broken pipe" not in p.stderr
