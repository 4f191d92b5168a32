"""SR-IOV and driver-binding changes as engine steps (see :mod:`vgpukit.engine`).

Each step reads what it needs just before acting and journals an idempotent inverse:
``RestoreVfs`` (ensure a PF has N VFs with these bindings and records) and ``PutBack`` (ensure a
device is on this driver / override, and its bind record is as it was). The steps that move a device
(:class:`BindDriver`, :class:`UnbindDriver`) are :class:`~vgpukit.engine.Observing` steps: they read
the device once (their inverse and their change start from it) and return what they read back, so
the command's report is rendered from the run's outcome (:func:`observed`) instead of reading again.
A PF's autoprobe is one attribute (:func:`set_autoprobe`: an :class:`~vgpukit.engine.attr.SetAttr`).
What the plan read under the host lock (a PF's VF count and autoprobe) the steps carry (``was``), so
they start from it instead of reading again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import msgspec

from ..engine import Env, Observing, Outcome, Step, step_kind
from ..engine.attr import SetAttr
from ..errors import VerifyFailed
from ..host import DRIVER_OVERRIDE, SRIOV_AUTOPROBE, Host
from ..pci import virtfns
from ..words import plural
from . import binding
from .binding import VFIO, Remembered
from .kernel import numvfs_write, wait_for_vfs
from .model import Bound, Known

# A bind record as data: the record file's exact text; None: no record.
BindRecordText = str | None


def _record(env: Env, bdf: str) -> BindRecordText:
    return env.host.read_raw_opt(binding.record_path(env.host, bdf))


def _set_record(env: Env, bdf: str, rec: BindRecordText) -> None:
    path = binding.record_path(env.host, bdf)
    if env.host.read_raw_opt(path) == rec:
        return
    if rec is None:
        env.host.remove(path)
    else:
        env.host.write_file(path, rec)


@step_kind
@dataclass(frozen=True)
class PutBack(Step):
    """Ensure ``bdf`` is on ``driver`` with ``override`` (``probe``: any driver the kernel picks),
    and its bind record is ``record``. Does nothing for a device that no longer exists."""

    kind: ClassVar[str] = "put-back-driver"
    bdf: str
    driver: str | None
    override: str | None
    probe: bool = False
    record: BindRecordText = None

    def describe(self) -> str:
        return f"put {self.bdf} back on {Remembered(self.bdf, self.driver, self.override, self.probe).describe()}"

    def apply(self, env: Env) -> None:
        if not env.host.exists(env.host.pci_device(self.bdf)):
            return
        binding.put_back(env.host, Remembered(self.bdf, self.driver, self.override, self.probe))
        _set_record(env, self.bdf, self.record)


class DeviceNow(msgspec.Struct, frozen=True):
    """A device as a step read it before moving it: ``back``, the step that puts its driver, override
    and bind record back (its inverse); ``present``, whether its directory was there."""

    back: PutBack
    present: bool


def _device_now(env: Env, bdf: str) -> DeviceNow:
    """``bdf``'s driver, override and record as they are now (one read of each)."""
    host = env.host
    override = host.read_opt(host.pci_device(bdf, DRIVER_OVERRIDE))
    back = PutBack(bdf, binding.current_driver(host, bdf), binding.override_value(override), False, _record(env, bdf))
    return DeviceNow(back, override is not None)  # the override file is there: so is the device


