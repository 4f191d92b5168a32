"""Steps that share a batch key are journaled together: every inverse of the run is durable before the
first of them applies (one fsync for the run), and a failure undoes only the steps that started."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from vgpukit.engine import Env, Step, execute, step_kind
from vgpukit.errors import VerifyFailed
from vgpukit.host import Host

JOURNAL_LINES: list[int] = []  # the journal's length as each Mark step found it when it applied


@step_kind
@dataclass(frozen=True)
class Mark(Step):
    """Write ``text`` to etc/marks/NAME (a test step); the inverse puts back what was there."""

    kind: ClassVar[str] = "test-mark"
    name: str
    text: str | None
    fail: bool = False

    def describe(self) -> str:
        return f"mark {self.name}"

    def batch(self) -> str:
        return "test-mark"

    def inverse(self, env: Env) -> Step:
        return Mark(self.name, env.host.read_raw_opt(env.host.etc("marks", self.name)))

    def apply(self, env: Env) -> None:
        journal = env.host.read_raw_opt(env.host.state_dir("journal")) or ""
        JOURNAL_LINES.append(len(journal.splitlines()))
        if self.fail:
            raise VerifyFailed(f"{self.name} failed")
        target = env.host.etc("marks", self.name)
        if self.text is None:
            env.host.remove(target)
        else:
            env.host.write_file(target, self.text)


def test_a_batch_is_journaled_before_its_first_step(tmp_path: Path) -> None:
    env = Env(Host(tmp_path), command="test")
    JOURNAL_LINES.clear()
    execute(env, [Mark(f"m{i}", "x\n") for i in range(5)])
    assert JOURNAL_LINES == [6, 6, 6, 6, 6]  # the head line and all 5 inverses, at once
    assert sorted(p.name for p in (tmp_path / "etc" / "marks").iterdir()) == [f"m{i}" for i in range(5)]


def test_a_failure_in_a_batch_undoes_the_started_steps(tmp_path: Path) -> None:
    (tmp_path / "etc" / "marks").mkdir(parents=True)
    (tmp_path / "etc" / "marks" / "m3").write_text("kept\n")
    env = Env(Host(tmp_path), command="test")
    steps = [Mark(f"m{i}", "x\n") for i in range(2)] + [Mark("m2", "x\n", fail=True), Mark("m3", "y\n")]
    with pytest.raises(VerifyFailed, match="rolled back the 2 steps done"):
        execute(env, steps)
    assert [p.name for p in (tmp_path / "etc" / "marks").iterdir()] == ["m3"]
    assert (tmp_path / "etc" / "marks" / "m3").read_text() == "kept\n"
    assert not (tmp_path / "run" / "vgpukit" / "journal").exists()
