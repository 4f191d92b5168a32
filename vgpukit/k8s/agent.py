"""``vgpukit k8s node-agent``: apply the named host config that this Node's label selects.

Like NVIDIA's mig-manager, the agent watches its own Node (``GET /api/v1/nodes/NAME``, then
``GET /api/v1/nodes?fieldSelector=metadata.name=NAME&watch=true``) with the official kubernetes
client. When ``vgpukit.io/config`` names a config that is not applied yet it

1. labels the node ``vgpukit.io/config.state=pending``,
2. runs ``vgpukit apply -f FILE -c NAME --json`` (FILE: the fleet file mounted from a ConfigMap),
3. labels ``success`` or ``failed`` and puts apply's one-line message into the annotation
   ``vgpukit.io/config.message``.

Exit codes follow apply's contract (docs/fleet.md): 0 success; 4 with ``error`` = ``busy`` (another
vgpukit command holds the host lock) stays ``pending`` and is tried again when the host lock is
released (the agent listens to its host, :mod:`.agent_host`; without, after ``RETRY_S``); 4 with
``in-use`` (the change would destroy devices in use) is ``failed`` with the message
``refused: ...``: the agent drains nothing, it leaves that to the operator, and tries again when the
host changes (a device let go) and ``apply --dry-run`` says it would pass; 6 (a device the health
layer finds unusable was left alone, everything else applied) is ``partial`` with the message
``left alone: ...``; anything else is ``failed``. Both labels and the annotation go in one
``PATCH /api/v1/nodes/NAME``.

The agent also runs the remediation policy the config installs (docs/health.md, "Remediation"): one
look (``vgpukit remediate --auto --for 0 --json``, :class:`RemedyRunner`) at start, then whenever its
host says a device's health may have changed (:data:`REMEDY_CHANGES`: NVML events, kernel uevents, a
change committed such as a quarantine or a release, a file under ``/etc/vgpukit`` such as the policy),
and at the latest every ``remedy_s`` seconds (a safety net for what says nothing: a correctable AER
count), each event a Kubernetes Event on the Node (``VgpukitRemediation``, ``VgpukitEscalation``: a device
that needs a reboot, ``VgpukitRemediationFailed``).
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import HostIOError, InvalidInput, VgpukitError
from ..stopping import Bell, Stop, wait_woken
from ..words import plural

CONFIG_LABEL = "vgpukit.io/config"
STATE_LABEL = "vgpukit.io/config.state"
MESSAGE_ANNOTATION = "vgpukit.io/config.message"
PENDING, SUCCESS, FAILED, PARTIAL = "pending", "success", "failed", "partial"
EXIT_BUSY = 4  # apply's "refused, nothing changed" (error: busy | in-use | no-capacity | conflict)
EXIT_SKIPPED = 6  # apply's "done, except the devices named" (unusable devices left alone)
RETRY_S = 10.0  # a busy host tried again (without host events), the API server read again after an error
LONGEST_S = 300.0  # with host events: the longest wait for a busy host's lock to be released
HOST_CHANGES = {"holders", "pci", "docs"}  # a device let go, a device changed, a change committed
REMEDY_CHANGES = {"nvml", "pci", "docs", "full"}  # a device's health may have changed: the policy looks
REMEDY_S = 300.0  # with host events: the longest between two looks of the remediation policy
WATCH_TIMEOUT_S = 300  # the server ends a watch after this long; the agent reads the node and watches again
APPLY_TIMEOUT_S = 1800


@dataclass(frozen=True)
class ApplyOutcome:
    state: str  # pending | success | failed
    message: str
    in_use: bool = False  # refused because devices are in use: it may pass once the host changes


class HostEvents(Protocol):
    """What the agent hears from its host (:mod:`.agent_host`): changes, and whether the host lock is free."""

    def on_change(self, tell: Callable[[set[str]], None]) -> None: ...

    def lock_free(self) -> bool: ...


class ApplyRunner:
    """Runs ``vgpukit apply`` as a subprocess, with this agent's --root/--sim."""

    def __init__(self, command: str, config_file: Path, root: Path | None = None, sim_dir: Path | None = None) -> None:
        self.command = command
        self.config_file = config_file
        self.where = ["--sim", str(sim_dir)] if sim_dir else ["--root", str(root)] if root else []

    def argv(self, name: str) -> list[str]:
        return [self.command, *self.where, "apply", "-f", str(self.config_file), "-c", name, "--json"]

    def __call__(self, name: str, dry_run: bool = False) -> ApplyOutcome:
        argv = self.argv(name) + (["--dry-run"] if dry_run else [])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=APPLY_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return ApplyOutcome(FAILED, f"could not run {self.command} apply: {type(err).__name__}")
        return outcome(proc.returncode, proc.stdout)

    def check(self, name: str) -> ApplyOutcome:
        """What ``apply`` would answer now (``--dry-run``: the host lock not taken, nothing changed)."""
        return self(name, dry_run=True)


