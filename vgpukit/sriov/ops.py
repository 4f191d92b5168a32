"""``sriov enable`` / ``sriov disable``: plan from what the host reports, then apply with rollback.

Planning reads the host and validates everything (PF, count, drivers, VFs in use) before a single
change. Each :class:`Step` says in words what it will do (that list is the ``--dry-run`` output) and
applies itself inside a :class:`~vgpukit.sriov.txn.Transaction`, registering its undo first.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import Busy, InvalidInput, NotFound, VerifyFailed, VgpukitError
from ..host import Host
from ..pci import vf_address, virtfns
from . import binding
from .binding import VFIO, Remembered
from .model import PfInfo, VfInfo
from .txn import Transaction

DRIVER_MODES = ("default", VFIO, "none")
POLL_SECONDS = 0.05


@dataclass
class Step:
    text: str
    apply: Callable[[Transaction], None]


def in_use_error(pf: PfInfo, vfs: list[VfInfo], what: str) -> Busy:
    first = vfs[0]
    detail = "; ".join(f"{v.bdf} {', '.join(u.describe() for u in v.users)}" for v in vfs[:4])
    more = f" (+{len(vfs) - 4} more)" if len(vfs) > 4 else ""
    return Busy(
        f"{what} would destroy VFs of {pf.bdf} that are in use: {detail}{more}",
        device=first.bdf,
        hint="stop the VMs / remove the mdevs first, or pass --force",
    )


def numvfs_write(host: Host, pf: PfInfo, count: int) -> None:
    """Write ``sriov_numvfs`` and turn the kernel's errno into what the operator should do."""
    try:
        host.write(host.pci_device(pf.bdf, "sriov_numvfs"), str(count))
    except VgpukitError as exc:
        code = exc.errno
        if code == errno.ENOENT:
            raise NotFound(
                f"cannot set {count} VFs on {pf.bdf}: no driver is bound to the PF, or its driver cannot do "
                "SR-IOV (kernel: ENOENT)",
                device=pf.bdf,
                errno=code,
                path=exc.path,
                hint=f"bind the PF to its driver first (vgpukit bind {pf.bdf} --restore)",
            ) from exc
        if code == errno.EBUSY:
            raise Busy(
                f"cannot set {count} VFs on {pf.bdf}: VFs are already enabled and the kernel changes the count "
                "only through 0 (kernel: EBUSY)",
                device=pf.bdf,
                errno=code,
                path=exc.path,
                hint=f"vgpukit sriov disable {pf.bdf} first",
            ) from exc
        if code == errno.ERANGE:
            raise InvalidInput(
                f"{pf.bdf} supports at most {pf.total_vfs} VFs, not {count} (kernel: ERANGE)",
                device=pf.bdf,
                errno=code,
                path=exc.path,
            ) from exc
        raise


def wait_for_vfs(host: Host, pf: str, count: int, timeout: float) -> list[str]:
    """Poll until the PF shows ``count`` VFs (creation is asynchronous on some drivers)."""
    deadline = time.monotonic() + timeout
    while True:
        vfs = virtfns(host, pf)
        if len(vfs) == count and all(host.exists(host.pci_device(v, "vendor")) for v in vfs):
            return vfs
        if time.monotonic() >= deadline:
            raise VerifyFailed(
                f"{pf}: {len(vfs)} of {count} VFs appeared within {timeout:g} s",
                device=pf,
                hint="the PF driver may still be creating them; retry with a longer --timeout",
            )
        time.sleep(POLL_SECONDS)


def _destroy_step(host: Host, pf: PfInfo, reason: str) -> Step:
    """Write 0, undoing by recreating the VFs with their bindings and remembered drivers."""
    snapshot = [(v.bdf, binding.Remembered(v.bdf, v.driver, v.driver_override)) for v in pf.vfs]
    records = {v.bdf: binding.remembered(host, v.bdf) for v in pf.vfs}

    def undo() -> None:
        if len(virtfns(host, pf.bdf)) != pf.num_vfs:
            numvfs_write(host, pf, 0)
            numvfs_write(host, pf, pf.num_vfs)
            wait_for_vfs(host, pf.bdf, pf.num_vfs, 10.0)
        for bdf, state in snapshot:
            binding.put_back(host, state)
            rec = records.get(bdf)
            if rec is not None:
                binding.remember(host, rec)

    def apply(txn: Transaction) -> None:
        txn.on_failure(f"recreate {pf.num_vfs} VFs on {pf.bdf}", undo)
        for v in pf.vfs:
            binding.forget(host, v.bdf)
        numvfs_write(host, pf, 0)
        txn.record(f"destroyed {pf.num_vfs} VFs on {pf.bdf}")

    return Step(f"destroy the {pf.num_vfs} VFs of {pf.bdf} (sriov_numvfs {pf.num_vfs} -> 0){reason}", apply)


def _autoprobe_step(host: Host, pf: PfInfo, old: bool, new: bool, why: str) -> Step:
    path = host.pci_device(pf.bdf, "sriov_drivers_autoprobe")

    def apply(txn: Transaction) -> None:
        txn.on_failure(f"set {pf.bdf} autoprobe back to {int(old)}", lambda: host.write(path, str(int(old))))
        host.write(path, str(int(new)))

    return Step(f"set sriov_drivers_autoprobe of {pf.bdf} {int(old)} -> {int(new)}{why}", apply)


