"""mdevctl's call-out and notifier scripts, run around vgpukit's mdev changes the way mdevctl 1.4 runs them.

Scripts live in ``/usr/lib/mdevctl/scripts.d/`` and ``/etc/mdevctl.d/scripts.d/`` (``callouts/`` and
``notifiers/``, under the host root; the ``/usr/lib`` directory is asked first). Each is run as
``SCRIPT -t TYPE -e EVENT -a ACTION -s STATE -u UUID -p PARENT`` with the device's configuration
(mdevctl's JSON, compact) on stdin:

* *versioned* scripts first: each call-out script is asked ``-e get -a capabilities`` with
  :data:`PROVIDES` on stdin; the first that answers 0 with ``{"supports": {"version": N, "actions":
  [...], "events": [...]}}`` is *the* script of this device (the others are not asked); an event or
  action it does not list is refused (a ``pre`` one: a veto);
* otherwise ``pre`` (state ``none``) before the change: the first call-out script that does not answer
  2 ("not my device type") is *the* script of this change; a non-zero answer vetoes the change
  (nothing is done, exit 1), unless ``--force`` (then it is only logged);
* ``post`` (state ``success``/``failure``) after it, to the same script (or, when none claimed the
  device in ``pre``, the first that claims it now); its answer is ignored;
* ``notify`` to every notifier script after that (or after a veto, state ``none``); answers ignored;
* ``get`` / action ``attributes`` (no stdin) when defining an active device, and when listing an
  active device that has no definition: the script prints the device's attributes as a JSON array.

The changes run them as engine steps (:class:`~vgpukit.mdev.steps.CalloutPre`, ``CalloutPost``):
docs/mdev.md. Differences from mdevctl (docs/mdev.md): scripts run in name order within a directory,
each has a time limit (:data:`TIMEOUT`), and a dry run runs none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Unsupported, VgpukitError
from ..host import Host, ProgramResult
from ..inputs import load_json
from ..logs import logger
from .mdevctl import parse_attrs
from .model import Definition

if TYPE_CHECKING:
    pass

log = logger("vgpukit.mdev")

# Where the scripts are, in the order they are asked (mdevctl 1.4: the packaged directory first).
SCRIPT_DIRS = (("usr", "lib", "mdevctl", "scripts.d"), ("etc", "mdevctl.d", "scripts.d"))
TIMEOUT = 120.0  # seconds one script may run (mdevctl waits forever)
NOT_MINE = 2  # "this script does not handle the device type"
ACTIONS = ("start", "stop", "define", "undefine", "modify", "attributes", "capabilities")
EVENTS = ("pre", "post", "notify", "get", "live")
# What vgpukit tells a script it can do (the stdin of the ``get`` / ``capabilities`` question).
PROVIDES = {"provides": {"version": 2, "actions": list(ACTIONS), "events": list(EVENTS)}}


class CalloutRefused(VgpukitError):
    """A ``pre`` call-out script answered non-zero: the change was not made."""

    kind = "callout-refused"


NO_LIVE = "No callout script with version support found that supports live modify"  # mdevctl's words


def config_json(d: Definition) -> str:
    """The device's configuration as mdevctl hands it to scripts (one line, mdevctl's key order)."""
    return json.dumps(d.to_mdevctl(), separators=(",", ":"), ensure_ascii=False)


def _scripts(host: Host, kind: str) -> list[Path]:
    """Every script of ``kind`` (callouts | notifiers): the /usr/lib directory's, then /etc's, each in
    name order (a name in both directories is two scripts: the /usr/lib one is asked first)."""
    out: list[Path] = []
    for where in SCRIPT_DIRS:
        base = host.path(*where, kind)
        out += [base / name for name in host.listdir(base)]
    return out


def installed(host: Host) -> bool:
    """Whether any call-out or notifier script is installed (else plans have no call-out steps)."""
    return bool(_scripts(host, "callouts") or _scripts(host, "notifiers"))


def active(host: Host) -> bool:
    """Whether scripts are to be run now (installed, and not a dry run)."""
    return not host.dry_run and installed(host)


def _say_stderr(host: Host, script: Path, res: ProgramResult) -> None:
    text = res.stderr or res.error
    for line in text.splitlines():
        clean = "".join(ch if ch.isprintable() else "?" for ch in line)[:500]
        log.warning("%s: %s", script.name, clean)


def _ran(res: ProgramResult) -> bool:
    """Whether the script ran to an answer (not: could not run it, or a signal ended it)."""
    return res.rc is not None or res.error.startswith("timed out")


def _supports(text: str) -> dict[str, Any] | None:
    """A versioned script's answer to ``capabilities``: its ``supports`` object, else None."""
    try:
        doc = json.loads(text.strip().rstrip("\0"))
    except ValueError:
        return None
    sup = doc.get("supports") if isinstance(doc, dict) else None
    if not isinstance(sup, dict) or not isinstance(sup.get("version"), int):
        return None
    if not all(isinstance(sup.get(k), list) for k in ("actions", "events")):
        return None
    return sup


