"""The engine names no area: steps register themselves, and a journal entry says which module defines
its step, so recovery in a fresh process that never imported the area still rebuilds it; derived files
(CDI specs) come from the refreshers the front end's composition hands the engine."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vgpukit
from vgpukit.engine import Env, from_dict
from vgpukit.engine.journal import Journal
from vgpukit.engine.step import to_entry
from vgpukit.errors import InvalidInput
from vgpukit.host import Host
from vgpukit.mdev.steps import RemoveMdev

PKG = Path(vgpukit.__file__).parent
AREAS = ("sriov", "mdev", "vgpu", "mig", "attach", "cdi", "qos", "k8s", "fleet", "sim", "cli", "clikit", "libvirt")
UUID = "11111111-2222-3333-4444-555555555555"


def test_the_engine_names_no_area() -> None:
    named = []
    for path in sorted((PKG / "engine").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.ImportFrom) and node.module:
                text = ("vgpukit." if node.level else "") + node.module
            else:
                continue
            named += [f"{path.name}: {text!r}" for area in AREAS if f"vgpukit.{area}" in text or text == area]
    assert not named, "the change engine names area modules:\n" + "\n".join(named)


def test_a_journal_entry_names_the_module_of_its_step() -> None:
    entry = to_entry(RemoveMdev(UUID))
    assert entry["module"] == "vgpukit.mdev.steps"
    assert from_dict(json.loads(json.dumps(entry))) == RemoveMdev(UUID)


SCRIPT = """
import sys
from pathlib import Path
from vgpukit.engine import Env, recover
from vgpukit.host import Host
lines = recover(Env(Host(Path(sys.argv[1]))))
print("\\n".join(lines))
print("imported:", "vgpukit.mdev.steps" in sys.modules)
"""


def test_recovery_in_a_fresh_process_imports_the_step_module(tmp_path: Path) -> None:
    book = Journal(Host(tmp_path), "vgpukit mdev create ...")
    book.add(to_entry(RemoveMdev(UUID, "mtty", "mtty-1")))
    os.close(book.fd)  # the command died: the journal stays
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"put back: remove {UUID} (mtty-1 on mtty)" in res.stdout
    assert "imported: True" in res.stdout
    assert not (tmp_path / "run/vgpukit/journal").exists()


def test_an_entry_from_before_modules_were_journaled_is_still_rebuilt(tmp_path: Path) -> None:
    book = Journal(Host(tmp_path), "vgpukit mdev create ...")
    entry = to_entry(RemoveMdev(UUID, "mtty", "mtty-1"))
    del entry["module"]  # as an older vgpukit wrote it
    book.add(entry)
    os.close(book.fd)
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"put back: remove {UUID} (mtty-1 on mtty)" in res.stdout


@pytest.mark.parametrize("module", ["os", "vgpukit", "vgpukit..x", "vgpukit.nosuch", "vgpukit.engine.step ", 7])
def test_an_entry_of_an_unknown_kind_imports_only_a_vgpukit_module(module: object) -> None:
    before = set(sys.modules)
    with pytest.raises(InvalidInput, match="unknown kind"):
        from_dict({"kind": "no-such-kind", "module": module})
    assert {m for m in set(sys.modules) - before if not m.startswith("vgpukit")} == set()


def test_derived_files_come_from_the_environment(tmp_path: Path) -> None:
    from vgpukit.engine import execute
    from vgpukit.engine.files import PutFile

    seen: list[str] = []

    def refresher(env: Env) -> list[PutFile]:
        seen.append("asked")
        return [PutFile("/etc/vgpukit/derived.txt", "derived\n")]

    env = Env(Host(tmp_path), command="test", derived=(refresher,))
    done = execute(env, [PutFile("/etc/vgpukit/x.conf", "x\n")])
    assert seen == ["asked"] and len(done.done) == 2
    assert (tmp_path / "etc/vgpukit/derived.txt").read_text() == "derived\n"
