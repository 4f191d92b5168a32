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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--mdevctl" in args:
        from ..mdev.cli_shim import fast_read

        rc = fast_read(args)
        if rc is not None:
            return rc
    if "--mig-parted" in args and "mig" in args[: args.index("--mig-parted")]:  # nvidia-mig-parted's command line
        import os

        from ..mig.cli_parted import vgpukit_args

        out = vgpukit_args(args, dict(os.environ))
        if isinstance(out, tuple):
            sys.stdout.write(out[1])
            sys.stderr.write(out[2])
            return out[0]
        args = out
    from .main import main as full

    return full(args)