def _create_step(host: Host, pf: PfInfo, count: int, timeout: float) -> Step:
    def undo() -> None:
        for v in virtfns(host, pf.bdf):
            binding.forget(host, v)
        numvfs_write(host, pf, 0)

    def apply(txn: Transaction) -> None:
        txn.on_failure(f"destroy the new VFs of {pf.bdf}", undo)
        numvfs_write(host, pf, count)
        wait_for_vfs(host, pf.bdf, count, timeout)
        txn.record(f"created {count} VFs on {pf.bdf}")

    return Step(f"create {count} VFs on {pf.bdf} (sriov_numvfs 0 -> {count}) and wait for them", apply)


def _bind_step(host: Host, pf: PfInfo, index: int, expected: str, probe_on_restore: bool) -> Step:
    def apply(txn: Transaction) -> None:
        vfs = virtfns(host, pf.bdf)
        if index >= len(vfs):
            raise VerifyFailed(f"{pf.bdf} has no VF {index}", device=pf.bdf)
        binding.bind_to(host, txn, vfs[index], VFIO, probe_on_restore=probe_on_restore)

    return Step(f"bind VF {index} ({expected}) to {VFIO}", apply)


def _unbind_step(host: Host, vf: VfInfo) -> Step:
    def apply(txn: Transaction) -> None:
        binding.unbind_from(host, txn, vf.bdf)

    return Step(f"unbind VF {vf.index} ({vf.bdf}) from {vf.driver}", apply)


def plan_enable(
    host: Host, pf: PfInfo, count: int, driver: str, no_autoprobe: bool, force: bool, timeout: float
) -> list[Step]:
    if driver not in DRIVER_MODES:
        raise InvalidInput(f"--driver must be one of {', '.join(DRIVER_MODES)}", value=driver)
    if count < 1:
        raise InvalidInput("--vfs must be at least 1 (use 'vgpukit sriov disable' to remove all VFs)", value=count)
    if count > pf.total_vfs:
        raise InvalidInput(f"{pf.bdf} supports at most {pf.total_vfs} VFs, not {count}", device=pf.bdf, value=count)
    if timeout <= 0:
        raise InvalidInput("--timeout must be positive", value=timeout)
    if driver == VFIO:
        binding.require_driver(host, VFIO)
    steps: list[Step] = []
    recreate = pf.num_vfs != count
    # While VFs are created, autoprobe decides whether the PF's VF driver grabs them: keep it off when
    # they must end up on vfio-pci or unbound, so no host driver ever touches them.
    want_autoprobe = pf.autoprobe and not no_autoprobe
    create_autoprobe = want_autoprobe and driver == "default"
    if recreate and pf.num_vfs:
        busy = [v for v in pf.vfs if v.in_use]
        if busy and not force:
            raise in_use_error(pf, busy, f"changing {pf.bdf} from {pf.num_vfs} to {count} VFs (through 0)")
        steps.append(_destroy_step(host, pf, " (the kernel changes the count only through 0)"))
    if recreate and create_autoprobe != pf.autoprobe:
        why = " while the VFs are created" if want_autoprobe else ""
        steps.append(_autoprobe_step(host, pf, pf.autoprobe, create_autoprobe, why))
    if recreate:
        steps.append(_create_step(host, pf, count, timeout))
        offset, stride = pf.offset or 1, pf.stride or 1
        expected = [vf_address(pf.bdf, offset, stride, n) for n in range(count)]
        if driver == VFIO:
            steps += [_bind_step(host, pf, n, expected[n], pf.autoprobe) for n in range(count)]
        if create_autoprobe != want_autoprobe:
            steps.append(_autoprobe_step(host, pf, create_autoprobe, want_autoprobe, " (as it was)"))
        return steps
    # Same count: only the bindings (and a persistent autoprobe change) may differ.
    if no_autoprobe and pf.autoprobe:
        steps.append(_autoprobe_step(host, pf, True, False, ""))
    if driver == VFIO:
        steps += [_bind_step(host, pf, v.index, v.bdf, False) for v in pf.vfs if v.driver != VFIO]
    elif driver == "none":
        busy = [v for v in pf.vfs if v.driver and v.in_use]
        if busy and not force:
            raise in_use_error(pf, busy, f"unbinding the VFs of {pf.bdf}")
        steps += [_unbind_step(host, v) for v in pf.vfs if v.driver]
    return steps


def plan_disable(host: Host, pf: PfInfo, force: bool) -> list[Step]:
    if pf.num_vfs == 0:
        return []
    busy = [v for v in pf.vfs if v.in_use]
    if busy and not force:
        raise in_use_error(pf, busy, f"disabling SR-IOV on {pf.bdf}")
    return [_destroy_step(host, pf, "")]


def apply(steps: list[Step]) -> list[str]:
    """Run the steps in one transaction; what was done, in words."""
    with Transaction() as txn:
        for step in steps:
            step.apply(txn)
    return txn.done


__all__ = ["DRIVER_MODES", "Remembered", "Step", "apply", "plan_disable", "plan_enable"]
