"""Mediated-device changes as engine steps: instances (create / remove / attributes), persistent
definitions (mdevctl files, through :class:`~vgpukit.engine.files.PutFile`) and mdevctl's call-out
scripts (:class:`CalloutPre` before any change, :class:`CalloutPost` once it is committed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine import Env, Step, step_kind
from ..engine.files import PutFile
from ..engine.step import AFTER, BEFORE
from ..errors import Conflict, NoCapacity, VerifyFailed, VgpukitError
from ..host import MDEV_TYPE
from . import mdevctl, sysfs
from .callouts import Callout, CalloutRefused, live_modify
from .model import Definition

VETOED = "vetoed"


def _present(env: Env, uid: str) -> bool:
    return env.host.exists(env.host.mdev_device(uid))


@step_kind
@dataclass(frozen=True)
class CreateMdev(Step):
    """Ensure instance ``uuid`` of ``type_id`` exists on ``parent``."""

    kind: ClassVar[str] = "mdev-create"
    parent: str
    type_id: str
    uuid: str
    check_capacity: bool = True

    def describe(self) -> str:
        return f"create {self.type_id} {self.uuid} on {self.parent}"

    def inverse(self, env: Env) -> Step | None:
        return None if _present(env, self.uuid) else RemoveMdev(self.uuid, self.parent, self.type_id)

    def apply(self, env: Env) -> None:
        if _present(env, self.uuid):
            have = env.host.link_name(env.host.mdev_device(self.uuid, MDEV_TYPE))
            if have != self.type_id:
                raise Conflict(
                    f"an mdev with UUID {self.uuid} already exists ({have})", value=self.uuid, device=self.parent
                )
            return
        # Sibling types share capacity: trust the kernel's current count, not the plan.
        if self.check_capacity and sysfs.available(env.host, self.parent, self.type_id) < 1:
            raise NoCapacity(f"{self.parent} ran out of capacity for {self.type_id} while creating", device=self.parent)
        sysfs.create(env.host, self.parent, self.type_id, self.uuid)

    def verify(self, env: Env) -> None:
        if not _present(env, self.uuid):
            raise VerifyFailed(
                f"wrote {self.uuid} to {self.parent}/{self.type_id}/create but no such mdev appeared", value=self.uuid
            )


@step_kind
@dataclass(frozen=True)
class RemoveMdev(Step):
    """Ensure instance ``uuid`` is gone (its definition, if any, stays)."""

    kind: ClassVar[str] = "mdev-remove"
    uuid: str
    parent: str = ""
    type_id: str = ""

    def describe(self) -> str:
        of = f" ({self.type_id} on {self.parent})" if self.parent else ""
        return f"remove {self.uuid}{of}"

    def inverse(self, env: Env) -> Step | None:
        if not _present(env, self.uuid) or not self.parent:
            return None
        return CreateMdev(self.parent, self.type_id, self.uuid, check_capacity=False)

    def apply(self, env: Env) -> None:
        if _present(env, self.uuid):
            sysfs.remove(env.host, self.uuid)

    def verify(self, env: Env) -> None:
        if _present(env, self.uuid):
            raise VerifyFailed(f"mdev {self.uuid} is still present after remove", value=self.uuid)


@step_kind
@dataclass(frozen=True)
class SetMdevAttr(Step):
    """Write one vendor attribute of an instance (mdevctl ``attrs``); undone by removing the instance."""

    kind: ClassVar[str] = "mdev-attr"
    uuid: str
    attr: str
    value: str

    def describe(self) -> str:
        return f"set {self.attr} of {self.uuid}"

    def apply(self, env: Env) -> None:
        sysfs.write_attr(env.host, self.uuid, self.attr, self.value)


def put_definition(path: str, d: Definition, verb: str = "define") -> PutFile:
    """The step that writes ``d`` as mdevctl's file at ``path`` (as seen on the host)."""
    return PutFile(
        path, mdevctl.text_of(d), what=f"{verb} {d.uuid} ({d.type_id} on {d.parent}, start {d.start}) in {path}"
    )


def drop_definition(path: str, uid: str) -> PutFile:
    return PutFile(path, None, what=f"undefine {uid} (remove {path})")


