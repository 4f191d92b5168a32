"""``sriov enable`` / ``sriov disable``: plans as engine steps, from what the host reports.

Planning reads the host and validates everything (PF, count, drivers, VFs in use) before a single
change; the plan is a list of :mod:`vgpukit.sriov.steps`, run by :func:`vgpukit.engine.execute`
(journal, verify, roll back). The ``--dry-run`` lines are the steps' own descriptions.
"""

from __future__ import annotations

from ..engine import Step
from ..errors import Busy, DeviceUnusable, InvalidInput
from ..host import Host
from ..pci import vf_address
from . import binding
from .binding import DRIVER_MODES, VFIO, Remembered
from .model import PfInfo, VfInfo
from .steps import BindDriver, SetAutoprobe, SetNumVfs, UnbindDriver


def in_use_error(pf: PfInfo, vfs: list[VfInfo], what: str) -> Busy:
    first = vfs[0]
    detail = "; ".join(f"{v.bdf} {', '.join(u.describe() for u in v.users)}" for v in vfs[:4])
    more = f" (+{len(vfs) - 4} more)" if len(vfs) > 4 else ""
    return Busy(
        f"{what} would destroy VFs of {pf.bdf} that are in use: {detail}{more}",
        device=first.bdf,
        hint="stop the VMs / remove the mdevs first, or pass --force",
    )


def plan_enable(
    host: Host,
    pf: PfInfo,
    count: int,
    driver: str,
    no_autoprobe: bool,
    force: bool,
    timeout: float,
    unusable: str | None = None,
) -> list[Step]:
    """``unusable``: the health fact, why the health layer finds the PF unusable (None: usable)."""
    if unusable is not None:  # the health rule: no VFs are carved out of an unusable device
        raise DeviceUnusable(f"{pf.bdf} is unusable: {unusable}", device=pf.bdf, hint=f"see: vgpukit health {pf.bdf}")
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
        why = " (the kernel changes the count only through 0)"
        steps.append(SetNumVfs(pf.bdf, 0, pf.total_vfs, timeout, why, was=pf.num_vfs))
    if recreate and create_autoprobe != pf.autoprobe:
        why = " while the VFs are created" if want_autoprobe else ""
        steps.append(SetAutoprobe(pf.bdf, create_autoprobe, why))
    if recreate:
        steps.append(SetNumVfs(pf.bdf, count, pf.total_vfs, timeout))
        offset, stride = pf.offset or 1, pf.stride or 1
        expected = [vf_address(pf.bdf, offset, stride, n) for n in range(count)]
        if driver == VFIO:
            steps += [
                BindDriver(expected[n], VFIO, pf.autoprobe, f"VF {n} ({expected[n]})", pf.bdf) for n in range(count)
            ]
        if create_autoprobe != want_autoprobe:
            steps.append(SetAutoprobe(pf.bdf, want_autoprobe, " (as it was)"))
        return steps
    # Same count: only the bindings (and a persistent autoprobe change) may differ.
    if no_autoprobe and pf.autoprobe:
        steps.append(SetAutoprobe(pf.bdf, False))
    if driver == VFIO:
        steps += [BindDriver(v.bdf, VFIO, False, f"VF {v.index} ({v.bdf})", pf.bdf) for v in pf.vfs if v.driver != VFIO]
        # an idempotent re-run repairs lost records of VFs it put on vfio-pci
        steps += [
            BindDriver(v.bdf, VFIO, True, f"VF {v.index} ({v.bdf}): remember its original driver")
            for v in pf.vfs
            if v.driver == VFIO and binding.remembered_lenient(host, v.bdf) is None and pf.autoprobe
        ]
    elif driver == "none":
        busy = [v for v in pf.vfs if v.driver and v.in_use]
        if busy and not force:
            raise in_use_error(pf, busy, f"unbinding the VFs of {pf.bdf}")
        steps += [UnbindDriver(v.bdf, f"VF {v.index} ({v.bdf}) from {v.driver}") for v in pf.vfs if v.driver]
    return steps


def plan_disable(host: Host, pf: PfInfo, force: bool) -> list[Step]:
    if pf.num_vfs == 0:
        return []
    busy = [v for v in pf.vfs if v.in_use]
    if busy and not force:
        raise in_use_error(pf, busy, f"disabling SR-IOV on {pf.bdf}")
    return [SetNumVfs(pf.bdf, 0, pf.total_vfs, was=pf.num_vfs)]


__all__ = ["DRIVER_MODES", "Remembered", "plan_disable", "plan_enable"]
