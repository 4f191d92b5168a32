"""The remediation steps (change-engine steps: describe / inverse / apply / verify; docs/engine.md).

* :class:`Quarantine` -- the quarantine record a remediation starts with; its inverse is :class:`Settle`,
  which lifts it only for a device that verifies healthy (a remediation undone by a crash or a
  failure leaves its device quarantined until something verifies it).
* :class:`WaitFree` -- waits until nothing holds the device or a piece of it (a drain's end); changes
  nothing, refuses with the holders named when the time is up.
* :class:`ResetDevice` -- resets the device the way its driver wants (``vgpukit/data/remedy.yaml``):
  ``nvidia-smi`` for an NVIDIA GPU on its driver (persistence mode off first and back after), else the
  PCI function's ``reset``. A reset cannot be undone: what it destroys was taken down by the steps
  before it, whose inverses rebuild it. Records the reset for the health layer
  (:mod:`vgpukit.health.resets`).
* :class:`VerifyHealthy` -- the device's health after the reset: refuses (so the run rolls back) when
  the health layer still finds it unusable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from .. import quarantine as qr
from ..engine import Env, Step, step_kind
from ..engine.files import PutFile
from ..errors import HostIOError, InUse, Unsupported, VerifyFailed
from ..host import Host
from ..words import plural

POLL = 0.2


def unhealthy(env: Env, bdf: str) -> str | None:
    """Why the health layer finds ``bdf`` unusable now (None: it does not); the quarantine is not counted."""
    from ..health import fact

    return fact.unusable(fact.current(env.host, env.nvml, save=False)).get(bdf)


def record_path(host: Host, bdf: str) -> str:
    return host.display(host.quarantine_record(bdf))


def put_quarantine(host: Host, q: qr.Quarantine | None, bdf: str, what: str) -> PutFile:
    """The step that writes (``q``) or removes (None) the quarantine record of ``bdf``."""
    return PutFile(record_path(host, bdf), None if q is None else q.render(), 0o644, what=what)


@step_kind
@dataclass(frozen=True)
class Quarantine(Step):
    """Ensure ``bdf`` is quarantined with ``text`` (its record); undone by :class:`Settle`."""

    kind: ClassVar[str] = "remedy-quarantine"
    bdf: str
    label: str
    text: str

    def describe(self) -> str:
        return f"quarantine {self.label}"

    def inverse(self, env: Env) -> Step:
        was = env.host.read_raw_opt(env.host.quarantine_record(self.bdf))
        return Settle(self.bdf, self.label, was, self.text)

    def apply(self, env: Env) -> None:
        path = env.host.quarantine_record(self.bdf)
        if env.host.read_raw_opt(path) != self.text:
            env.host.mkdir(path.parent)
            env.host.write_file(path, self.text)

    def verify(self, env: Env) -> None:
        if env.host.read_raw_opt(env.host.quarantine_record(self.bdf)) != self.text:
            raise VerifyFailed(f"{self.label}: the quarantine record does not read back", device=self.bdf)


@step_kind
@dataclass(frozen=True)
class Settle(Step):
    """Put the quarantine of ``bdf`` back as it was (``was``; None: none) when the device verifies healthy;
    otherwise keep it quarantined (``text``): nothing lifts a quarantine but a verified device."""

    kind: ClassVar[str] = "remedy-settle"
    bdf: str
    label: str
    was: str | None
    text: str

    def describe(self) -> str:
        return f"lift the quarantine of {self.label} if it verifies healthy, else keep it"

    def apply(self, env: Env) -> None:
        path = env.host.quarantine_record(self.bdf)
        keep = unhealthy(env, self.bdf) is not None
        want = (self.was or self.text) if keep else self.was
        if env.host.read_raw_opt(path) == want:
            return
        if want is None:
            env.host.remove(path)
        else:
            env.host.mkdir(path.parent)
            env.host.write_file(path, want)


def _unknown_domains(env: Env, vms: list[str]) -> list[str]:
    """The VMs holding the device that no libvirt this command reached has (a QEMU naming a domain
    its libvirt does not know: the drain could not stop it), in words."""
    from ..libvirt.connection import Libvirt

    opened = [(key.removeprefix("libvirt:"), lv) for key, lv in env.handles.items() if isinstance(lv, Libvirt)]
    return [f"domain {vm} not found on {uri}" for vm in dict.fromkeys(vms) for uri, lv in opened if not lv.exists(vm)]


@step_kind
@dataclass(frozen=True)
class WaitFree(Step):
    """Wait up to ``timeout`` seconds until nothing holds ``bdf`` or a piece of it, and the Kubernetes
    ``claims`` that held one at plan time are unprepared; refuse naming who is still there."""

    kind: ClassVar[str] = "remedy-wait-free"
    bdf: str
    label: str
    timeout: float
    claims: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"wait up to {self.timeout:g} s until nothing holds {self.label} or a piece of it"

    def _left(self, env: Env) -> tuple[list[str], list[str]]:
        """Who still holds the device, in words; and the VMs among them, by domain name."""
        from .facts import read

        found = read(env.host, env.nvml, self.bdf)
        left = [h.describe() for h in found.holders]
        left += [f"Kubernetes claim {c}" for c in self.claims if env.host.exists(env.host.dra_claim_record(c))]
        return left, [h.name for h in found.holders if h.kind == "vm"]

    def apply(self, env: Env) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            left, vms = self._left(env)
            if not left:
                return
            if time.monotonic() >= deadline:
                unknown = _unknown_domains(env, vms)
                why = f" ({'; '.join(unknown)})" if unknown else ""
                raise InUse(
                    f"{self.label} is still held after {self.timeout:g} s: {'; '.join(left[:5])}"
                    + (f" and {plural(len(left) - 5, 'more holder')}" if len(left) > 5 else "")
                    + why,
                    device=self.bdf,
                    hint="stop them, or drain again with a longer --timeout",
                )
            time.sleep(POLL)


@step_kind
@dataclass(frozen=True)
class StopTenant(Step):
    """Ask the live processes of QoS tenant ``name`` (on ``gpu``) to end: SIGTERM (``drain --tenants stop``).
    Nothing puts a process back: it has no inverse; the drain then waits for them to be gone."""

    kind: ClassVar[str] = "remedy-stop-tenant"
    gpu: str
    name: str
    pids: tuple[int, ...]

    def describe(self) -> str:
        return f"stop QoS tenant {self.name} on {self.gpu} (SIGTERM to pid {', '.join(map(str, self.pids))})"

    def apply(self, env: Env) -> None:
        import os
        import signal

        from .. import processes

        for pid in self.pids:
            if processes.alive(env.host, pid):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass  # it ended meanwhile
                except PermissionError as exc:
                    raise HostIOError(f"cannot stop pid {pid} of QoS tenant {self.name}: not permitted") from exc


def nvidia_smi(host: Host) -> str:
    """The host's nvidia-smi (under the root: the driver's binary directories)."""
    from ..cdi.nvidia import BIN_DIRS

    for d in BIN_DIRS:
        path = host.path(*d.strip("/").split("/"), "nvidia-smi")
        if host.is_file(path):
            return str(path)
    raise Unsupported("cannot reset the GPU: nvidia-smi is not installed (the NVIDIA driver's tools)")


def _smi(host: Host, args: list[str], what: str) -> str:
    from pathlib import Path

    res = host.run_program(Path(nvidia_smi(host)), args, None, 300.0)
    if res.rc != 0:
        out = " ".join((res.stdout + " " + res.stderr).split())[:300] or res.error
        raise HostIOError(f"nvidia-smi {' '.join(args)} failed ({what}): {out}")
    return res.stdout


@step_kind
@dataclass(frozen=True)
class ResetDevice(Step):
    """Reset ``bdf``: ``method`` nvidia-smi (NVML index ``index``) or function (its sysfs ``reset``)."""

    kind: ClassVar[str] = "remedy-reset"
    bdf: str
    label: str
    method: str
    index: int = -1
    methods: tuple[str, ...] = ()  # the function's reset_method, as planned (shown)

    def describe(self) -> str:
        if self.method == "nvidia-smi":
            return f"reset {self.label} with nvidia-smi -r -i {self.index} (persistence mode off for it, then back)"
        listed = f" (the kernel tries {', '.join(self.methods)})" if self.methods else ""
        return f"reset {self.label} through /sys/bus/pci/devices/{self.bdf}/reset{listed}"

    def apply(self, env: Env) -> None:
        host = env.host
        if self.method == "nvidia-smi":
            i = str(self.index)
            query = ["--query-gpu=persistence_mode", "--format=csv,noheader", "-i", i]
            persistent = _smi(host, query, "reading persistence mode").strip().lower() == "enabled"
            if persistent:
                _smi(host, ["-pm", "0", "-i", i], "turning persistence mode off")
            try:
                _smi(host, ["-r", "-i", i], "resetting the GPU")
            finally:
                if persistent:
                    _smi(host, ["-pm", "1", "-i", i], "turning persistence mode back on")
        else:
            host.write(host.pci_device(self.bdf, "reset"), "1")
        from ..health import resets

        resets.mark(host, self.bdf, time.time())  # events from before the reset no longer count


@step_kind
@dataclass(frozen=True)
class VerifyHealthy(Step):
    """Refuse (the run rolls back) when the health layer still finds ``bdf`` unusable after its reset."""

    kind: ClassVar[str] = "remedy-verify"
    bdf: str
    label: str

    def describe(self) -> str:
        return f"verify {self.label} is healthy"

    def apply(self, env: Env) -> None:
        why = unhealthy(env, self.bdf)
        if why is not None:
            raise VerifyFailed(
                f"{self.label} is still unusable after the reset: {why}",
                device=self.bdf,
                hint="it stays quarantined: reboot the host (or replace the device), then: vgpukit release",
            )
