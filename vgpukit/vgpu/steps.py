"""vGPUs on per-VF vendor VFIO as engine steps: ``nvidia/current_vgpu_type`` of a VF.
(Legacy vGPUs are mdevs: :mod:`vgpukit.mdev.steps`.)"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import ClassVar

from ..engine import Env, Step, step_kind
from ..errors import Busy, NoCapacity, VerifyFailed, VgpukitError
from .hostview import creatable, current_type


@step_kind
@dataclass(frozen=True)
class SetVgpuType(Step):
    """Ensure VF ``vf`` carries vGPU type ``type_id`` ("0": none)."""

    kind: ClassVar[str] = "vgpu-type"
    vf: str
    type_id: str
    name: str = ""
    check_creatable: bool = False  # the creatable list shrinks as the card fills: ask before each

    def describe(self) -> str:
        if self.type_id == "0":
            return f"clear {self.vf} nvidia/current_vgpu_type (write 0)"
        return f"set {self.vf} nvidia/current_vgpu_type = {self.type_id}" + (f" ({self.name})" if self.name else "")

    def inverse(self, env: Env) -> Step | None:
        if not env.host.exists(env.host.pci_device(self.vf)):
            return None
        return SetVgpuType(self.vf, str(current_type(env.host, self.vf)))

    def apply(self, env: Env) -> None:
        host = env.host
        if str(current_type(host, self.vf)) == self.type_id:
            return
        if self.check_creatable and int(self.type_id) not in dict(creatable(host, self.vf)):
            raise NoCapacity(
                f"no room for another {self.name or self.type_id} on {self.vf}'s GPU"
                " (its creatable_vgpu_types no longer lists it)",
                device=self.vf,
            )
        try:
            host.write(host.pci_device(self.vf, "nvidia", "current_vgpu_type"), self.type_id)
        except VgpukitError as err:
            if err.errno == errno.EBUSY:
                raise Busy(
                    f"{self.vf} refused vGPU type {self.type_id}: busy",
                    device=self.vf,
                    errno=err.errno,
                    hint="it already has a vGPU or a VM holds it",
                ) from err
            if err.errno in (errno.ENOSPC, errno.EUSERS):
                raise NoCapacity(
                    f"{self.vf}: the GPU has no room for vGPU type {self.type_id}", device=self.vf, errno=err.errno
                ) from err
            raise

    def verify(self, env: Env) -> None:
        if str(current_type(env.host, self.vf)) != self.type_id:
            raise VerifyFailed(f"{self.vf}: current_vgpu_type does not read back {self.type_id}", device=self.vf)