@step_kind
@dataclass(frozen=True)
class BindDriver(Observing[DeviceNow]):
    """Move ``bdf`` to ``driver``: remember the original, override, unbind, drivers_probe. Observed:
    the device before (:class:`DeviceNow`) and after (:class:`~vgpukit.sriov.model.Bound`: its driver as
    read back, its override and record as read or written)."""

    kind: ClassVar[str] = "bind-driver"
    bdf: str
    driver: str
    probe_on_restore: bool = False
    note: str = ""
    pf: str = ""  # a VF's PF: its directory is looked for beside the PF's

    def describe(self) -> str:
        return f"bind {self.note or self.bdf} to {self.driver}"

    def batch(self) -> str:
        return "bind-driver"  # a plan binds each device once; one device's move leaves the others be

    def read(self, env: Env) -> DeviceNow:
        if self.pf:
            env.host.place(env.host.pci_device(self.bdf), env.host.pci_device(self.pf))
        return _device_now(env, self.bdf)

    def undo(self, before: DeviceNow) -> Step:
        return before.back

    def _remembers(self, now: PutBack) -> Remembered | None:
        """The bind record this step writes, moving a device that is as ``now`` says (None: none)."""
        if now.record is not None:
            return None
        if now.driver == self.driver:  # an idempotent re-run repairs a lost record of a VF it moved
            probe = self.driver == VFIO and self.probe_on_restore
            return Remembered(self.bdf, None, None, probe=True) if probe else None
        return Remembered(self.bdf, now.driver, now.override, probe=self.probe_on_restore and now.driver is None)

    def change(self, env: Env, before: DeviceNow) -> None:
        host = env.host
        now = before.back
        cur, override = now.driver, now.override
        if cur is None and not before.present and not host.exists(host.pci_device(self.bdf)):
            raise VerifyFailed(f"{self.bdf} does not exist", device=self.bdf)
        rec = self._remembers(now)  # the driver is loaded: the plan checked it under the host lock
        if rec is not None:
            binding.remember(host, rec)
        if cur == self.driver:
            return
        if override != self.driver:
            host.write(host.pci_device(self.bdf, DRIVER_OVERRIDE), self.driver)
        if cur:
            host.write(host.pci_driver(cur, "unbind"), self.bdf)
        host.write(host.pci_drivers_probe(), self.bdf)

    def check(self, env: Env, before: DeviceNow) -> Bound:
        now = binding.current_driver(env.host, self.bdf)
        if now != self.driver:
            raise VerifyFailed(
                f"{self.bdf} is bound to {now or 'no driver'} after drivers_probe, not {self.driver}",
                device=self.bdf,
                hint=f"check dmesg; is {self.driver} able to drive this device?",
            )
        was = before.back
        rec = self._remembers(was)
        override = was.override if was.driver == self.driver else self.driver  # as the kernel took it
        return Bound(now, override, binding.record_text(rec) if rec is not None else was.record)


@step_kind
@dataclass(frozen=True)
class UnbindDriver(Observing[DeviceNow]):
    """Take ``bdf`` off its driver (remembered). Observed: the device before, its driver after."""

    kind: ClassVar[str] = "unbind-driver"
    bdf: str
    note: str = ""

    def describe(self) -> str:  # the note names the driver: "0000:05:00.0 from mlx5_core"
        return f"unbind {self.note}" if self.note else f"unbind {self.bdf} from its driver"

    def read(self, env: Env) -> DeviceNow:
        return _device_now(env, self.bdf)

    def undo(self, before: DeviceNow) -> Step:
        return before.back

    def change(self, env: Env, before: DeviceNow) -> None:
        host = env.host
        now = before.back
        if now.driver is None:
            return
        if now.record is None:
            binding.remember(host, Remembered(self.bdf, now.driver, now.override))
        host.write(host.pci_driver(now.driver, "unbind"), self.bdf)

    def check(self, env: Env, before: DeviceNow) -> Bound:
        now = binding.current_driver(env.host, self.bdf)
        if now is not None:
            raise VerifyFailed(f"{self.bdf} is still bound to {now}", device=self.bdf)
        return Bound(now)


@step_kind
@dataclass(frozen=True)
class RestoreDriver(Step):
    """``bind --restore``: put ``bdf`` on its remembered driver and drop the record."""

    kind: ClassVar[str] = "restore-driver"
    bdf: str
    driver: str | None
    override: str | None
    probe: bool

    def describe(self) -> str:
        was = Remembered(self.bdf, self.driver, self.override, self.probe)
        return f"put {self.bdf} back on {was.describe()}"

    def inverse(self, env: Env) -> Step:
        return _device_now(env, self.bdf).back

    def apply(self, env: Env) -> None:
        binding.put_back(env.host, Remembered(self.bdf, self.driver, self.override, self.probe))
        if self.driver and binding.current_driver(env.host, self.bdf) != self.driver:
            raise VerifyFailed(f"{self.bdf} did not go back to {self.driver}", device=self.bdf, hint="check dmesg")
        binding.forget(env.host, self.bdf)


def set_autoprobe(host: Host, pf: str, value: bool, why: str = "", was: bool | None = None) -> SetAttr:
    """The step that sets ``pf``'s ``sriov_drivers_autoprobe`` to ``value`` (one attribute: written
    when it differs, read back, put back as it was); ``was``: as the plan read it under the host lock."""
    path = host.display(host.pci_device(pf, SRIOV_AUTOPROBE))
    return SetAttr(path, str(int(value)), f"{SRIOV_AUTOPROBE} of {pf}", why, None if was is None else str(int(was)))


