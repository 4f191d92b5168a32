"""NVIDIA MPS for DRA claims: one control daemon per GPU or MIG device, started by the driver for the first
claim that asks for it on the device and stopped when its last claim is unprepared.

Each daemon has its own directories under the run directory, ``/run/vgpukit/dra/mps/<UUID>/pipe`` and
``.../log`` (``CUDA_MPS_PIPE_DIRECTORY`` / ``CUDA_MPS_LOG_DIRECTORY``), and is started with
``CUDA_VISIBLE_DEVICES=<UUID>`` (a MIG device's UUID works the same). ``nvidia-cuda-mps-control`` is the
host's (the driver's binary directories under the root; the simulated host installs a fake that behaves
the same, :mod:`vgpukit.sim.mps_control`). The daemon-wide defaults (``set_default_active_thread_percentage``,
``set_default_device_pinned_mem_limit``) are the first claim's; a later claim's limits reach its clients
through the environment (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``),
which can only tighten the daemon's: a later claim asking more than the daemon's default is refused.
Starting and stopping are engine steps (:class:`MpsDaemon`: an "ensure running / ensure stopped"), so a
killed plugin's run is rolled back by the journal and no daemon is left behind.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ... import processes
from ...cdi import nvidia
from ...cdi.nvidia import Edits
from ...engine.env import Env
from ...engine.step import Step, step_kind
from ...errors import Conflict, HostIOError, NotFound, VerifyFailed
from ...host import Host
from ...node.claimed import claim_uid, record_docs
from .config import Mps

BINARY = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
LIMITS = "limits.json"  # the daemon's defaults, as the driver set them
TIMEOUT = 10.0
RW = ("rw", "nosuid", "nodev", "rbind", "rprivate")


def directory(host: Host, uuid: str) -> Path:
    return host.state_dir("dra", "mps", uuid)


def binary(host: Host) -> Path:
    for d in nvidia.BIN_DIRS:
        path = host.path(*d.strip("/").split("/"), BINARY)
        if host.is_file(path):
            return path
    raise NotFound(f"{BINARY} is not installed on this host (the NVIDIA driver's binaries): no MPS")


def pid(host: Host, uuid: str) -> int | None:
    """The control daemon's pid while it runs, else None."""
    text = host.read_raw_opt(directory(host, uuid) / "pipe" / PID_FILE)
    if not isinstance(text, str) or not text.strip().isdigit():
        return None
    n = int(text.strip())
    return n if processes.alive(host, n) else None


def running(host: Host, uuid: str) -> bool:
    return pid(host, uuid) is not None


def limits(host: Host, uuid: str) -> dict[str, Any]:
    text = host.read_raw_opt(directory(host, uuid) / LIMITS)
    try:
        doc = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


@dataclass
class Made:
    steps: list[Step] = field(default_factory=list)
    edits: Edits = field(default_factory=Edits)
    record: dict[str, Any] = field(default_factory=dict)


def _mib(n: int) -> int:
    return max(1, n >> 20)


def plan(env: Env, uid: str, uuid: str, want: Mps) -> Made:
    """The daemon (started unless it runs) and the claim's client edits; refused when the claim asks more
    than the running daemon's defaults allow."""
    host = env.host
    binary(host)
    base = directory(host, uuid)
    pipe, log = host.display(base / "pipe"), host.display(base / "log")
    made = Made(record={"uuid": uuid})
    if running(host, uuid):
        have = limits(host, uuid)
        atp, pinned = have.get("activeThreadPercentage"), have.get("pinned")
        if want.thread_percentage is not None and isinstance(atp, int) and want.thread_percentage > atp:
            raise Conflict(
                f"the MPS daemon of {uuid} gives clients at most {atp}% of the threads (its first claim's default): "
                f"a claim cannot ask {want.thread_percentage}%"
            )
        if want.pinned_memory is not None and isinstance(pinned, int) and want.pinned_memory > pinned:
            raise Conflict(f"the MPS daemon of {uuid} pins at most {_mib(pinned)} MiB per client: the claim asks more")
    else:
        made.steps.append(MpsDaemon(uuid, pipe, log, True, want.thread_percentage, want.pinned_memory))
    env_vars = [f"CUDA_MPS_PIPE_DIRECTORY={pipe}"]  # what a client needs (the log is the daemon's)
    if want.thread_percentage is not None:
        env_vars.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={want.thread_percentage}")
    if want.pinned_memory is not None:
        env_vars.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={_mib(want.pinned_memory)}M")
    made.edits = Edits(env=tuple(env_vars), mounts=(nvidia.mount(host, pipe, RW),))
    return made


