"""Programs run through the host door (mdevctl's callout scripts, hooks): what a run did
(:class:`ProgramResult`, what :meth:`vgpukit.host.Host.run_program` returns) and the run itself (no
shell, output capped, a timeout). The door checks the program lies inside the root before it runs."""

from __future__ import annotations

import os

import msgspec


class ProgramResult(msgspec.Struct, frozen=True):
    """What a program run through the host door did: exit code (None when a signal ended it or it
    could not be started or timed out), its output (capped), and why it did not run when it did not."""

    rc: int | None
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # "not executable", "timed out after N s"... ("" when it ran to an exit)


MAX_PROGRAM_OUTPUT = 1024 * 1024


def run_program(
    argv: list[str], stdin: str | None, env: dict[str, str], timeout: float, cwd: str = "/"
) -> ProgramResult:
    """Run ``argv`` (no shell), ``stdin`` written then closed (an empty, closed stdin when None)."""
    import subprocess  # only commands that run programs pay for it

    try:
        proc = subprocess.run(
            argv,
            input=(stdin or "").encode(),
            capture_output=True,
            env={**os.environ, **env},
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return ProgramResult(None, error=f"timed out after {timeout:g} s")
    except OSError as exc:
        return ProgramResult(None, error=os.strerror(exc.errno) if exc.errno else str(exc))
    out = proc.stdout[:MAX_PROGRAM_OUTPUT].decode(errors="replace")
    err = proc.stderr[:MAX_PROGRAM_OUTPUT].decode(errors="replace")
    return ProgramResult(proc.returncode if proc.returncode >= 0 else None, out, err)
