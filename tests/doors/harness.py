"""Every door onto a host, driven the same way, so a rule can be checked to give one answer through all.

A *door* takes a request to a simulated host and answers with an :class:`Answer` (exit code, error
kind, message, the stderr line). The doors:

* ``area``: the area command in-process (``tests.conftest.invoke``, ``--json``);
* ``shim``: mdevctl's command line (``vgpukit mdev --mdevctl ...``), for the rules it can reach;
* ``apply``: ``vgpukit apply -f FILE -c NAME --json`` in-process, on a host config file;
* ``agent``: the Kubernetes node agent's way to apply (``vgpukit.k8s.agent.ApplyRunner``: the
  installed ``vgpukit`` as a subprocess), answered as the agent reports it (:func:`outcome`);
* ``ansible``: the Ansible module (contrib/ansible, ``vgpukit_apply``) run as Ansible runs a module:
  its file with the arguments file (``{"ANSIBLE_MODULE_ARGS": ...}``), as a subprocess.

:func:`host_state` is the simulated host's visible tree, to show a refusal changed nothing. A rule's
row gives the area command's argv and the same request as a host config (``CONFIG``: the config's
body under ``configs: {NAME: ...}``); :func:`every_door` runs it through them all. Answers are
compared on their :attr:`Answer.shape`: the message without what differs by door by design (where in
the file, UUIDs made up per run, the rollback note).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import invoke
from vgpukit.k8s.agent import EXIT_SKIPPED, FAILED, PARTIAL, ApplyRunner, outcome

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_MODULE = ROOT / "contrib/ansible/ansible_collections/vgpukit/host/plugins/modules/vgpukit_apply.py"
VGPUKIT = str(Path(sys.executable).with_name("vgpukit"))
CONFIG = "door"  # the config name every row's host config uses
LOCATION = re.compile(r"^\S+:\d+: (config \S+: )?")  # apply names the entry a refusal is about: FILE:LINE: config NAME:
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# the simulator's bookkeeping, the host lock's holder record, the driver's MIG minor table (written
# once at the first MIG use)
NOT_HOST = (".vgpukit-sim", "run/vgpukit/lock", "proc/driver/nvidia-caps/mig-minors")


@dataclass(frozen=True)
class Answer:
    door: str
    code: int
    kind: str | None  # the error kind (in-use, unsupported...); None on success
    message: str  # the error message, the config location left out
    line: str = ""  # the whole one-line error as the door shows it (hint included)
    state: str = ""  # the agent: the state it reports (pending | success | failed)

    @property
    def shape(self) -> str:
        """The message without what differs by door by design: made-up UUIDs, the rollback note."""
        return re.split(r"; (nothing was changed|rolled back)", UUID.sub("<uuid>", self.message))[0]


def _error(doc: dict[str, object]) -> tuple[str | None, str]:
    """The error of a failed command's document; a config door that left devices alone (exit 6) gives
    its own document, whose ``skipped`` entries carry each refusal: the first one's."""
    skipped = doc.get("skipped")
    if "error" not in doc and isinstance(skipped, list) and skipped and isinstance(skipped[0], dict):
        doc = skipped[0]
    kind = doc.get("error")
    return (kind if isinstance(kind, str) else None), LOCATION.sub("", str(doc.get("message") or ""))


def _json(text: str) -> dict[str, object]:
    try:
        doc = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _cli(door: str, sim: Path | None, argv: Sequence[str]) -> Answer:
    r = invoke(sim, *argv)
    kind, message = _error(_json(r.stdout)) if r.exit_code else (None, "")
    return Answer(door, r.exit_code, kind, message, r.stderr.strip())


def area(sim: Path | None, args: Sequence[str]) -> Answer:
    """The area command on the simulated host ``sim`` (None: ``args`` say which host, ``--root DIR``)."""
    return _cli("area", sim, ["--json", *args])


def shim(sim: Path, args: Sequence[str]) -> Answer:
    """mdevctl's command line (its options after the command: ``start -p PARENT -t TYPE``)."""
    return _cli("shim", sim, ["mdev", "--mdevctl", *args, "--json"])


def host_config(where: Path, body: str, top: str = "") -> Path:
    """A vgpukit.host/v1 file with one config, ``CONFIG``, whose body is ``body`` (YAML, indented 4),
    then ``top`` (top-level sections: ``mig-configs:``...)."""
    path = where / "host.yaml"
    lines = ["version: vgpukit.host/v1", "configs:", f"  {CONFIG}:"]
    path.write_text("\n".join(lines + ["    " + line for line in body.strip().splitlines()]) + "\n" + top)
    return path


