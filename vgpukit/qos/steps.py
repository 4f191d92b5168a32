"""The QoS configuration as engine steps: the file ``apply`` writes, and the running daemon told to
load it (its reload path: the control socket's ``reload``, what ``systemctl reload vgpukit-qos``'s
SIGHUP does). The daemon's run-time changes are its own (``qos set``, ``qos tenant add|rm``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import yaml

from ..engine import Env, Step, step_kind
from ..engine.files import PutFile
from ..errors import NotFound, VerifyFailed
from .model import QosConfig


def _tell(env: Env) -> bool:
    """Have a running daemon reload its configuration; False when none runs."""
    from .control import request

    try:
        request(env.host, {"op": "reload"})
    except NotFound:
        return False
    return True


def _runs(env: Env, path: str, text: str | None) -> None:
    """VerifyFailed unless a running daemon runs ``text`` (None: an empty configuration)."""
    from .planner_host import daemon_view

    view = daemon_view(env.host)
    if view is None or view.loaded is None:
        return
    want = QosConfig.from_dict(yaml.safe_load(text) if text else None).to_dict()
    if view.loaded != want:
        raise VerifyFailed(f"the QoS daemon does not run {path} after its reload", path=path)


@step_kind
@dataclass(frozen=True)
class PutQosConfig(PutFile):
    """Ensure the QoS config file holds ``text`` and a running daemon runs it (its inverse puts the old
    file back and has the daemon reload that). ``reload``: whether a daemon ran when it was planned."""

    kind: ClassVar[str] = "qos-config"
    reload: bool = False

    def describe(self) -> str:
        told = "; reload the QoS daemon" if self.reload else " (no QoS daemon runs: it reads it when it starts)"
        return f"write the QoS config {self.path}{told}"

    def undo(self, before: str | None) -> Step:
        return PutQosConfig(self.path, before, self.mode, reload=self.reload)

    def change(self, env: Env, before: str | None) -> None:
        super().change(env, before)
        _tell(env)

    def check(self, env: Env, before: str | None) -> str | None:
        after = super().check(env, before)
        _runs(env, self.path, self.text)
        return after


@step_kind
@dataclass(frozen=True)
class ReloadQos(Step):
    """Have the running daemon load the config file ``path`` again (it is already as wanted)."""

    kind: ClassVar[str] = "qos-reload"
    path: str
    why: str = ""

    def describe(self) -> str:
        return f"reload the QoS daemon's configuration {self.path}" + (f" ({self.why})" if self.why else "")

    def inverse(self, env: Env) -> Step | None:
        return None  # the file is unchanged: what the daemon ran before is not a file to go back to

    def apply(self, env: Env) -> None:
        _tell(env)

    def verify(self, env: Env) -> None:
        text = env.host.read_raw_opt(env.host.path(*(p for p in self.path.split("/") if p)))
        _runs(env, self.path, text if isinstance(text, str) else None)
