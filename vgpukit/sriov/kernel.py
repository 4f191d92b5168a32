"""The kernel's SR-IOV control file, with its errors turned into what the operator should do."""

from __future__ import annotations

import errno
import time

from ..errors import Busy, InvalidInput, NotFound, VerifyFailed, VgpukitError
from ..host import VIRTFN, Host

POLL_SECONDS = 0.05


def numvfs_write(host: Host, pf: str, count: int, total: int) -> None:
    """Write ``sriov_numvfs`` and turn the kernel's errno into what the operator should do."""
    try:
        host.write(host.pci_device(pf, "sriov_numvfs"), str(count))
    except VgpukitError as exc:
        code = exc.errno
        if code == errno.ENOENT:
            raise NotFound(
                f"cannot set {count} VFs on {pf}: no driver is bound to the PF, or its driver cannot do "
                "SR-IOV (kernel: ENOENT)",
                device=pf,
                errno=code,
                path=exc.path,
                hint=f"bind the PF to its driver first (vgpukit bind {pf} --restore)",
            ) from exc
        if code == errno.EBUSY:
            raise Busy(
                f"cannot set {count} VFs on {pf}: VFs are already enabled and the kernel changes the count "
                "only through 0 (kernel: EBUSY)",
                device=pf,
                errno=code,
                path=exc.path,
                hint=f"vgpukit sriov disable {pf} first",
            ) from exc
        if code == errno.ERANGE:
            raise InvalidInput(
                f"{pf} supports at most {total} VFs, not {count} (kernel: ERANGE)",
                device=pf,
                errno=code,
                path=exc.path,
            ) from exc
        raise


def wait_for_vfs(host: Host, pf: str, count: int, timeout: float) -> None:
    """Poll until the PF shows ``count`` VFs (creation is asynchronous on some drivers): its
    ``virtfnN`` links, one listing per poll. The kernel adds a VF (its directory and attributes)
    before it links it from the PF (``pci_iov_add_virtfn``), so a link is a VF that is there."""
    deadline = time.monotonic() + timeout
    d = host.pci_device(pf)
    while True:
        have = sum(1 for n in host.listdir(d) if n.startswith(VIRTFN) and n[len(VIRTFN) :].isdigit())
        if have == count:
            return
        if time.monotonic() >= deadline:
            raise VerifyFailed(
                f"{pf}: {have} of {count} VFs appeared within {timeout:g} s",
                device=pf,
                hint="the PF driver may still be creating them; retry with a longer --timeout",
            )
        time.sleep(POLL_SECONDS)
