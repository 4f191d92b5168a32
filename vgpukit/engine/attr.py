"""One attribute step, tuned-style: a one-value file (a sysfs attribute) set, verified, put back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import VerifyFailed
from .env import Env
from .files import rel
from .step import Observing, Step, step_kind


@step_kind
@dataclass(frozen=True)
class SetAttr(Observing[str | None]):
    """Ensure the one-value file at ``path`` (as seen on the host: /sys/bus/pci/devices/BDF/ATTR)
    reads ``value``. Its inverse is the value it read before (``was``, when the plan read it under
    the host lock, else read now); it verifies itself by reading back what it wrote; a value already
    there is not written again. ``name``: how the plan line names the attribute (default: the path);
    ``why``: what it adds after the value (" (as it was)")."""

    kind: ClassVar[str] = "set-attr"
    path: str
    value: str
    name: str = ""
    why: str = ""
    was: str | None = None

    def describe(self) -> str:
        return f"set {self.name or self.path} to {self.value}{self.why}"

    def read(self, env: Env) -> str | None:
        """The value now (None: no such file), or as the plan read it."""
        if self.was is not None:
            return self.was
        return env.host.read_opt(env.host.path(*rel(self.path)))

    def undo(self, before: str | None) -> Step | None:
        if before is None or before == self.value:  # nothing there to put back, or nothing changes
            return None
        return SetAttr(self.path, before, self.name, " (as it was)")

    def change(self, env: Env, before: str | None) -> None:
        if before is None or before == self.value:  # gone (an undo of a device gone: nothing to put back)
            return
        env.host.write(env.host.path(*rel(self.path)), self.value)

    def check(self, env: Env, before: str | None) -> str | None:
        if before == self.value:
            return before  # nothing written: as read
        now = env.host.read_opt(env.host.path(*rel(self.path)))
        if now != self.value:
            shown = "is not there" if now is None else f"does not read back {self.value}"
            raise VerifyFailed(f"{self.path} {shown} after writing it", path=self.path)
        return now
