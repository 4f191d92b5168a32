"""Steps over whole files (persistent definitions, records, specs): ensure content or absence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .env import Env
from .step import Observing, Step, step_kind


def rel(path: str) -> tuple[str, ...]:
    """``/etc/x/y`` (a path as seen on the host) as the parts the host door joins under its root."""
    return tuple(p for p in path.split("/") if p)


@step_kind
@dataclass(frozen=True)
class PutFile(Observing[str | None]):
    """Ensure the file at ``path`` (as seen on the host, e.g. /etc/mdevctl.d/...) holds ``text``,
    or is absent when ``text`` is None. ``what``: how plans say it (default "write PATH").
    Observed: the file's text before (None: absent) and after (as written: the write raises when it
    did not take)."""

    kind: ClassVar[str] = "put-file"
    path: str
    text: str | None
    mode: int = 0o644
    what: str = ""

    def describe(self) -> str:
        if self.what:  # the caller's words for this file ("define <uuid> ... in <path>")
            return self.what
        return f"remove {self.path}" if self.text is None else f"write {self.path}"

    def read(self, env: Env) -> str | None:
        return env.host.read_raw_opt(env.host.path(*rel(self.path)))

    def undo(self, before: str | None) -> Step:
        return PutFile(self.path, before, self.mode)

    def change(self, env: Env, before: str | None) -> None:
        target = env.host.path(*rel(self.path))
        if env.recovering:
            # temporaries of an atomic write that the kill interrupted (".NAME.xxxx" beside it): the
            # host lock is held, so no live writer owns them (only a killed command leaves them)
            for name in env.host.listdir(target.parent):
                if name.startswith(f".{target.name}."):
                    env.host.remove(target.parent / name)
        if self.text is None:
            env.host.remove(target)
        elif before != self.text:
            env.host.write_file(target, self.text, self.mode)

    def check(self, env: Env, before: str | None) -> str | None:
        return self.text  # what is there now: write_file and remove raise when they did not take
