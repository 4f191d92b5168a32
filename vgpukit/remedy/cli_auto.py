"""``vgpukit remediate --auto``: the remediation policy, unattended (docs/health.md, "Remediation").

Looks at the host every ``interval`` seconds (the policy's) and does what the policy says about each
device that needs something; prints one line per event (``--json``: one ``vgpukit.remedy-event/v1``
document a line), until interrupted or, with ``--for SECONDS``, until that time has passed (``--for 0``:
one look). The node agent runs it (``--for 0 --json``) and turns each event into a Kubernetes Event.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ..clikit.context import App
from ..clikit.output import json_doc
from ..errors import NotFound


def _policy(app: App, path: Path | None) -> object:
    from . import policy

    if path is not None:
        text = app.host.read_doc(path, "remediation policy", policy.MAX_BYTES, user_file=True)
        return policy.from_text(text or "", str(path))
    found = policy.load(app.host)
    if found is None:
        shown = app.host.display(policy.path(app.host))
        raise NotFound(
            f"no remediation policy: {shown} does not exist",
            hint="put a remediation: section in the host config and apply it, or give --policy FILE",
        )
    return found


def run(app: App, path: Path | None, seconds: float | None) -> None:
    from .auto import look
    from .policy import Policy

    policy = _policy(app, path)
    assert isinstance(policy, Policy)
    end = None if seconds is None else time.monotonic() + seconds
    while True:
        for ev in look(app.env, policy):
            if app.json:
                click.echo(json.dumps(json_doc("remedy-event", ev.as_dict()), separators=(",", ":")))
            else:
                said = f"needs a {ev.escalate}" in ev.message  # the escalation is said once on the line
                esc = f", needs a {ev.escalate}" if ev.escalate and not said else ""
                click.echo(f"{ev.device} ({ev.bdf}): {ev.what} {ev.outcome}{esc}: {ev.message}")
        if end is not None and time.monotonic() >= end:
            return
        pause = policy.interval if end is None else max(0.0, min(policy.interval, end - time.monotonic()))
        time.sleep(pause)
        if end is not None and time.monotonic() >= end:
            return
