"""The one executor: lock, journal, apply, verify, roll back; and recovery after a crash."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..errors import VgpukitError
from ..logs import logger
from ..words import plural
from . import journal as jr
from .env import Env
from .lock import host_lock
from .outcome import Observed, Outcome
from .step import AFTER, BEFORE, STAGES, Observing, Step, from_dict, to_entry

log = logger("vgpukit.engine")


@contextmanager
def session(env: Env) -> Iterator[list[str]]:
    """Hold the host lock for a whole command; first repair what an interrupted command left.

    Yields the lines describing what recovery did (empty when there was nothing to repair).
    Re-entrant for the same :class:`Env` (a command that calls the executor several times).
    """
    if env.locked:
        env.locked += 1
        try:
            yield []
        finally:
            env.locked -= 1
        return
    with host_lock(env.host, env.command, env.wait, env.progress):
        env.locked = 1
        try:
            yield recover(env)
        finally:
            env.locked = 0


def _as_list(inv: Step | list[Step] | None) -> list[Step]:
    if inv is None:
        return []
    return inv if isinstance(inv, list) else [inv]


def execute(env: Env, steps: Sequence[Step], *, derived: bool = True) -> Outcome:
    """Apply ``steps`` in order under the host lock: what was done, in words, and what each step
    observed (:class:`~vgpukit.engine.outcome.Outcome`).

    Before each step its inverse is journaled (fsync'd). When a step fails, the inverses run newest
    first and the error is re-raised, same class, with "rolled back the N steps done" (and any undo that
    failed named). In dry-run mode nothing runs: the plan is the steps' descriptions.

    After the steps succeed, the files derived from the host's state (``env.derived``: the CDI specs,
    when the host enabled them) are brought up to date in the same journaled run, so a failure there rolls
    the whole change back and a crash is repaired as one change.
    """
    steps = staged(steps)
    if env.host.dry_run:
        return Outcome(tuple(s.describe() for s in steps))
    if not steps:
        return Outcome()
    after = [s for s in steps if s.stage == AFTER]
    steps = steps[: len(steps) - len(after)]
    with session(env):
        book = jr.Journal(env.host, env.command)
        undo: list[Step] = []
        done: list[str] = []
        observed: list[Observed] = []
        changed = 0  # CHANGE steps done (BEFORE steps change nothing on the host)

        # what the next steps of a batch read before (their inverses journaled already)
        ahead: list[tuple[object, list[Step]]] = []

        def journal(group: Sequence[Step]) -> list[tuple[object, list[Step]]]:
            read = [_before(step, env) for step in group]
            book.add_all([to_entry(inv) for _, invs in read for inv in invs])
            return read

        def run(step: Step, rest: Sequence[Step]) -> None:
            nonlocal changed
            if ahead:
                before, invs = ahead.pop(0)
            else:  # a batch (steps in a row with the step's batch key): journaled at once, one fsync
                n = 1
                while step.batch() and n <= len(rest) and rest[n - 1].batch() == step.batch():
                    n += 1
                (before, invs), *later = journal([step, *rest[: n - 1]])
                ahead.extend(later)
            undo.extend(invs)
            back: object = None
            if isinstance(step, Observing):
                step.change(env, before)
                back = step.check(env, before)
            else:
                step.apply(env)
                step.verify(env)
            observed.append(Observed(step, before, back))
            done.append(step.describe())
            changed += step.stage != BEFORE
            if env.progress is not None and len(done) <= len(steps):
                env.progress.advance(done[-1])

        if env.progress is not None:
            env.progress.begin("applying", len(steps))
        try:
            for i, step in enumerate(steps):
                run(step, steps[i + 1 :])
            for step in derived_steps(env) if derived else []:
                run(step, ())
        except VgpukitError as exc:
            _, failures = _undo(env, undo, "rolling back")
            book.close(committed=False)
            n = changed
            note = f"rolled back the {plural(n, 'step')} done" if n else "nothing was changed"
            if failures:
                note += "; could NOT undo: " + "; ".join(f"{what}: {why.message}" for what, why in failures)
            raise type(exc)(
                f"{exc.message}; {note}",
                path=exc.path,
                device=exc.device,
                value=exc.value,
                errno=exc.errno,
                hint=exc.hint,
            ) from exc
        except BaseException:
            # KeyboardInterrupt / SystemExit: put back now, as a crash would be on the next command
            _undo(env, undo, "rolling back")
            book.close(committed=False)
            raise
        finally:
            if env.progress is not None:
                env.progress.end()
        book.close()
        for step in after:  # committed: what runs now cannot undo it (a failure is only said)
            try:
                step.apply(env)
                done.append(step.describe())
                observed.append(Observed(step))
            except VgpukitError as exc:
                log.warning("%s: %s", step.describe(), exc)
        return Outcome(tuple(done), tuple(observed))


def _before(step: Step, env: Env) -> tuple[object, list[Step]]:
    """What ``step`` reads before it acts (an :class:`Observing` step: its state; else None) and its
    inverse(s), read now."""
    if isinstance(step, Observing):
        before = step.read(env)
        return before, _as_list(step.undo(before))
    return None, _as_list(step.inverse(env))


def staged(steps: Sequence[Step]) -> list[Step]:
    """``steps`` in the order the executor runs them: BEFORE, CHANGE, AFTER (plan order within each)."""
    return [s for stage in STAGES for s in steps if s.stage == stage]


def derived_steps(env: Env) -> list[Step]:
    """The steps that bring every derived file (``env.derived``) in line with the host as it is now."""
    return [step for refresher in env.derived for step in refresher(env)]


def refresh(env: Env) -> list[str]:
    """Bring the derived files up to date under the host lock, for changes made outside the engine
    (the QoS daemon's tenants). What was done, in words."""
    if env.host.dry_run:
        return []
    with session(env):
        return list(execute(env, derived_steps(env), derived=False).done)


def _undo(env: Env, undo: list[Step], what: str) -> tuple[int, list[tuple[str, VgpukitError]]]:
    """Run the inverses ``undo`` newest first; how many ran, and each that failed (what, why)."""
    count: int = 0
    failures: list[tuple[str, VgpukitError]] = []
    if env.progress is not None and undo:
        env.progress.begin(what, len(undo))
    for inv in reversed(undo):  # each inverse reads the state it puts back (its apply)
        try:
            inv.apply(env)
            count += 1
        except VgpukitError as exc:  # keep undoing the rest; the error line says what stays behind
            log.info("undo failed: %s: %s", inv.describe(), exc)
            failures.append((inv.describe(), exc))
        if env.progress is not None:
            env.progress.advance(inv.describe())
    if env.progress is not None and undo:
        env.progress.end()
    return count, failures


def recover(env: Env) -> list[str]:
    """Put back what an interrupted command changed (its journaled inverses, newest first).

    Call with the host lock held. Returns one line per action; raises when an inverse fails, leaving
    the journal in place so the next command (or ``vgpukit recover``) tries again.
    """
    found = jr.pending(env.host)
    if found is None:
        return []
    steps = [from_dict(e) for e in found.entries]  # each entry names the module defining its step
    who = f"pid {found.pid}" if found.pid else "an unknown process"
    lines = [f"recovering an interrupted change by {who} ({found.command or 'unknown command'})"]
    env.recovering = True
    try:
        _, failures = _undo(env, steps, "recovering")
    finally:
        env.recovering = False
    if failures:
        from ..errors import HostIOError, StorageFault

        what, why = failures[0]
        more = f" (and {plural(len(failures) - 1, 'more')})" if len(failures) > 1 else ""
        again = "run 'vgpukit recover' (or 'vgpukit recover --discard' to drop the journal)"
        storage = isinstance(why, StorageFault)
        raise (StorageFault if storage else HostIOError)(
            f"could not repair the change interrupted by {who}: {what}: {why.message}{more}",
            path=why.path if storage else env.host.display(env.host.state_dir("journal")),
            errno=why.errno,
            hint=f"{why.hint.removesuffix(', then run the command again')}, then {again}"
            if storage and why.hint
            else f"fix the cause and {again}",
        )
    lines += [f"put back: {s.describe()}" for s in reversed(steps)]
    if not steps:
        lines.append("nothing had been changed yet")
    try:
        jr.discard(env.host)
    except VgpukitError as exc:
        raise type(exc)(
            f"{exc.message}; the interrupted change was put back, but its journal stays (the next command"
            " replays it again, which changes nothing)",
            path=exc.path,
            errno=exc.errno,
            hint=exc.hint,
        ) from exc
    # the host is as it was before the interrupted command: derived files follow it
    lines += [f"refreshed: {line}" for line in execute(env, derived_steps(env), derived=False).done]
    return lines
