"""Every door onto a host, driven the same way, so a rule can be checked to give one answer through all.

A *door* takes a request to a simulated host and answers with an :class:`Answer` (exit code, error
kind, message, the stderr line). The doors:

* ``area``: the area command in-process (``tests.conftest.invoke``, ``--json``);
* ``apply``: ``vgpukit apply -f FILE -c NAME --json`` in-process, on a host config file;
* ``agent``: the Kubernetes node agent's way to apply (``vgpukit.k8s.agent.ApplyRunner``: the
  installed ``vgpukit`` as a subprocess), answered as the agent reports it (:func:`outcome`);
* ``ansible``: the Ansible module (contrib/ansible, ``vgpukit_apply``) run as Ansible runs a module:
  its file with the arguments file (``{"ANSIBLE_MODULE_ARGS": ...}``), as a subprocess.

:func:`host_state` is the simulated host's visible tree, to show a refusal changed nothing. A rule's
row gives the area command's argv and the same request as a host config (``CONFIG``: the config's
body under ``configs: {NAME: ...}``); other areas add their rows with their own commands.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import invoke
from tests.fuzz.harness import snapshot
from vgpukit.k8s.agent import FAILED, ApplyRunner, outcome

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_MODULE = ROOT / "contrib/ansible/ansible_collections/vgpukit/host/plugins/modules/vgpukit_apply.py"
VGPUKIT = str(Path(sys.executable).with_name("vgpukit"))
CONFIG = "door"  # the config name every row's host config uses
LOCATION = re.compile(r"^\S+:\d+: (config \S+: )?")  # apply names the entry a refusal is about: FILE:LINE: config NAME:


@dataclass(frozen=True)
class Answer:
    door: str
    code: int
    kind: str | None  # the error kind (in-use, unsupported...); None on success
    message: str  # the error message, the config location left out
    line: str = ""  # the whole one-line error as the door shows it (hint included)
    state: str = ""  # the agent: the state it reports (pending | success | failed)


def _error(doc: dict[str, object]) -> tuple[str | None, str]:
    kind = doc.get("error")
    return (kind if isinstance(kind, str) else None), LOCATION.sub("", str(doc.get("message") or ""))


def _json(text: str) -> dict[str, object]:
    try:
        doc = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def area(sim: Path, args: list[str]) -> Answer:
    r = invoke(sim, "--json", *args)
    kind, message = _error(_json(r.stdout)) if r.exit_code else (None, "")
    return Answer("area", r.exit_code, kind, message, r.stderr.strip())


def host_config(where: Path, body: str) -> Path:
    """A vgpukit.host/v1 file with one config, ``CONFIG``, whose body is ``body`` (YAML, indented 4)."""
    path = where / "host.yaml"
    lines = ["version: vgpukit.host/v1", "configs:", f"  {CONFIG}:"]
    path.write_text("\n".join(lines + ["    " + line for line in body.strip().splitlines()]) + "\n")
    return path


def apply(sim: Path, path: Path) -> Answer:
    r = invoke(sim, "--json", "apply", "-f", str(path), "-c", CONFIG)
    kind, message = _error(_json(r.stdout)) if r.exit_code else (None, "")
    return Answer("apply", r.exit_code, kind, message, r.stderr.strip())


def agent(sim: Path, path: Path) -> Answer:
    runner = ApplyRunner(VGPUKIT, path, sim_dir=sim)
    proc = subprocess.run(runner.argv(CONFIG), capture_output=True, text=True, timeout=300, check=False)
    reported = outcome(proc.returncode, proc.stdout)
    kind, _ = _error(_json(proc.stdout))
    message = LOCATION.sub("", reported.message.removeprefix("refused: ")) if reported.state == FAILED else ""
    return Answer("agent", proc.returncode, kind, message, proc.stderr.strip(), reported.state)


def ansible(sim: Path, path: Path, work: Path) -> Answer:
    args = work / "ansible-args.json"
    params = {"file": str(path), "config": CONFIG, "sim": str(sim), "executable": VGPUKIT}
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(ANSIBLE_MODULE), str(args)], capture_output=True, text=True, timeout=300, env=env
    )
    doc = _json(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "")
    failed = bool(doc.get("failed"))
    msg = str(doc.get("msg") or "")
    kind = doc.get("error") if failed else None
    rc = doc.get("rc", 0 if not failed else -1)
    return Answer(
        "ansible",
        rc if isinstance(rc, int) else -1,
        kind if isinstance(kind, str) else None,
        LOCATION.sub("", msg) if failed else "",
        msg,
    )


def host_state(sim: Path) -> dict[str, object]:
    """The simulated host's visible tree (file contents, links), without the simulator's bookkeeping."""
    return {k: v for k, v in snapshot(sim).items() if not k.startswith(".vgpukit-sim")}


Door = Callable[[Path], Answer]


def config_doors(path: Path, work: Path) -> dict[str, Door]:
    """The doors that take a host config: apply, the node agent, the Ansible module."""
    return {
        "apply": lambda sim: apply(sim, path),
        "agent": lambda sim: agent(sim, path),
        "ansible": lambda sim: ansible(sim, path, work),
    }


def same_answer(answers: list[Answer], first: Answer) -> list[str]:
    """How each answer differs from ``first`` (exit code, kind, message): empty when they agree. The
    Ansible module's line is apply's message with its hint; the agent must report it as failed (a
    refusal is final: only a held host lock is worth waiting for)."""
    bad = []
    for a in answers:
        if (a.code, a.kind) != (first.code, first.kind):
            bad.append(f"{a.door}: exit {a.code} {a.kind}, {first.door}: exit {first.code} {first.kind}")
        if a.door == "ansible":
            if not a.message.startswith(first.message):
                bad.append(f"ansible: {a.message!r} is not {first.message!r} (+ hint)")
        elif a.message != first.message:
            bad.append(f"{a.door}: {a.message!r} != {first.door}: {first.message!r}")
        if a.door == "agent" and a.state != FAILED:
            bad.append(f"agent: reports {a.state}, not {FAILED}")
    return bad
