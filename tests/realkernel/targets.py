"""A "host under test": the simulated qemu-guest profile, or the real kernel inside the QEMU guest.

Shared behavioural tests take a :class:`Target` and do the same thing on both: run the CLI
in-process (``vgpukit.cli.main.main``, the code path of ``python -m vgpukit``), write kernel control
files through the host door, hold a VFIO group open like a VM would. Both mirror the guest's machine:
NVMe PF 0000:00:02.0 (1b36:0010, 3 VFs at 00:02.1-3) bound to ``nvme``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpukit.errors import VgpukitError
from vgpukit.host import Host

PF = "0000:00:02.0"
PF_IDS = "1b36:0010"
TOTAL_VFS = 3
VF_BDFS = ("0000:00:02.1", "0000:00:02.2", "0000:00:02.3")


@dataclass
class CliResult:
    rc: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __str__(self) -> str:
        return f"rc={self.rc}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


class Target:
    kind: str
    host: Host

    def argv(self, args: tuple[str, ...]) -> list[str]:
        return list(args)

    def cli(self, *args: str) -> CliResult:
        from vgpukit.cli.main import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(self.argv(args))
        return CliResult(rc, out.getvalue(), err.getvalue())

    def write(self, path: Path, value: str) -> str | None:
        """A raw control-file write: None on success, else the errno name the kernel answered."""
        import errno

        try:
            self.host.write(path, value)
        except VgpukitError as exc:
            return errno.errorcode.get(exc.errno or 0, "?")
        return None

    # ------------------------------------------------------------------ reads
    def driver(self, bdf: str) -> str | None:
        return self.host.link_name(self.host.pci_device(bdf, "driver"))

    def override(self, bdf: str) -> str | None:
        value = self.host.read_opt(self.host.pci_device(bdf, "driver_override"))
        return None if value in (None, "", "(null)") else value

    def num_vfs(self) -> int:
        return self.host.read_int(self.host.pci_device(PF, "sriov_numvfs"), -1) or 0

    def group(self, bdf: str) -> int:
        name = self.host.link_name(self.host.pci_device(bdf, "iommu_group"))
        assert name is not None, f"{bdf} has no IOMMU group"
        return int(name)

    def vfio_node(self, bdf: str) -> Path:
        return self.host.dev("vfio", str(self.group(bdf)))

    def bind_records(self) -> list[str]:
        return self.host.listdir(self.host.state_dir("bind"))

    # ------------------------------------------------------------------ holding a device like a VM
    @contextlib.contextmanager
    def holding(self, bdf: str) -> Iterator[None]:
        raise NotImplementedError

    # ------------------------------------------------------------------ back to the boot state
    def reset(self) -> None:
        """PF bound to its driver, no VFs, autoprobe on, no overrides, no remembered bindings."""
        h = self.host
        if self.override(PF):
            h.write(h.pci_device(PF, "driver_override"), "\n")
        if self.driver(PF) is None:
            h.write(h.sys("bus", "pci", "drivers_probe"), PF)
        if self.num_vfs():
            h.write(h.pci_device(PF, "sriov_numvfs"), "0")
        if h.read_opt(h.pci_device(PF, "sriov_drivers_autoprobe")) != "1":
            h.write(h.pci_device(PF, "sriov_drivers_autoprobe"), "1")
        shutil.rmtree(h.state_dir("bind"), ignore_errors=True)
        assert self.driver(PF) == "nvme" and self.num_vfs() == 0


class SimTarget(Target):
    kind = "sim"

    def __init__(self, root: Path) -> None:
        from vgpukit.sim.build import init_sim
        from vgpukit.sim.kernel import SimKernel

        init_sim(root, "qemu-guest")
        self.root = root
        self.host = Host(root, kernel=SimKernel(root))

    def argv(self, args: tuple[str, ...]) -> list[str]:
        return ["--sim", str(self.root), *args]

    @contextlib.contextmanager
    def holding(self, bdf: str) -> Iterator[None]:
        from vgpukit.sim.holders import hold, release

        pid = hold(self.root, str(self.group(bdf)))
        try:
            yield
        finally:
            release(self.root, pid)


class RealTarget(Target):
    """The running kernel (inside the QEMU guest: VGPUKIT_IN_GUEST=1)."""

    kind = "real"

    def __init__(self) -> None:
        self.host = Host(Path("/"))

    @contextlib.contextmanager
    def holding(self, bdf: str) -> Iterator[None]:
        fd = os.open(self.vfio_node(bdf), os.O_RDWR)  # this test process is now "the VM"
        try:
            yield
        finally:
            os.close(fd)