def _users(host: Host, uuid: str, but: str) -> list[str]:
    """Claims other than ``but`` whose record names the daemon of ``uuid``."""
    out = []
    for uid, doc in record_docs(host):
        shared = doc.get("sharing")
        ours = isinstance(shared, list) and any(
            isinstance(e, dict) and isinstance(e.get("mps"), dict) and e["mps"].get("uuid") == uuid for e in shared
        )
        if ours and claim_uid(uid, doc) != but:
            out.append(claim_uid(uid, doc))
    return out


def undo(env: Env, uid: str, record: dict[str, Any]) -> list[Step]:
    """Stop the daemon when no other prepared claim uses it."""
    uuid = record.get("uuid")
    if not isinstance(uuid, str) or _users(env.host, uuid, uid):
        return []
    base = directory(env.host, uuid)
    return [MpsDaemon(uuid, env.host.display(base / "pipe"), env.host.display(base / "log"), False, None, None)]


@step_kind
@dataclass(frozen=True)
class MpsDaemon(Step):
    """Ensure the MPS control daemon of device ``uuid`` runs (with these defaults) or is stopped."""

    kind: ClassVar[str] = "dra-mps-daemon"
    uuid: str
    pipe: str
    log: str
    run: bool
    thread_percentage: int | None
    pinned_memory: int | None

    def describe(self) -> str:
        if not self.run:
            return f"stop the MPS control daemon of {self.uuid}"
        return f"start an MPS control daemon for {self.uuid} (pipe {self.pipe})"

    def inverse(self, env: Env) -> Step:
        have = limits(env.host, self.uuid)
        atp, pinned = have.get("activeThreadPercentage"), have.get("pinned")
        return MpsDaemon(
            self.uuid,
            self.pipe,
            self.log,
            running(env.host, self.uuid),
            atp if isinstance(atp, int) else None,
            pinned if isinstance(pinned, int) else None,
        )

    def _control(self, env: Env, args: list[str], stdin: str | None) -> None:
        host = env.host
        cuda = {
            "CUDA_MPS_PIPE_DIRECTORY": str(host.path(*self.pipe.strip("/").split("/"))),
            "CUDA_MPS_LOG_DIRECTORY": str(host.path(*self.log.strip("/").split("/"))),
            "CUDA_VISIBLE_DEVICES": self.uuid,
        }
        done = host.run_program(binary(host), args, stdin, TIMEOUT, env=cuda)
        if done.rc != 0:
            why = done.error or f"exit code {done.rc}"
            raise HostIOError(f"{BINARY} {' '.join(args) or '(commands)'} failed for {self.uuid}: {why}")

    def apply(self, env: Env) -> None:
        host = env.host
        base = directory(host, self.uuid)
        now = pid(host, self.uuid)
        if self.run and now is None:
            host.mkdir(base / "pipe")
            host.mkdir(base / "log")
            self._control(env, ["-d"], None)
            commands = []
            if self.thread_percentage is not None:
                commands.append(f"set_default_active_thread_percentage {self.thread_percentage}")
            if self.pinned_memory is not None:
                commands.append(f"set_default_device_pinned_mem_limit 0 {_mib(self.pinned_memory)}M")
            if commands:
                self._control(env, [], "\n".join(commands) + "\n")
            doc = {"activeThreadPercentage": self.thread_percentage, "pinned": self.pinned_memory}
            host.write_file(base / LIMITS, json.dumps(doc) + "\n", 0o600)
        elif not self.run and now is not None:
            self._control(env, [], "quit\n")
            end = time.monotonic() + TIMEOUT
            while pid(host, self.uuid) is not None and time.monotonic() < end:
                time.sleep(0.02)
            host.remove(base / LIMITS)

    def verify(self, env: Env) -> None:
        if running(env.host, self.uuid) != self.run:
            raise VerifyFailed(f"the MPS control daemon of {self.uuid} is {'not ' if self.run else ''}running")