@dataclass
class Callout:
    """The scripts' view of one change to one device (mdevctl's per-command call-out state)."""

    host: Host
    device: Definition
    action: str  # start | stop | define | undefine | modify | attributes
    state: str = "none"
    script: Path | None = field(default=None)
    supports: dict[str, Any] | None = field(default=None)  # a versioned script's capabilities

    def _run(self, script: Path, event: str, action: str, stdin: str | None) -> ProgramResult:
        d = self.device
        args = ["-t", d.type_id, "-e", event, "-a", action, "-s", self.state, "-u", d.uuid, "-p", d.parent]
        return self.host.run_program(script, args, stdin, TIMEOUT)

    def versioned(self) -> bool:
        """Ask every call-out script ``capabilities``; the first that answers with a version claims
        the device (mdevctl 1.4). Whether one did."""
        stdin = json.dumps(PROVIDES, separators=(",", ":"))
        for script in _scripts(self.host, "callouts"):
            res = self._run(script, "get", "capabilities", stdin)
            if not _ran(res) or res.rc == NOT_MINE:
                continue
            sup = _supports(res.stdout) if res.rc == 0 else None
            if sup is not None:
                self.script, self.supports = script, sup
                return True
        return False

    def _refuses(self, event: str) -> str:
        """Why the versioned script of this device does not take ``event`` of this action ('' when it does)."""
        sup = self.supports or {}
        if self.action not in sup.get("actions", []):
            return f"it does not support action {self.action}"
        if event not in sup.get("events", []):
            return f"it does not support event {event}"
        return ""

    def _claim(self, event: str, action: str, stdin: str | None) -> tuple[Path, ProgramResult] | None:
        """The first call-out script that handles this device (answers other than 2)."""
        for script in _scripts(self.host, "callouts"):
            res = self._run(script, event, action, stdin)
            if not _ran(res):
                continue  # could not run it (not executable, a directory) or a signal ended it
            if res.rc != NOT_MINE:
                return script, res
        return None

    def pre(self, force: bool = False) -> None:
        """The ``pre`` event; CalloutRefused on a veto (with ``force``: logged, and the change goes on)."""
        stdin = config_json(self.device)
        why = ""
        if self.script is None and self.versioned():
            assert self.script is not None
        if self.script is not None:
            why = self._refuses("pre")
            if not why:
                res = self._run(self.script, "pre", self.action, stdin)
                _say_stderr(self.host, self.script, res)
                why = "" if res.rc == 0 else f"return code {res.rc}" if res.rc is not None else res.error
        else:
            found = self._claim("pre", self.action, stdin)
            if found is None:
                return
            self.script, res = found
            _say_stderr(self.host, self.script, res)
            why = "" if res.rc == 0 else f"return code {res.rc}" if res.rc is not None else res.error
        if not why:
            return
        text = f"callout script {self.host.display(self.script)} refused to {self.action} {self.device.uuid} ({why})"
        if force:
            log.warning("forcing %s of %s despite the call-out: %s", self.action, self.device.uuid, text)
            return
        raise CalloutRefused(text, value=self.device.uuid, hint="nothing was changed")

    def post(self, ok: bool) -> None:
        if self.script is None:
            self.versioned()  # asked as in pre (state none)
        self.state = "success" if ok else "failure"
        stdin = config_json(self.device)
        if self.script is not None:
            if self.supports is None or not self._refuses("post"):
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


def live_modify(host: Host, d: Definition) -> None:
    """mdevctl's ``modify --live``: hand running device ``d``'s new configuration to *the* versioned
    call-out script of the device (event ``live``, action ``modify``, state ``none``, the configuration
    on stdin), which changes the device; then the notifiers. Refused as mdevctl refuses: no versioned
    script (Unsupported), one that does not list the ``live`` event or the ``modify`` action, or one
    that answers non-zero (CalloutRefused)."""
    c = Callout(host, d, "modify")
    if not c.versioned():
        raise Unsupported(NO_LIVE, value=d.uuid, hint="the vendor's versioned call-out script changes a running mdev")
    assert c.script is not None
    shown = host.display(c.script)
    why = c._refuses("live")
    if not why:
        res = c._run(c.script, "live", "modify", config_json(d))
        _say_stderr(host, c.script, res)
        why = "" if res.rc == 0 else f"return code {res.rc}" if res.rc is not None else res.error
    if why:
        raise CalloutRefused(f"callout script {shown} did not make the live modify of {d.uuid} ({why})", value=d.uuid)
    c.notify()


def get_attributes(host: Host, d: Definition, strict: bool) -> list[tuple[str, str]] | None:
    """The attributes a call-out script reports for active device ``d`` (``get`` event), None when no
    script handles it. A script failure raises when ``strict`` (define), else gives None (list)."""
    if not active(host):
        return None
    c = Callout(host, d, "attributes")
    if c.versioned():
        assert c.script is not None
        if c._refuses("get"):
            return None
        found: tuple[Path, ProgramResult] | None = (c.script, c._run(c.script, "get", "attributes", None))
    else:
        found = c._claim("get", "attributes", None)
    if found is None:
        return None
    script, res = found
    shown = host.display(script)
    try:
        if res.rc != 0:
            _say_stderr(host, script, res)
            raise VgpukitError(f"callout script {shown} failed to get the attributes of {d.uuid}")
        text = res.stdout.strip().rstrip("\0")
        if not text:
            return None
        doc = load_json("[]" if text == "[{}]" else text, f"attributes from {shown}")
        return parse_attrs(doc, f"attributes from {shown}")
    except VgpukitError:
        if strict:
            raise
        return None
