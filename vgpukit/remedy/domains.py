"""Draining VMs off a device, through libvirt (the one facade, :mod:`vgpukit.libvirt.connection`).

:class:`StopDomain` stops a domain that holds a piece of the device: ``managedsave`` (libvirt saves
its state; the next start restores it), ``shutdown`` (an ACPI request; the guest may take its time:
the step waits up to ``timeout`` and, only with ``force``, destroys it then) or ``destroy`` (asked
for with ``--force``). Its inverse, :class:`StartDomain`, starts it again (from the managed save
image when there is one; a transient domain from the XML the step kept). :class:`MigrateDomain`
live-migrates it to another libvirt (``--to URI``): the move is the point, so it has no inverse (an
interrupted migration is libvirt's to finish or abort; the domain is then on one side).

libvirt refuses to save or migrate a domain with a VFIO device that cannot migrate (a plain
vfio-pci VF, an mdev: ``qemuMigrationSrcIsAllowed``); that refusal comes back as the step's error, the
run rolls back, and the operator picks ``--vms shutdown``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from ..engine import Env, Step, step_kind
from ..errors import InUse, VerifyFailed
from ..libvirt.connection import Libvirt, connect

HOW = ("managedsave", "shutdown", "destroy")
POLL = 0.2


def libvirt_of(env: Env, uri: str) -> Libvirt:
    """The command's connection to ``uri`` (opened once, kept in ``env.handles``)."""
    lv = env.handles.get(f"libvirt:{uri}")
    if not isinstance(lv, Libvirt):
        lv = connect(uri)
        env.handles[f"libvirt:{uri}"] = lv
    return lv


def _active(lv: Libvirt, name: str) -> bool:
    return lv.exists(name) and lv.domain(name).active


@step_kind
@dataclass(frozen=True)
class StopDomain(Step):
    kind: ClassVar[str] = "remedy-stop-domain"
    uri: str
    name: str
    how: str  # managedsave | shutdown | destroy
    timeout: float = 120.0
    force: bool = False  # a guest that ignores the shutdown request is destroyed after ``timeout``

    def describe(self) -> str:
        words = {"managedsave": "save", "shutdown": "shut down", "destroy": "destroy (--force)"}[self.how]
        late = (
            " (destroyed if still running after the timeout: --force)" if self.how == "shutdown" and self.force else ""
        )
        return f"{words} VM {self.name} ({self.uri}){late}"

    def inverse(self, env: Env) -> Step | None:
        lv = libvirt_of(env, self.uri)
        if not _active(lv, self.name):
            return None
        persistent = lv.domain(self.name).persistent
        return StartDomain(self.uri, self.name, "" if persistent else lv.xml(self.name))

    def apply(self, env: Env) -> None:
        lv = libvirt_of(env, self.uri)
        if not lv.exists(self.name):  # a holder's QEMU names a domain this libvirt does not have: the
            return  # wait that follows says so (remedy.steps.WaitFree) if it still holds the device then
        if not _active(lv, self.name):
            return
        if self.how == "managedsave":
            lv.managed_save(self.name)
        elif self.how == "destroy":
            lv.destroy(self.name)
        else:
            lv.shutdown(self.name)
            deadline = time.monotonic() + self.timeout
            while _active(lv, self.name):
                if time.monotonic() >= deadline:
                    if not self.force:
                        raise InUse(
                            f"VM {self.name} did not shut down within {self.timeout:g} s",
                            hint="give it longer (--timeout), save it (--vms managedsave), or --force to destroy it",
                        )
                    lv.destroy(self.name)
                    break
                time.sleep(POLL)

    def verify(self, env: Env) -> None:
        if _active(libvirt_of(env, self.uri), self.name):
            raise VerifyFailed(f"VM {self.name} is still running")


@step_kind
@dataclass(frozen=True)
class StartDomain(Step):
    """Ensure domain ``name`` runs (a transient one is created from ``xml``)."""

    kind: ClassVar[str] = "remedy-start-domain"
    uri: str
    name: str
    xml: str = ""  # a transient domain's XML (a persistent one is started by name)
    how: str = "shutdown"  # how the drain stopped it (the inverse of a restart stops it so again)

    def describe(self) -> str:
        return f"start VM {self.name} again ({self.uri})"

    def inverse(self, env: Env) -> Step | None:
        lv = libvirt_of(env, self.uri)
        if _active(lv, self.name):
            return None
        return StopDomain(self.uri, self.name, self.how, force=self.how == "destroy")

    def apply(self, env: Env) -> None:
        lv = libvirt_of(env, self.uri)
        if _active(lv, self.name):
            return
        if lv.exists(self.name):
            lv.start(self.name)
        elif self.xml:
            lv.create_xml(self.xml)

    def verify(self, env: Env) -> None:
        lv = libvirt_of(env, self.uri)
        if not lv.exists(self.name) and not self.xml:
            return  # a domain this libvirt does not know: the drain stopped nothing, nothing to start again
        if not _active(lv, self.name):
            raise VerifyFailed(f"VM {self.name} did not start again")


@step_kind
@dataclass(frozen=True)
class MigrateDomain(Step):
    kind: ClassVar[str] = "remedy-migrate-domain"
    uri: str
    name: str
    dest: str

    def describe(self) -> str:
        return f"live-migrate VM {self.name} from {self.uri} to {self.dest}"

    def apply(self, env: Env) -> None:
        lv = libvirt_of(env, self.uri)
        if not _active(lv, self.name):
            return
        lv.migrate(self.name, libvirt_of(env, self.dest))

    def verify(self, env: Env) -> None:
        if _active(libvirt_of(env, self.uri), self.name):
            raise VerifyFailed(f"VM {self.name} still runs here after its migration")
