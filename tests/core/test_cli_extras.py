"""What every CLI user expects: -V, shell completion, a man page that matches the commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vgpukit", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def test_short_version_flag() -> None:
    r = _run("-V")
    assert r.returncode == 0 and r.stdout.startswith("vgpukit, version ")


def test_completion_scripts_and_command_completion() -> None:
    for shell in ("bash", "zsh", "fish"):
        r = _run("completion", shell)
        assert r.returncode == 0 and "_VGPUKIT_COMPLETE" in r.stdout, shell
    r = _run(env={"_VGPUKIT_COMPLETE": "bash_complete", "COMP_WORDS": "vgpukit sri", "COMP_CWORD": "1"})
    assert "sriov" in r.stdout
    r = _run("completion", "tcsh")
    assert r.returncode == 2 and r.stderr.startswith("vgpukit: error: ") and r.stderr.count("\n") == 1


def test_shipped_man_page_is_generated_from_the_current_help() -> None:
    from vgpukit.cli.manpage import render

    shipped = (ROOT / "docs" / "man" / "vgpukit.1").read_text()
    assert shipped == render(), "regenerate: python -m vgpukit.cli.manpage > docs/man/vgpukit.1"
    assert ".SS vgpukit sriov enable" in shipped and "\\-\\-wait SECONDS" in shipped