@step_kind
@dataclass(frozen=True)
class JournaledAutoprobe(Step):
    """An inverse journaled by a vgpukit before :func:`set_autoprobe` (kind ``sriov-autoprobe``),
    replayed by recovery as the :class:`SetAttr` it is now. Plans no longer make it."""

    kind: ClassVar[str] = "sriov-autoprobe"
    pf: str
    value: bool
    why: str = ""

    def describe(self) -> str:
        return f"set {SRIOV_AUTOPROBE} of {self.pf} to {int(self.value)}{self.why}"

    def apply(self, env: Env) -> None:
        set_autoprobe(env.host, self.pf, self.value, self.why).apply(env)


@step_kind
@dataclass(frozen=True)
class SetNumVfs(Step):
    """Write ``sriov_numvfs`` (from 0, or to 0) and wait for the VFs to appear."""

    kind: ClassVar[str] = "sriov-numvfs"
    pf: str
    count: int
    total: int
    timeout: float = 10.0
    why: str = ""
    was: int = 0  # the count this step starts from, as planned under the host lock

    def describe(self) -> str:
        if self.count == 0:
            return f"destroy the {plural(self.was, 'VF')} of {self.pf} (sriov_numvfs {self.was} -> 0){self.why}"
        return f"create {plural(self.count, 'VF')} on {self.pf} (sriov_numvfs 0 -> {self.count}) and wait for them"

    def inverse(self, env: Env) -> Step:
        host = env.host
        cur = self.was  # as planned: the plan's earlier steps left it so
        vfs = virtfns(host, self.pf) if cur else []
        drivers = tuple(
            (v, binding.current_driver(host, v), binding.current_override(host, v), _record(env, v)) for v in vfs
        )
        return RestoreVfs(self.pf, cur, self.total, drivers)

    def apply(self, env: Env) -> None:
        host = env.host
        if self.count == 0:
            _remove_vfs(host, self.pf, self.total)
        else:
            numvfs_write(host, self.pf, self.count, self.total)
        wait_for_vfs(host, self.pf, self.count, self.timeout)


def _remove_vfs(host: Host, pf: str, total: int) -> None:
    """Write 0 VFs, forgetting the bind records of the VFs that go away."""
    for v in virtfns(host, pf):
        binding.forget(host, v)
    numvfs_write(host, pf, 0, total)


VfState = tuple[str, str | None, str | None, BindRecordText]  # bdf, driver, override, bind record


@step_kind
@dataclass(frozen=True)
class RestoreVfs(Step):
    """Ensure ``pf`` has exactly ``count`` VFs, each on its recorded driver with its bind record."""

    kind: ClassVar[str] = "sriov-restore-vfs"
    pf: str
    count: int
    total: int
    vfs: tuple[VfState, ...] = ()

    def describe(self) -> str:
        if self.count == 0:
            return f"remove the VFs of {self.pf} (as before)"
        return f"recreate {self.count} VFs on {self.pf} with their drivers (as before)"

    def apply(self, env: Env) -> None:
        host = env.host
        if not host.exists(host.pci_device(self.pf)):
            return
        cur = host.read_int(host.pci_device(self.pf, "sriov_numvfs"), 0) or 0
        if cur != self.count:
            if cur:
                _remove_vfs(host, self.pf, self.total)
            if self.count:
                numvfs_write(host, self.pf, self.count, self.total)
                wait_for_vfs(host, self.pf, self.count, 10.0)
        for bdf, driver, override, rec in self.vfs:
            binding.put_back(host, Remembered(bdf, driver, override))
            _set_record(env, bdf, rec)


def observed(outcome: Outcome) -> Known:
    """What the SR-IOV steps of a run observed, as the run left it (later steps win; a step that
    makes VFs come or go makes what was known of devices stale): the command's report renders this."""
    known = Known()
    for seen in outcome.observed:
        step, after = seen.step, seen.after
        if isinstance(step, (SetNumVfs, RestoreVfs)):
            known.forget_devices()
        elif isinstance(step, (PutBack, RestoreDriver)):
            known.forget_device(step.bdf)
        elif isinstance(step, (BindDriver, UnbindDriver)) and isinstance(after, Bound):
            known.forget_device(step.bdf)
            known.drivers[step.bdf] = after.driver
            if not isinstance(after.override, msgspec.UnsetType):
                known.overrides[step.bdf] = after.override
            if not isinstance(after.record, msgspec.UnsetType):
                known.records[step.bdf] = after.record
        elif isinstance(step, SetAttr):
            known.attrs[step.path] = after if isinstance(after, str) else None
    return known
