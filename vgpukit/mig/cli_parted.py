"""``nvidia-mig-parted``'s command line, done by vgpukit: ``vgpukit mig --mig-parted ARGS`` (what the
shim ``templates/bin/nvidia-mig-parted`` runs; docs/mig.md, "The nvidia-mig-parted command").

mig-parted's clients call it as ``nvidia-mig-parted [-d|--debug] COMMAND [OPTIONS]``: the GPU
operator's ``reconfigure-mig.sh`` (``assert --valid-config -f F -c C``, ``assert``, ``assert
--mode-only``, ``-d apply --mode-only``, ``-d assert --mode-only``, ``-d apply``) and the
systemd service's ``service.sh`` (``generate-config -f FILE``, ``assert --mode-only``, ``apply
--mode-only --skip-reset``, ``apply --mode-only``, ``apply``, ``export``, the file, config and hooks
from ``MIG_PARTED_*``). ``apply``, ``assert`` and ``export`` are ``vgpukit mig``'s (which already
take mig-parted's options and environment); this module only turns the global options and the
environment variables vgpukit's commands do not read into vgpukit's arguments. ``generate-config``,
``checkpoint`` and ``restore`` are not done (exit 5, one line): ``service.sh`` then uses its shipped
``config-default.yaml``, as it does when generation fails.
"""

from __future__ import annotations

from .. import __version__

COMMANDS = ("apply", "assert", "export")
NOT_DONE = ("generate-config", "checkpoint", "restore")
TRUE = ("1", "t", "true")  # what Go's strconv.ParseBool takes as true (in any case)
SEE = " (see: nvidia-mig-parted --help)"
USAGE = """usage: nvidia-mig-parted [-d|--debug] COMMAND [OPTIONS]

vgpukit's drop-in for NVIDIA's mig-parted (docs/mig.md): the same config and hooks files, options
and MIG_PARTED_* environment.

commands:
  apply    apply a config: -f FILE -c NAME [-k HOOKS] [-m|--mode-only] [-s|--skip-reset]
  assert   exit 0 when the GPUs match: -f FILE -c NAME [-m|--mode-only] [-a|--valid-config]
  export   print the current layout: [-l LABEL] [-o yaml|json]
"""


def _has(args: list[str], *names: str) -> bool:
    return any(a in names or any(a.startswith(n + "=") for n in names if n.startswith("--")) for a in args)


def translate(args: list[str], env: dict[str, str]) -> list[str] | tuple[int, str, str]:
    """vgpukit's arguments for mig-parted's ``args`` (after ``nvidia-mig-parted``), or what to answer
    without running anything: (exit code, stdout, stderr)."""
    debug = env.get("MIG_PARTED_DEBUG", "").lower() in TRUE
    rest = list(args)
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag in ("-d", "--debug"):
            debug = True
        elif flag in ("-h", "--help"):
            return 0, USAGE, ""
        elif flag in ("-v", "--version"):
            return 0, f"nvidia-mig-parted version vgpukit {__version__}\n", ""
        else:
            return 2, "", f"vgpukit: error: nvidia-mig-parted: unknown global option {flag!r}{SEE}\n"
    if not rest or rest[0] in ("help", "h"):
        return (0, USAGE, "") if rest else (2, "", USAGE)
    command, options = rest[0], rest[1:]
    if command in NOT_DONE:
        return (
            5,
            "",
            (
                f"vgpukit: error: nvidia-mig-parted {command} is not done by vgpukit's drop-in "
                '(docs/mig.md, "The nvidia-mig-parted command")\n'
            ),
        )
    if command not in COMMANDS:
        return 2, "", f"vgpukit: error: nvidia-mig-parted: no such command {command!r}{SEE}\n"
    valid = env.get("MIG_PARTED_VALID_CONFIG", "").lower() in TRUE
    if command == "assert" and valid and not _has(options, "-a", "--valid-config"):
        options.append("--valid-config")
    if command == "export" and env.get("MIG_PARTED_OUTPUT_FORMAT") and not _has(options, "-o", "--output-format"):
        options += ["--output-format", env["MIG_PARTED_OUTPUT_FORMAT"]]
    return (["--debug"] if debug else []) + ["mig", command, *options]


def vgpukit_args(argv: list[str], env: dict[str, str]) -> list[str] | tuple[int, str, str]:
    """``vgpukit [GLOBAL...] mig --mig-parted ARGS`` as vgpukit's own arguments (its global options,
    ``--sim DIR`` say, kept in front), or the answer to give without running a command."""
    at = next(i for i in range(1, len(argv)) if argv[i] == "--mig-parted" and argv[i - 1] == "mig")
    out = translate(argv[at + 1 :], env)
    return out if isinstance(out, tuple) else [*argv[: at - 1], *out]
