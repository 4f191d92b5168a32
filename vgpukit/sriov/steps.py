"""SR-IOV and driver-binding changes as engine steps (see :mod:`vgpukit.engine`).

Each step reads what it needs just before acting and journals an idempotent inverse:
``RestoreVfs`` (ensure a PF has N VFs with these bindings and records) and ``PutBack`` (ensure a
device is on this driver / override, and its bind record is as it was). What a step read or wrote
is noted in the command's :class:`vgpukit.sriov.model.SriovSeen` (in ``env.seen``) so nothing is
read twice in a command: not by later steps, not by the command's report
(:func:`vgpukit.sriov.model.read_pf` with ``seen``). What the plan read under the host lock (a PF's
VF count and autoprobe) the steps carry (``was``), so they start from it instead of reading again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine import Env, Step, step_kind
from ..errors import VerifyFailed
from ..host import DRIVER_OVERRIDE, Host
from ..pci import virtfns
from ..words import plural
from . import binding
from .binding import VFIO, Remembered
from .kernel import numvfs_write, wait_for_vfs
from .model import SriovSeen

# A bind record as data: the record file's exact text; None: no record.
BindRecordText = str | None


def _record(env: Env, bdf: str) -> BindRecordText:
    return env.host.read_raw_opt(binding.record_path(env.host, bdf))


def _seen(env: Env) -> SriovSeen:
    return SriovSeen.of(env.seen)


def _set_record(env: Env, bdf: str, rec: BindRecordText) -> None:
    path = binding.record_path(env.host, bdf)
    _seen(env).records.pop(bdf, None)
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
        _seen(env).forget_device(self.bdf)
        binding.put_back(env.host, Remembered(self.bdf, self.driver, self.override, self.probe))
        _set_record(env, self.bdf, self.record)


def _put_back_now(env: Env, bdf: str) -> PutBack:
    """The inverse of any change to ``bdf``'s driver: where it is now, and its record as it is now.
    What it read is left in the command's :class:`SriovSeen` for the step's apply (one read of each
    per device)."""
    host = env.host
    override = host.read_opt(host.pci_device(bdf, DRIVER_OVERRIDE))
    back = PutBack(
        bdf,
        binding.current_driver(host, bdf),
        binding.override_value(override),
        False,
        _record(env, bdf),
    )
    seen = _seen(env)
    seen.inverses[bdf] = back
    seen.present[bdf] = override is not None  # the device's directory is there
    return back


def _now(env: Env, bdf: str) -> PutBack:
    """Driver, override and record of ``bdf`` as the inverse just read them (or read now)."""
    known = _seen(env).inverses.get(bdf)
    return known if isinstance(known, PutBack) else _put_back_now(env, bdf)


@step_kind
@dataclass(frozen=True)
class BindDriver(Step):
    """Move ``bdf`` to ``driver``: remember the original, override, unbind, drivers_probe."""

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

    def inverse(self, env: Env) -> Step:
        if self.pf:
            env.host.place(env.host.pci_device(self.bdf), env.host.pci_device(self.pf))
        return _put_back_now(env, self.bdf)

    def apply(self, env: Env) -> None:
        host = env.host
        seen = _seen(env)
        now = _now(env, self.bdf)
        cur, override = now.driver, now.override
        if cur is None and not seen.present.get(self.bdf) and not host.exists(host.pci_device(self.bdf)):
            raise VerifyFailed(f"{self.bdf} does not exist", device=self.bdf)
        seen.overrides[self.bdf], seen.records[self.bdf] = override, now.record
        if cur == self.driver:
            if now.record is None and self.driver == VFIO and self.probe_on_restore:
                self._remember(env, Remembered(self.bdf, None, None, probe=True))  # repair a lost record
            return
        if self.driver not in seen.loaded:  # checked once per command
            binding.require_driver(host, self.driver)
            seen.loaded.add(self.driver)
        if now.record is None:
            self._remember(env, Remembered(self.bdf, cur, override, probe=self.probe_on_restore and cur is None))
        if override != self.driver:
            host.write(host.pci_device(self.bdf, DRIVER_OVERRIDE), self.driver)
            seen.overrides[self.bdf] = self.driver  # as the kernel took it
        if cur:
            host.write(host.pci_driver(cur, "unbind"), self.bdf)
        host.write(host.pci_drivers_probe(), self.bdf)

    def _remember(self, env: Env, rec: Remembered) -> None:
        _seen(env).records[self.bdf] = binding.remember(env.host, rec)

    def verify(self, env: Env) -> None:
        now = _seen(env).drivers[self.bdf] = binding.current_driver(env.host, self.bdf)
        if now != self.driver:
            raise VerifyFailed(
                f"{self.bdf} is bound to {now or 'no driver'} after drivers_probe, not {self.driver}",
                device=self.bdf,
                hint=f"check dmesg; is {self.driver} able to drive this device?",
            )


@step_kind
@dataclass(frozen=True)
class UnbindDriver(Step):
    kind: ClassVar[str] = "unbind-driver"
    bdf: str
    note: str = ""

    def describe(self) -> str:  # the note names the driver: "0000:05:00.0 from mlx5_core"
        return f"unbind {self.note}" if self.note else f"unbind {self.bdf} from its driver"

    def inverse(self, env: Env) -> Step:
        return _put_back_now(env, self.bdf)

    def apply(self, env: Env) -> None:
        host = env.host
        now = _now(env, self.bdf)
        cur, override = now.driver, now.override
        _seen(env).forget_device(self.bdf)
        if cur is None:
            return
        if now.record is None:
            binding.remember(host, Remembered(self.bdf, cur, override))
        host.write(host.pci_driver(cur, "unbind"), self.bdf)

    def verify(self, env: Env) -> None:
        now = _seen(env).drivers[self.bdf] = binding.current_driver(env.host, self.bdf)
        if now is not None:
            raise VerifyFailed(f"{self.bdf} is still bound to {now}", device=self.bdf)


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
        return _put_back_now(env, self.bdf)

    def apply(self, env: Env) -> None:
        _seen(env).forget_device(self.bdf)
        binding.put_back(env.host, Remembered(self.bdf, self.driver, self.override, self.probe))
        if self.driver and binding.current_driver(env.host, self.bdf) != self.driver:
            raise VerifyFailed(f"{self.bdf} did not go back to {self.driver}", device=self.bdf, hint="check dmesg")
        binding.forget(env.host, self.bdf)


@step_kind
@dataclass(frozen=True)
class SetAutoprobe(Step):
    kind: ClassVar[str] = "sriov-autoprobe"
    pf: str
    value: bool
    why: str = ""
    was: bool | None = None  # the PF's autoprobe as the plan read it under the host lock (None: read it)

    def describe(self) -> str:
        return f"set sriov_drivers_autoprobe of {self.pf} to {int(self.value)}{self.why}"

    def _now(self, env: Env) -> int | None:
        """The PF's autoprobe as the command knows it (as a step left it, or as planned), else read."""
        known = _seen(env).autoprobe
        if self.pf not in known:
            path = env.host.pci_device(self.pf, "sriov_drivers_autoprobe")
            known[self.pf] = int(self.was) if self.was is not None else env.host.read_int(path, None)
        return known[self.pf]

    def inverse(self, env: Env) -> Step:
        cur = self._now(env)
        return SetAutoprobe(self.pf, bool(1 if cur is None else cur), " (as it was)")

    def apply(self, env: Env) -> None:
        if self._now(env) != int(self.value):
            env.host.write(env.host.pci_device(self.pf, "sriov_drivers_autoprobe"), str(int(self.value)))
        _seen(env).autoprobe[self.pf] = int(self.value)  # as it is now (for later steps and the report)


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
        cur = _seen(env).numvfs.get(self.pf, self.was)  # as a step left it, else as planned
        vfs = virtfns(host, self.pf) if cur else []
        drivers = tuple(
            (v, binding.current_driver(host, v), binding.current_override(host, v), _record(env, v)) for v in vfs
        )
        return RestoreVfs(self.pf, cur, self.total, drivers)

    def apply(self, env: Env) -> None:
        host = env.host
        seen = _seen(env)
        seen.forget_devices()
        seen.numvfs.pop(self.pf, None)
        if self.count == 0:
            _remove_vfs(host, self.pf, self.total)
        else:
            numvfs_write(host, self.pf, self.count, self.total)
        wait_for_vfs(host, self.pf, self.count, self.timeout)
        seen.numvfs[self.pf] = self.count  # the kernel shows them all


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
        _seen(env).forget_devices()
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
