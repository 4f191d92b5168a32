"""The ``vgpukit`` command's entry point (pyproject ``[project.scripts]``, ``python -m vgpukit``).

mdevctl's read verbs (``vgpukit mdev --mdevctl list|types``, what ``templates/bin/mdevctl`` runs and
libvirt calls each time ``/etc/mdevctl.d`` changes) are answered without loading click when their
arguments are the plain forms :mod:`vgpukit.mdev.cli_shim` knows; everything else, and any error,
goes to the click command line (:func:`vgpukit.cli.main.main`), which repeats the read and reports
it as usual (docs/decisions.md, "Start-up"). ``vgpukit mig --mig-parted ARGS`` (what
``templates/bin/nvidia-mig-parted`` runs) is mig-parted's command line, turned into ``vgpukit mig``'s
by :mod:`vgpukit.mig.cli_parted`.
"""

from __future__ import annotations

import sys

EXIT_PIPE = 141  # what a shell reports for a command killed by SIGPIPE (128 + 13), as ls or cat in a pipe


def main(argv: list[str] | None = None) -> int:
    """The command; its output's reader gone (``vgpukit sriov list | head -1``) ends it quietly, exit 141,
    as other command-line tools (click's own answer, exit 1 silently, would read as a failure)."""
    try:
        rc = _main(argv)
        sys.stdout.flush()  # here, not at interpreter exit (where a gone reader makes Python exit 120)
        return rc
    except BrokenPipeError:
        return _reader_gone()
    except SystemExit:
        if _stdout_closed():  # click caught the EPIPE and exits 1
            return _reader_gone()
        raise


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader is gone (poll reports an error on the write end)."""
    import os
    import select
    import stat

    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _fd, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


def _reader_gone() -> int:
    """Exit quietly: what is still buffered for standard output goes nowhere (no second EPIPE at exit)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_PIPE


def _msgspec_without_typing_extensions() -> None:
    """Load msgspec (the value types) without ``typing_extensions``, which it tries first and replaces by
    ``typing``'s own ``get_type_hints`` when absent (the same on Python 3.11 for vgpukit's types): that
    import, with the ``inspect`` it pulls, is about a fifth of the mdevctl shim's 60 ms (docs/decisions.md,
    "Start-up"). The module is hidden only while msgspec loads; later imports find it as usual."""
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules:
        return
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # an ImportError for msgspec's try
    try:
        import msgspec  # noqa: F401
    finally:
        if sys.modules.get("typing_extensions", 0) is None:
            del sys.modules["typing_extensions"]


def _main(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--mdevctl" in args:
        _msgspec_without_typing_extensions()
        from ..mdev.cli_shim import fast_read

        rc = fast_read(args)
        if rc is not None:
            return rc
    shim = ""
    if "--mig-parted" in args and "mig" in args[: args.index("--mig-parted")]:  # nvidia-mig-parted's command line
        import os

        from ..mig.cli_parted import vgpukit_args

        out = vgpukit_args(args, dict(os.environ))
        if isinstance(out, tuple):
            sys.stdout.write(out[1])
            sys.stderr.write(out[2])
            return out[0]
        args, shim = out, "--mig-parted"
    from .main import main as full

    return full(args, shim)