@dataclass(frozen=True)
class _DeviceCallout(Step):
    """What both call-out steps say of their device (mdevctl's ``-a ACTION -u -p -t`` and its config)."""

    action: str
    uuid: str
    parent: str
    type_id: str
    start: str = "manual"
    attrs: tuple[tuple[str, str], ...] = ()

    def device(self) -> Definition:
        return Definition(self.uuid, self.parent, self.type_id, self.start, self.attrs)

    def key(self) -> str:
        """Where the command keeps what ``pre`` found (the script that claimed the device) for ``post``."""
        return f"mdev-callout:{self.action}:{self.uuid}"


@step_kind
@dataclass(frozen=True)
class CalloutPre(_DeviceCallout):
    """mdevctl's ``pre`` call-out for ``action`` of one device, before any change of the plan: a veto
    refuses the whole plan (with ``force``: logged, the plan goes on). Its inverse tells the scripts
    the action failed (``post`` with state ``failure``, and the notifiers): what a rollback, or the
    recovery of a command killed before it committed, says."""

    kind: ClassVar[str] = "mdev-callout-pre"
    stage: ClassVar[str] = BEFORE
    force: bool = False

    def describe(self) -> str:
        return f"ask the call-out scripts before {self.action} of {self.uuid}"

    def inverse(self, env: Env) -> Step:
        return CalloutPost(self.action, self.uuid, self.parent, self.type_id, self.start, self.attrs, ok=False)

    def apply(self, env: Env) -> None:
        c = Callout(env.host, self.device(), self.action)
        try:
            c.pre(self.force)
        except CalloutRefused:
            env.handles[self.key()] = VETOED
            c.notify()  # the notifiers hear of the veto (state none); the vetoing script gets no post
            raise
        env.handles[self.key()] = c


@step_kind
@dataclass(frozen=True)
class CalloutPost(_DeviceCallout):
    """mdevctl's ``post`` call-out (state ``success`` / ``failure``) to the script that answered ``pre``
    (or, in a new process, the first that claims the device now), then every notifier."""

    kind: ClassVar[str] = "mdev-callout-post"
    stage: ClassVar[str] = AFTER
    ok: bool = True

    def describe(self) -> str:
        return f"tell the call-out scripts that {self.action} of {self.uuid} {'succeeded' if self.ok else 'failed'}"

    def apply(self, env: Env) -> None:
        asked = env.handles.pop(self.key(), None)
        if asked == VETOED:
            return
        if not isinstance(asked, Callout):
            asked = Callout(env.host, self.device(), self.action)
        asked.post(self.ok)
        asked.notify()


def callout_steps(action: str, devices: list[Definition], force: bool = False) -> tuple[list[Step], list[Step]]:
    """The ``pre`` steps (before any change) and ``post`` steps (after the commit) of ``action`` on
    ``devices`` (the planner adds them when a script is installed)."""
    pre: list[Step] = [CalloutPre(action, d.uuid, d.parent, d.type_id, d.start, tuple(d.attrs), force) for d in devices]
    post: list[Step] = [CalloutPost(action, d.uuid, d.parent, d.type_id, d.start, tuple(d.attrs)) for d in devices]
    return pre, post


@step_kind
@dataclass(frozen=True)
class CalloutLive(_DeviceCallout):
    """mdevctl's ``modify --live``: the running device's new configuration handed to its versioned
    call-out script (event ``live``), which changes the device (:func:`callouts.live_modify`). Not
    undone: what the script changed is the script's (mdevctl has no inverse either)."""

    kind: ClassVar[str] = "mdev-callout-live"

    def describe(self) -> str:
        return f"hand the live change of running {self.uuid} to its call-out script"

    def inverse(self, env: Env) -> Step | None:
        return None

    def apply(self, env: Env) -> None:
        live_modify(env.host, self.device())


@step_kind
@dataclass(frozen=True)
class Refuse(Step):
    """A refusal the plan reaches only once its ``pre`` call-outs have run (mdevctl's order for a
    ``start`` it cannot do): raises ``message``; the rollback then sends ``post`` with ``failure``."""

    kind: ClassVar[str] = "mdev-refuse"
    message: str
    uuid: str

    def describe(self) -> str:
        return f"refuse: {self.message}"

    def inverse(self, env: Env) -> Step | None:
        return None

    def apply(self, env: Env) -> None:
        raise VgpukitError(self.message, value=self.uuid)
