"""The MIG changes as change-engine steps (:mod:`vgpukit.engine`), one frozen dataclass per action.

Every step names what it touches by stable keys: the GPU's PCI address, a GPU instance's profile
and placement start, a compute instance's placement start inside it. Never by the GI/CI ids the
driver assigns when it creates them, so a step and its inverse mean the same thing before and after
a crash. ``apply`` is an "ensure": it does nothing when the host already is as the step wants, and
``inverse`` (read from the live state just before ``apply``) returns the step that puts it back, so
the journal replayed after a kill -9 repairs a half-done ``mig apply`` whatever step it died in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine import Env, Step, step_kind
from ..errors import Conflict, NotFound, VerifyFailed
from ..nvml import ComputeInstance, GpuInstance, Nvml
from ..words import slots
from .spec import ci_enum
from .view import require


@dataclass(frozen=True)
class MigStep(Step):
    bdf: str  # the GPU, by PCI address
    label: str  # how messages name it: "gpu0 (0000:07:00.0)"

    kind: ClassVar[str] = ""

    def text(self) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.label}: {self.text()}"

    def inverse(self, env: Env) -> MigStep | None:
        raise NotImplementedError


def nvml_of(env: Env) -> Nvml:
    return require(env.nvml)


# ----------------------------------------------------------------------------- live lookups
def gpu_index(nvml: Nvml, bdf: str) -> int:
    index = nvml.index_of(bdf)
    if index is not None:
        return index
    raise NotFound(f"{bdf} is not an NVIDIA GPU that NVML reports", device=bdf)


def find_gi(nvml: Nvml, index: int, profile_id: int, start: int) -> GpuInstance | None:
    current, _ = nvml.mig_mode(index)
    if not current:
        return None
    return next((g for g in nvml.gpu_instances(index) if g.profile_id == profile_id and g.start == start), None)


def find_ci(gi: GpuInstance | None, start: int, slices: int) -> ComputeInstance | None:
    if gi is None:
        return None
    return next((c for c in gi.compute_instances if c.start == start and c.slices == slices), None)


def free_ci_start(nvml: Nvml, index: int, gi: GpuInstance, slices: int) -> int:
    """Where a new compute instance of ``slices`` goes in ``gi``: the first free placement the driver offers."""
    enum = ci_enum(slices)
    cp = next((c for c in nvml.ci_profiles(index, gi.id) if c.enum == enum), None)
    used = 0
    for c in gi.compute_instances:
        used |= ((1 << c.slices) - 1) << c.start
    for s in cp.starts if cp else ():
        if not used & (((1 << slices) - 1) << s):
            return s
    raise Conflict(f"no room for a {slices}-slice compute instance in GPU instance {gi.id}")


# ----------------------------------------------------------------------------- the steps
@step_kind
@dataclass(frozen=True)
class DestroyCi(MigStep):
    """Ensure no compute instance of ``slices`` at ``start`` in the GPU instance at ``gi_start``."""

    gi_profile_id: int
    gi_start: int
    start: int
    slices: int
    gi_id: int = -1  # as shown to the user when planned
    ci_id: int = -1
    uuid: str = ""

    kind: ClassVar[str] = "mig-destroy-ci"

    def text(self) -> str:
        if self.ci_id < 0:  # an inverse: known by its placement only
            return (
                f"destroy the {self.slices}c compute instance at slice {self.start} of the GI at slot {self.gi_start}"
            )
        return f"destroy compute instance {self.ci_id} of GI {self.gi_id} ({self.uuid})"

    def apply(self, env: Env) -> None:
        nvml = nvml_of(env)
        i = gpu_index(nvml, self.bdf)
        gi = find_gi(nvml, i, self.gi_profile_id, self.gi_start)
        ci = find_ci(gi, self.start, self.slices)
        if gi is not None and ci is not None:
            nvml.destroy_compute_instance(i, gi.id, ci.id)

    def verify(self, env: Env) -> None:
        nvml = nvml_of(env)
        if find_ci(
            find_gi(nvml, gpu_index(nvml, self.bdf), self.gi_profile_id, self.gi_start), self.start, self.slices
        ):
            raise VerifyFailed(f"{self.label}: the compute instance at slice {self.start} is still there")

    def inverse(self, env: Env) -> MigStep | None:
        nvml = nvml_of(env)
        i = gpu_index(nvml, self.bdf)
        if find_ci(find_gi(nvml, i, self.gi_profile_id, self.gi_start), self.start, self.slices) is None:
            return None
        return CreateCi(
            self.bdf, self.label, self.gi_profile_id, self.gi_start, self.slices, f"{self.slices}c", self.start
        )


@step_kind
@dataclass(frozen=True)
class DestroyGi(MigStep):
    """Ensure no GPU instance of ``profile_id`` at ``start`` (its compute instances must be gone)."""

    profile_id: int
    profile: str
    start: int
    size: int
    gi_id: int = -1  # as shown to the user when planned

    kind: ClassVar[str] = "mig-destroy-gi"

    def text(self) -> str:
        gi = f"GI {self.gi_id}" if self.gi_id >= 0 else "the GI"
        return f"destroy {gi} ({self.profile}) at {slots(self.start, self.size)}"

    def apply(self, env: Env) -> None:
        nvml = nvml_of(env)
        i = gpu_index(nvml, self.bdf)
        gi = find_gi(nvml, i, self.profile_id, self.start)
        if gi is not None:
            nvml.destroy_gpu_instance(i, gi.id)

    def verify(self, env: Env) -> None:
        nvml = nvml_of(env)
        if find_gi(nvml, gpu_index(nvml, self.bdf), self.profile_id, self.start) is not None:
            raise VerifyFailed(f"{self.label}: the {self.profile} GPU instance at slot {self.start} is still there")

    def inverse(self, env: Env) -> MigStep | None:
        nvml = nvml_of(env)
        if find_gi(nvml, gpu_index(nvml, self.bdf), self.profile_id, self.start) is None:
            return None
        return CreateGi(self.bdf, self.label, self.profile_id, self.profile, self.start, self.size)


@step_kind
@dataclass(frozen=True)
class SetMode(MigStep):
    """Ensure the pending MIG mode is ``enable``; unless ``pending_ok``, it must be in effect now."""

    enable: bool
    pending_ok: bool = False  # a change left pending until a reset is fine (a Reset step follows, or asked)
    then_reset: bool = False  # a Reset step of this plan applies it

    kind: ClassVar[str] = "mig-set-mode"

    def text(self) -> str:
        word = "enable" if self.enable else "disable"
        late = self.pending_ok and not self.then_reset
        return f"{word} MIG mode" + (" (pending until the GPU is reset)" if late else "")

    def apply(self, env: Env) -> None:
        nvml = nvml_of(env)
        i = gpu_index(nvml, self.bdf)
        current, pending = nvml.mig_mode(i)
        applied = nvml.set_mig_mode(i, self.enable) if pending != self.enable else current == self.enable
        if not applied and not (self.pending_ok or self.then_reset):
            raise Conflict(
                f"{self.label}: the MIG mode change is pending (GPU held or reset required)",
                hint="stop what holds the GPU and rerun, or reset it yourself (nvidia-smi -r)",
            )

    def verify(self, env: Env) -> None:
        nvml = nvml_of(env)
        if nvml.mig_mode(gpu_index(nvml, self.bdf))[1] != self.enable:
            raise VerifyFailed(f"{self.label}: the MIG mode did not change")

    def inverse(self, env: Env) -> MigStep | None:
        nvml = nvml_of(env)
        _, pending = nvml.mig_mode(gpu_index(nvml, self.bdf))
        return None if pending == self.enable else SetMode(self.bdf, self.label, pending, pending_ok=True)


@step_kind
@dataclass(frozen=True)
class Reset(MigStep):
    """Ensure the MIG mode in effect is ``enable``: request it and reset the GPU when it is not yet."""

    enable: bool

    kind: ClassVar[str] = "mig-reset"

    def text(self) -> str:
        return "reset the GPU to apply the MIG mode"

    def apply(self, env: Env) -> None:
        nvml = nvml_of(env)
        i = gpu_index(nvml, self.bdf)
        current, pending = nvml.mig_mode(i)
        if current == self.enable:
            return
        if pending != self.enable:
            nvml.set_mig_mode(i, self.enable)
        nvml.reset_gpu(i)

    def verify(self, env: Env) -> None:
        nvml = nvml_of(env)
        if nvml.mig_mode(gpu_index(nvml, self.bdf))[0] != self.enable:
            raise VerifyFailed(f"{self.label}: the MIG mode is not in effect after the reset")

    def inverse(self, env: Env) -> MigStep | None:
        nvml = nvml_of(env)
        current, _ = nvml.mig_mode(gpu_index(nvml, self.bdf))
        return None if current == self.enable else Reset(self.bdf, self.label, current)


@step_kind
@dataclass(frozen=True)
class CreateGi(MigStep):
    """Ensure a GPU instance of ``profile_id`` at ``start``."""

    profile_id: int
    profile: str
    start: int
    size: int

    kind: ClassVar[str] = "mig-create-gi"

    def text(self) -> str:
        return f"create GPU instance {self.profile} at {slots(self.start, self.size)}"

    def apply(self, env: Env) -> None:
        nvml = nvml_of(env)
        i = gpu_index(nvml, self.bdf)
        if find_gi(nvml, i, self.profile_id, self.start) is None:
            nvml.create_gpu_instance(i, self.profile_id, self.start)

    def verify(self, env: Env) -> None:
        nvml = nvml_of(env)
        if find_gi(nvml, gpu_index(nvml, self.bdf), self.profile_id, self.start) is None:
            raise VerifyFailed(f"{self.label}: no {self.profile} GPU instance at slot {self.start} after creating it")

    def inverse(self, env: Env) -> MigStep | None:
        nvml = nvml_of(env)
        if find_gi(nvml, gpu_index(nvml, self.bdf), self.profile_id, self.start) is not None:
            return None
        return DestroyGi(self.bdf, self.label, self.profile_id, self.profile, self.start, self.size)


@step_kind
@dataclass(frozen=True)
class CreateCi(MigStep):
    """A compute instance of ``slices`` in the GPU instance at ``gi_start``: at ``start`` (ensured when
    given), else at the first free placement the driver offers."""

    gi_profile_id: int
    gi_start: int
    slices: int
    name: str  # "1c.3g.20gb", as shown
    start: int | None = None

    kind: ClassVar[str] = "mig-create-ci"

    def text(self) -> str:
        return f"create compute instance {self.name} in the GPU instance at slot {self.gi_start}"

    def _where(self, nvml: Nvml) -> tuple[int, GpuInstance, int | None]:
        i = gpu_index(nvml, self.bdf)
        gi = find_gi(nvml, i, self.gi_profile_id, self.gi_start)
        if gi is None:
            raise NotFound(f"{self.label}: no GPU instance (profile {self.gi_profile_id}) at slot {self.gi_start}")
        if self.start is not None:
            return i, gi, None if find_ci(gi, self.start, self.slices) else self.start
        return i, gi, free_ci_start(nvml, i, gi, self.slices)

    def apply(self, env: Env) -> None:
        nvml = nvml_of(env)
        i, gi, start = self._where(nvml)
        if start is not None:
            nvml.create_compute_instance(i, gi.id, ci_enum(self.slices), start)

    def inverse(self, env: Env) -> MigStep | None:
        nvml = nvml_of(env)
        start = self._where(nvml)[2]
        if start is None:
            return None
        return DestroyCi(self.bdf, self.label, self.gi_profile_id, self.gi_start, start, self.slices)


STEP_TYPES: tuple[type[MigStep], ...] = (DestroyCi, DestroyGi, SetMode, Reset, CreateGi, CreateCi)
