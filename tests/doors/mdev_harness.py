"""A minimal door harness for the mdev / vGPU rows of the door matrix: the same request through every
door that takes it, each answer reduced to (exit code, error kind, message shape).

Doors: the area command (``vgpukit mdev ...`` / ``vgpukit vgpu ...``, in-process through
:func:`tests.conftest.invoke`), ``vgpukit apply -f FILE -c NAME``, the node agent's way to apply (its
:class:`~vgpukit.k8s.agent.ApplyRunner` argv, run as a process, read back through
:func:`~vgpukit.k8s.agent.outcome`), the Ansible module (run as Ansible runs a module: a process
given its arguments file) and the mdevctl shim (``vgpukit mdev --mdevctl ...``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import invoke
from tests.fleet.test_apply import sysfs
from vgpukit.k8s.agent import ApplyRunner, outcome

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "contrib/ansible/ansible_collections/vgpukit/host/plugins/modules/vgpukit_apply.py"
VGPUKIT = str(Path(sys.executable).with_name("vgpukit"))
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
WHERE_RE = re.compile(r"^\S+:\d+: (config \S+: )?")  # "FILE:LINE: " that apply puts before a refusal of an entry


@dataclass(frozen=True)
class Answer:
    door: str
    code: int
    kind: str
    message: str
    hint: str = ""

    @property
    def shape(self) -> str:
        """The message without what differs by door by design: where in a file, made-up UUIDs, what
        the rollback note says."""
        text = WHERE_RE.sub("", self.message)
        text = UUID_RE.sub("<uuid>", text)
        return re.split(r"; (nothing was changed|rolled back)", text)[0]


def _json_answer(door: str, code: int, stdout: str) -> Answer:
    try:
        doc = json.loads(stdout) if stdout.strip() else {}
    except ValueError:
        doc = {}
    return Answer(door, code, str(doc.get("error", "")), str(doc.get("message", "")), str(doc.get("hint") or ""))


def area(sim: Path, *argv: str) -> Answer:
    r = invoke(sim, *argv, "--json")
    return _json_answer("area", r.exit_code, r.stdout)


def shim(sim: Path, *argv: str) -> Answer:
    r = invoke(sim, "mdev", "--mdevctl", *argv, "--json")
    return _json_answer("shim", r.exit_code, r.stdout)


def write_config(where: Path, config: str) -> Path:
    path = where / "doors.yaml"
    body = "\n".join("    " + line for line in config.strip("\n").splitlines())
    path.write_text(f"version: vgpukit.host/v1\nconfigs:\n  row:\n{body}\n")
    return path


def apply(sim: Path, file: Path) -> Answer:
    r = invoke(sim, "apply", "-f", str(file), "-c", "row", "--json")
    return _json_answer("apply", r.exit_code, r.stdout)


def agent(sim: Path, file: Path) -> Answer:
    """What the node agent runs and reads (its state message is apply's message)."""
    argv = ApplyRunner(VGPUKIT, file, sim_dir=sim).argv("row")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    said = outcome(proc.returncode, proc.stdout)
    doc = _json_answer("agent", proc.returncode, proc.stdout)
    message = said.message.removeprefix("refused: ")
    return Answer("agent", proc.returncode, doc.kind, message)


def ansible(sim: Path, file: Path, tmp: Path, hint: str) -> Answer:
    """The Ansible module as Ansible runs it: a process reading its arguments file (its message is
    vgpukit's one error line: the message, then `` (hint)``)."""
    args = tmp / "ansible-args.json"
    params = {"file": str(file), "config": "row", "sim": str(sim), "executable": VGPUKIT, "wait": 5.0}
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(args)], capture_output=True, text=True, timeout=120, check=False, env=env
    )
    doc = json.loads(proc.stdout)
    msg = str(doc.get("msg", ""))
    msg = msg.removesuffix(f" ({hint})") if hint else msg
    return Answer("ansible", int(doc.get("rc", 0)), str(doc.get("error", "")), msg)


def config_doors(sim: Path, config: str, tmp: Path) -> list[Answer]:
    """The config doors: apply, the node agent, the Ansible module (in that order)."""
    file = write_config(tmp, config)
    first = apply(sim, file)
    return [first, agent(sim, file), ansible(sim, file, tmp, first.hint)]


def snapshot(sim: Path) -> dict[str, object]:
    """The simulated host's visible tree (to prove a refusal changed nothing)."""
    return sysfs(sim)


def same(answers: list[Answer]) -> Answer:
    """All answers agree on exit code, kind and message shape (and refuse: non-zero); the first."""
    first = answers[0]
    for a in answers[1:]:
        assert (a.code, a.kind, a.shape) == (first.code, first.kind, first.shape), f"{a} differs from {first}"
    assert first.code != 0, first
    return first


def every_door(
    sim: Path, tmp: Path, area_argv: tuple[str, ...], config: str, shim_argv: tuple[str, ...] | None = None
) -> Answer:
    """One request through the area command, the config doors and (when it takes it) the shim: the
    same refusal everywhere, and the host exactly as before. The first answer."""
    before = snapshot(sim)
    answers = [area(sim, *area_argv), *config_doors(sim, config, tmp)]
    if shim_argv is not None:
        answers.append(shim(sim, *shim_argv))
    first = same(answers)
    assert snapshot(sim) == before, "a refusal changed the host"
    return first