def apply(sim: Path, path: Path) -> Answer:
    return _cli("apply", sim, ["--json", "apply", "-f", str(path), "-c", CONFIG])


def agent(sim: Path, path: Path) -> Answer:
    runner = ApplyRunner(VGPUKIT, path, sim_dir=sim)
    proc = subprocess.run(runner.argv(CONFIG), capture_output=True, text=True, timeout=300, check=False)
    reported = outcome(proc.returncode, proc.stdout)
    kind, _ = _error(_json(proc.stdout))
    said = reported.message.removeprefix("refused: ").removeprefix("left alone: ")
    message = LOCATION.sub("", said) if reported.state in (FAILED, PARTIAL) else ""
    return Answer("agent", proc.returncode, kind, message, proc.stderr.strip(), reported.state)


def ansible(sim: Path, path: Path, work: Path) -> Answer:
    """The Ansible module as Ansible runs it; its message is vgpukit's one error line (message, then
    `` (hint)``)."""
    args = work / "ansible-args.json"
    params = {"file": str(path), "config": CONFIG, "sim": str(sim), "executable": VGPUKIT, "wait": 5.0}
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
    """The simulated host's visible tree: file contents (hashed), links, sockets (a running daemon's),
    without the simulator's bookkeeping."""
    out: dict[str, object] = {}
    base = str(sim)
    for d, dirs, files in os.walk(base):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = p[len(base) + 1 :]
            if rel.startswith(NOT_HOST):
                continue
            mode = os.lstat(p).st_mode
            if stat.S_ISLNK(mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(mode):
                with open(p, "rb") as fh:
                    out[rel] = hashlib.blake2b(fh.read(), digest_size=8).digest()
            elif not stat.S_ISDIR(mode):
                out[rel] = ("special", stat.S_IFMT(mode))
    return out  # directories show through their contents (the kernel keeps empty bus dirs around)


Door = Callable[[Path], Answer]


def config_doors(path: Path, work: Path) -> dict[str, Door]:
    """The doors that take a host config: apply, the node agent, the Ansible module."""
    return {
        "apply": lambda sim: apply(sim, path),
        "agent": lambda sim: agent(sim, path),
        "ansible": lambda sim: ansible(sim, path, work),
    }


def same_answer(answers: list[Answer], first: Answer) -> list[str]:
    """How each answer differs from ``first`` (exit code, kind, message shape): empty when they agree.
    The Ansible module's line is apply's message with its hint; the agent must report it as failed
    (a refusal is final: only a held host lock is worth waiting for), or partial for exit 6 (a device
    left alone, everything else applied)."""
    bad = []
    for a in answers:
        if (a.code, a.kind) != (first.code, first.kind):
            bad.append(f"{a.door}: exit {a.code} {a.kind}, {first.door}: exit {first.code} {first.kind}")
        if a.door == "ansible":
            if not a.shape.startswith(first.shape):
                bad.append(f"ansible: {a.message!r} is not {first.message!r} (+ hint)")
        elif a.shape != first.shape:
            bad.append(f"{a.door}: {a.message!r} != {first.door}: {first.message!r}")
        want = PARTIAL if a.code == EXIT_SKIPPED else FAILED  # a device left alone: the rest was applied
        if a.door == "agent" and a.code and a.state != want:
            bad.append(f"agent: reports {a.state}, not {want}")
    return bad


def every_door(
    sim: Path,
    work: Path,
    config: str,
    area_argv: Sequence[str] | None = None,
    shim_argv: Sequence[str] | None = None,
    top: str = "",
) -> list[Answer]:
    """One request through the area command (when one can say it), the config doors (``config``: the
    host config's body) and the mdevctl shim (when it takes it): one refusal everywhere (exit code,
    kind, message shape), the host exactly as before after each door. The answers, the area's first."""
    doors = config_doors(host_config(work, config, top), work)
    if area_argv is not None:
        doors = {"area": lambda s: area(s, area_argv), **doors}
    if shim_argv is not None:
        doors["shim"] = lambda s: shim(s, shim_argv)
    before = host_state(sim)
    answers = []
    for name, door in doors.items():
        answers.append(door(sim))
        assert host_state(sim) == before, f"{name} changed the host"
    first = answers[0]
    assert first.code != 0, first
    assert same_answer(answers[1:], first) == [], answers
    if first.door == "area":  # one line on stderr, the message first
        assert first.line.count("\n") == 0 and first.line.startswith("vgpukit: error: " + first.message), first
    return answers
