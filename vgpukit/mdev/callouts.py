"""mdevctl's call-out and notifier scripts, run around vgpukit's mdev changes the way mdevctl 1.2 runs them.

Scripts live in ``/etc/mdevctl.d/scripts.d/callouts/`` and ``.../notifiers/`` (under the host root).
Each is run as ``SCRIPT -t TYPE -e EVENT -a ACTION -s STATE -u UUID -p PARENT`` with the device's
configuration (mdevctl's JSON, compact) on stdin:

* ``pre`` (state ``none``) before the change: the first call-out script that does not answer 2
  ("not my device type") is *the* script of this change; a non-zero answer vetoes the change
  (nothing is done, exit 1);
* ``post`` (state ``success``/``failure``) after it, to the same script (or, when none claimed the
  device in ``pre``, the first that claims it now); its answer is ignored;
* ``notify`` to every notifier script after that (or after a veto, state ``none``); answers ignored;
* ``get`` / action ``attributes`` (no stdin) when defining an active device, and when listing an
  active device that has no definition: the script prints the device's attributes as a JSON array.

Differences from mdevctl 1.2 (docs/mdev.md): scripts run in name order (mdevctl: directory order),
each has a time limit (:data:`TIMEOUT`), and a dry run runs none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ..engine import Env, session
from ..errors import VgpukitError
from ..host import Host
from ..hostio import ProgramResult
from ..inputs import load_json
from .mdevctl import parse_attrs
from .model import Definition

log = logging.getLogger("vgpukit.mdev")
T = TypeVar("T")

TIMEOUT = 120.0  # seconds one script may run (mdevctl waits forever)
NOT_MINE = 2  # "this script does not handle the device type"


class CalloutRefused(VgpukitError):
    """A ``pre`` call-out script answered non-zero: the change was not made."""

    kind = "callout-refused"


def config_json(d: Definition) -> str:
    """The device's configuration as mdevctl hands it to scripts (one line, mdevctl's key order)."""
    return json.dumps(d.to_mdevctl(), separators=(",", ":"), ensure_ascii=False)


def _scripts(host: Host, kind: str) -> list[Path]:
    base = host.mdevctl_scripts(kind)
    return [base / name for name in host.listdir(base)]


def active(host: Host) -> bool:
    """Whether any call-out or notifier script is installed (else nothing is run at all)."""
    return not host.dry_run and bool(_scripts(host, "callouts") or _scripts(host, "notifiers"))


def _say_stderr(host: Host, script: Path, res: ProgramResult) -> None:
    text = res.stderr or res.error
    for line in text.splitlines():
        clean = "".join(ch if ch.isprintable() else "?" for ch in line)[:500]
        log.warning("%s: %s", script.name, clean)


@dataclass
class Callout:
    """The scripts' view of one change to one device (mdevctl's per-command call-out state)."""

    host: Host
    device: Definition
    action: str  # start | stop | define | undefine | modify
    state: str = "none"
    script: Path | None = field(default=None)

    def _run(self, script: Path, event: str, action: str, stdin: str | None) -> ProgramResult:
        d = self.device
        args = ["-t", d.type_id, "-e", event, "-a", action, "-s", self.state, "-u", d.uuid, "-p", d.parent]
        return self.host.run_program(script, args, stdin, TIMEOUT)

    def _claim(self, event: str, action: str, stdin: str | None) -> tuple[Path, ProgramResult] | None:
        """The first call-out script that handles this device (answers other than 2)."""
        for script in _scripts(self.host, "callouts"):
            res = self._run(script, event, action, stdin)
            if res.rc is None and not res.error.startswith("timed out"):
                continue  # could not run it (not executable, a directory) or a signal ended it
            if res.rc != NOT_MINE:
                return script, res
        return None

    def pre(self) -> None:
        found = self._claim("pre", self.action, config_json(self.device))
        if found is None:
            return
        self.script, res = found
        _say_stderr(self.host, self.script, res)
        if res.rc != 0:
            why = f"return code {res.rc}" if res.rc is not None else res.error
            raise CalloutRefused(
                f"callout script {self.host.display(self.script)} refused to {self.action} {self.device.uuid} ({why})",
                value=self.device.uuid,
                hint="nothing was changed",
            )

    def post(self, ok: bool) -> None:
        self.state = "success" if ok else "failure"
        stdin = config_json(self.device)
        if self.script is not None:
            res = self._run(self.script, "post", self.action, stdin)
            _say_stderr(self.host, self.script, res)
            return
        found = self._claim("post", self.action, stdin)
        if found is not None:
            self.script = found[0]
            _say_stderr(self.host, *found)

    def notify(self) -> None:
        stdin = config_json(self.device)
        for script in _scripts(self.host, "notifiers"):
            res = self._run(script, "notify", self.action, stdin)
            if res.rc != 0:
                log.debug("notifier %s: %s", script.name, res.error or f"return code {res.rc}")


def guarded(env: Env, action: str, devices: Sequence[Definition], body: Callable[[], T]) -> T:
    """``body()`` (the change) with mdevctl's ``pre`` / ``post`` / ``notify`` scripts around it, for
    every device it changes, all under the host lock. A veto by any ``pre`` script stops everything
    before the first change (the devices already asked get ``post`` with ``failure``)."""
    if not devices or not active(env.host):
        return body()
    with session(env):
        calls = [Callout(env.host, d, action) for d in devices]
        asked: list[Callout] = []
        for c in calls:
            try:
                c.pre()
            except CalloutRefused:
                for other in asked:
                    other.post(False)
                    other.notify()
                c.notify()
                raise
            asked.append(c)
        try:
            result = body()
        except BaseException:
            for c in calls:
                c.post(False)
                c.notify()
            raise
        for c in calls:
            c.post(True)
            c.notify()
        return result


def get_attributes(host: Host, d: Definition, strict: bool) -> list[tuple[str, str]] | None:
    """The attributes a call-out script reports for active device ``d`` (``get`` event), None when no
    script handles it. A script failure raises when ``strict`` (define), else gives None (list)."""
    if not active(host):
        return None
    c = Callout(host, d, "attributes")
    found = c._claim("get", "attributes", None)
    if found is None:
        return None
    script, res = found
    shown = host.display(script)
    try:
        if res.rc != 0:
            _say_stderr(host, script, res)
            raise VgpukitError(f"callout script {shown} failed to get the attributes of {d.uuid}")
        text = res.stdout.strip()
        if not text:
            return None
        doc = load_json("[]" if text == "[{}]" else text, f"attributes from {shown}")
        return parse_attrs(doc, f"attributes from {shown}")
    except VgpukitError:
        if strict:
            raise
        return None