def outcome(code: int, stdout: str) -> ApplyOutcome:
    """apply's exit code and JSON document -> the state to report (see the module doc)."""
    try:
        doc = json.loads(stdout) if stdout.strip() else {}
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    message = str(doc.get("message") or "")[:500]
    if code == 0:
        plan = doc.get("plan")
        steps = len(plan) if isinstance(plan, list) else 0
        return ApplyOutcome(SUCCESS, f"applied {plural(steps, 'step')}" if doc.get("changed") else "nothing to change")
    if code == EXIT_BUSY and doc.get("error") == "busy":
        return ApplyOutcome(PENDING, f"waiting: {message or 'host busy'}")
    if code == EXIT_BUSY and doc.get("error") == "in-use":
        return ApplyOutcome(FAILED, f"refused: {message or 'devices in use'}", in_use=True)
    skipped = doc.get("skipped")
    if code == EXIT_SKIPPED and isinstance(skipped, list) and skipped and isinstance(skipped[0], dict):
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        return ApplyOutcome(PARTIAL, f"left alone: {str(skipped[0].get('message') or '')[:400]}{more}")
    return ApplyOutcome(FAILED, message or f"apply exited with {code}")


class RemedyRunner:
    """Runs one look of the remediation policy (``vgpukit remediate --auto --for 0 --json``) as a
    subprocess, with this agent's --root/--sim: the events it reports, one JSON document a line. No
    policy installed (exit 3): no events (the host config has no ``remediation:`` section)."""

    def __init__(self, command: str, root: Path | None = None, sim_dir: Path | None = None) -> None:
        self.command = command
        self.where = ["--sim", str(sim_dir)] if sim_dir else ["--root", str(root)] if root else []

    def argv(self) -> list[str]:
        return [self.command, *self.where, "remediate", "--auto", "--for", "0", "--json"]

    def __call__(self) -> list[dict[str, Any]]:
        try:
            proc = subprocess.run(self.argv(), capture_output=True, text=True, timeout=APPLY_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return [{"outcome": "failed", "message": f"could not run remediate --auto: {type(err).__name__}"}]
        if proc.returncode == 3:
            return []
        out = []
        for line in proc.stdout.splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("schema") == "vgpukit.remedy-event/v1":
                out.append(doc)
        if proc.returncode and not out:
            out.append({"outcome": "failed", "message": f"remediate --auto exited with {proc.returncode}"})
        return out


def event_body(node: str, ev: dict[str, Any]) -> dict[str, Any]:
    """A core/v1 Event on this Node for one remediation event (Warning unless it went well)."""
    import datetime

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    outcome = str(ev.get("outcome", ""))
    reason = {"escalated": "VgpukitEscalation", "failed": "VgpukitRemediationFailed"}.get(outcome, "VgpukitRemediation")
    what = str(ev.get("what", "remediate"))
    device = str(ev.get("device", "?"))
    esc = f" needs a {ev['escalate']}:" if ev.get("escalate") else ""
    message = f"{device} ({ev.get('bdf', '?')}): {what} {outcome}:{esc} {ev.get('message', '')}".strip()[:1000]
    return {
        "metadata": {"generateName": f"{node}.vgpukit-remedy-"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "reason": reason,
        "message": message,
        "type": "Normal" if outcome == "done" else "Warning",
        "source": {"component": "vgpukit-node-agent", "host": node},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def kube_api(kubeconfig: str | None) -> Any:
    """CoreV1Api from the in-cluster service account, else the kubeconfig file."""
    from kubernetes import client

    load_kube_config(kubeconfig)
    return client.CoreV1Api()


def load_kube_config(kubeconfig: str | None) -> None:
    """Configure the official client: the in-cluster service account, else the kubeconfig file."""
    from kubernetes import config

    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
    except Exception as err:  # the client's own errors name the file's content at times: not quoted
        if not kubeconfig:
            where = "no in-cluster service account and no ~/.kube/config"
        elif (
            isinstance(err, FileNotFoundError) or not Path(kubeconfig).exists()
        ):  # the client's own file, not the host's
            where = f"--kubeconfig {kubeconfig}: no such file"
        elif isinstance(err, IsADirectoryError) or Path(kubeconfig).is_dir():
            where = f"--kubeconfig {kubeconfig}: is a directory"
        elif isinstance(err, PermissionError):
            where = f"--kubeconfig {kubeconfig}: permission denied"
        elif isinstance(err, config.ConfigException):  # a kubeconfig, without a usable context, cluster or user
            where = f"--kubeconfig {kubeconfig}: no usable current context, cluster and user in it"
        else:  # the client read something else (a TypeError, an AttributeError on a YAML that is not one)
            where = f"--kubeconfig {kubeconfig}: not a kubeconfig file (YAML with clusters, contexts and users)"
        raise InvalidInput(f"cannot load the Kubernetes client configuration: {where}") from None


def api_error(err: Exception) -> VgpukitError:
    """One line for an API call that failed (the server's status, or the connection error's kind)."""
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", None)
    what = f"HTTP {status} {reason}" if status else type(err).__name__
    return HostIOError(f"Kubernetes API: {what}"[:200])


class Agent:
    def __init__(
        self,
        api: Any,
        node: str,
        apply: Callable[[str], ApplyOutcome],
        log: Callable[[str], None],
        retry_s: float = RETRY_S,
        host: HostEvents | None = None,
        check: Callable[[str], ApplyOutcome] | None = None,
    ) -> None:
        self.retry_s = retry_s
        self.watch_timeout_s = WATCH_TIMEOUT_S
        self.api = api
        self.node = node
        self.apply = apply
        self.log = log
        self.host = host  # None: a busy host is tried again every retry_s, a refused config never
        self.check = check  # apply --dry-run: whether a refused config would pass now
        self.longest_s = LONGEST_S  # with host events: the longest wait for a busy host's lock
        self.done: str | None = None  # the config whose outcome (success / failed) was reported last
        self.remedy: Callable[[], list[dict[str, Any]]] | None = None  # one look of the remediation policy
        self.remedy_s = REMEDY_S  # the longest between two looks (without host events: the period)

    def labels(self, obj: Any) -> dict[str, str]:
        return dict(obj.metadata.labels or {})

    def current_config(self) -> str | None:
        node = self.api.read_node(self.node)
        labels = self.labels(node)
        if labels.get(STATE_LABEL) == SUCCESS and self.done is None:
            self.done = labels.get(CONFIG_LABEL)  # applied by an earlier run of the agent
        return labels.get(CONFIG_LABEL)

    def report(self, state: str, message: str) -> None:
        body = {"metadata": {"labels": {STATE_LABEL: state}, "annotations": {MESSAGE_ANNOTATION: message}}}
        self.api.patch_node(self.node, body)
        self.log(f"{self.node}: {STATE_LABEL}={state}: {message}")

    def reconcile(self, name: str | None) -> ApplyOutcome | None:
        """Apply ``name`` unless its outcome is reported already (a failed config is tried again when
        the label changes, or when the agent restarts); None when there was nothing to do."""
        if not name or name == self.done:
            return None
        self.report(PENDING, f"applying {name}")
        result = self.apply(name)
        self.report(result.state, result.message)
        if result.state != PENDING:
            self.done = name
        return result

    def remediate(self) -> int:
        """One look of the remediation policy; each event becomes a Kubernetes Event on this Node. How many."""
        if self.remedy is None:
            return 0
        events = self.remedy()
        for ev in events:
            self.api.create_namespaced_event("default", event_body(self.node, ev))
            self.log(f"{self.node}: remediation: {event_body(self.node, ev)['message']}")
        return len(events)

    def _remedy_loop(self, stop: Stop, woken: Bell) -> None:
        while not stop.is_set():
            try:
                self.remediate()
            except Exception as err:  # the API server went away: log one line, try at the next look
                self.log(f"{self.node}: remediation events: {api_error(err)}")
            wait_woken(stop, woken, self.remedy_s)  # a health change rings it; a burst is one look more

    def run(self, stop: Stop) -> None:
        """Reconcile, then follow the node's label until ``stop``. A busy host is tried again when its
        lock is released, a config refused for devices in use when the host changes and a dry run says
        it would pass (with ``host``; without: a busy host every ``retry_s``, a refused config never).
        With a remediation runner, its policy looks at the host when the host says a device's health may
        have changed, and at the latest every ``remedy_s`` seconds."""
        inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        stop.then(lambda: inbox.put(("stop", None)), name="vgpukit-agent-stop")  # put: safe from anywhere
        remedy = Bell()
        if self.remedy is not None:
            threading.Thread(target=self._remedy_loop, args=(stop, remedy), daemon=True, name="remediation").start()
        if self.host is not None:

            def tell(kinds: set[str]) -> None:
                inbox.put(("host", kinds))
                if kinds & REMEDY_CHANGES:
                    remedy.ring()

            self.host.on_change(tell)
        threading.Thread(target=self._follow, args=(stop, inbox), daemon=True, name="vgpukit-agent-node").start()
        name: str | None = None
        waiting: ApplyOutcome | None = None  # the last outcome, while the host may still change it
        while not stop.is_set():
            try:
                what, value = inbox.get(timeout=self._patience(waiting))
            except queue.Empty:
                what, value = "timer", None
            if what == "stop":
                return
            if what == "label":
                if value == name and waiting is not None:
                    continue  # the node changed, not its label: the host decides when to try again
                name, result = value, self.reconcile(value)
            elif name is None or waiting is None or not self._again(waiting, name, what, value):
                continue
            else:
                if waiting.in_use:
                    self.done = None  # a dry run says it would pass now
                result = self.reconcile(name)
            if result is not None:
                waiting = result if result.state == PENDING or result.in_use else None

    def _patience(self, waiting: ApplyOutcome | None) -> float | None:
        if waiting is None or waiting.state != PENDING:
            return None  # until the label or the host changes
        return self.retry_s if self.host is None else self.longest_s

    def _again(self, waiting: ApplyOutcome, name: str, what: str, kinds: set[str] | None) -> bool:
        """Whether to try the waiting config again now (``what``: ``host`` with its kinds of change, or ``timer``)."""
        if waiting.state == PENDING:
            return what == "timer" or self.host is None or self.host.lock_free()
        if not waiting.in_use or what != "host" or self.check is None or not (kinds or set()) & HOST_CHANGES:
            return False
        return self.check(name).state == SUCCESS

    def _follow(self, stop: Stop, inbox: queue.SimpleQueue[tuple[str, Any]]) -> None:
        """The node's label, read then watched (again after each watch ends), into ``inbox``."""
        from kubernetes import watch

        while not stop.is_set():
            try:
                inbox.put(("label", self.current_config()))
                w = watch.Watch()
                field = f"metadata.name={self.node}"
                for event in w.stream(self.api.list_node, field_selector=field, timeout_seconds=self.watch_timeout_s):
                    if stop.is_set():
                        w.stop()
                        break
                    obj = event.get("object")
                    if obj is not None and event.get("type") in ("ADDED", "MODIFIED"):
                        inbox.put(("label", self.labels(obj).get(CONFIG_LABEL)))
            except Exception as err:  # the API server went away: log one line, try again
                self.log(f"{self.node}: {api_error(err)}")
                stop.wait(self.retry_s)
        inbox.put(("stop", None))
