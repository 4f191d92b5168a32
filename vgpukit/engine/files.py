"""Steps over whole files (persistent definitions, records, specs): ensure content or absence."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import VerifyFailed
from .env import Env
from .step import Step, step_kind


def _rel(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.split("/") if p)


@step_kind
@dataclass(frozen=True)
class PutFile(Step):
    """Ensure the file at ``path`` (as seen on the host, e.g. /etc/mdevctl.d/...) holds ``text``,
    or is absent when ``text`` is None. ``what``: how plans say it (default "write PATH")."""

    kind: ClassVar[str] = "put-file"
    path: str
    text: str | None
    mode: int = 0o644
    what: str = ""

    def describe(self) -> str:
        if self.what:  # the caller's words for this file ("define <uuid> ... in <path>")
            return self.what
        return f"remove {self.path}" if self.text is None else f"write {self.path}"

    def inverse(self, env: Env) -> Step:
        old = env.seen[f"file:{self.path}"] = env.host.read_raw_opt(env.host.path(*_rel(self.path)))
        return PutFile(self.path, old, self.mode)

    def _now(self, env: Env) -> str | None:
        """The file's content: as the inverse just read it or apply wrote it (``env.seen``), else read now."""
        key = f"file:{self.path}"
        if key not in env.seen:
            env.seen[key] = env.host.read_raw_opt(env.host.path(*_rel(self.path)))
        now = env.seen[key]
        return now if isinstance(now, str) else None

    def apply(self, env: Env) -> None:
        target = env.host.path(*_rel(self.path))
        if env.recovering:
            # temporaries of an atomic write that the kill interrupted (".NAME.xxxx" beside it): the
            # host lock is held, so no live writer owns them (only a killed command leaves them)
            for name in env.host.listdir(target.parent):
                if name.startswith(f".{target.name}."):
                    env.host.remove(target.parent / name)
        if self.text is None:
            env.host.remove(target)
        elif self._now(env) != self.text:
            env.host.write_file(target, self.text, self.mode)
        env.seen[f"file:{self.path}"] = self.text  # what is there now (write_file raises when it is not)

    def verify(self, env: Env) -> None:
        if self._now(env) != self.text:
            raise VerifyFailed(f"{self.path} does not read back as written", path=self.path)
