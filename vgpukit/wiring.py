"""The composition: which kernel, which NVML and which derived files a command works with.

A command's :class:`~vgpukit.clikit.context.App` is given a :class:`Wiring` by whoever starts the
command (the ``vgpukit`` group, the mdevctl shim, the Kubernetes commands): on a simulated host
(``--sim DIR``) the simulated kernel and NVML, otherwise the real host's sysfs and pynvml; after every
change the CDI specs are kept current. The click toolkit knows none of these parts: it asks its wiring,
so the simulator (whose own commands use the toolkit) and the CDI area sit below it, never above.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import NotFound
from .host import Host

if TYPE_CHECKING:
    from .engine import Env
    from .nvml import Nvml
    from .watch.loop import Kernel


class Wiring:
    """The parts of this product a command is wired to (stateless: one per command line is enough)."""

    def open_host(self, root: Path | None, sim_dir: Path | None, dry_run: bool, wait: float | None = None) -> Host:
        """``wait``: how long the simulated kernel waits for its own lock (the command's --wait)."""
        if sim_dir is not None:
            from .sim.kernel import SimKernel  # opening it completes or undoes a reaction cut short
            from .sim.state import check_sim_dir

            check_sim_dir(sim_dir)
            kernel = SimKernel(sim_dir, wait)
            return Host(sim_dir, kernel=kernel, dry_run=dry_run, watch=kernel.changing)
        if root is not None and not root.is_dir():
            raise NotFound(f"--root {root}: no such directory", path=str(root))
        return Host(root or Path("/"), dry_run=dry_run)

    def open_nvml(self, sim_dir: Path | None) -> Nvml | None:
        """The simulated driver on a simulated host, else pynvml (None where no driver is loaded)."""
        if sim_dir is not None:
            from .sim.nvml import SimNvml

            return SimNvml(sim_dir)
        from .nvml.real import RealNvml

        return RealNvml.try_open()

    def open_uevents(self, host: Host, sim_dir: Path | None) -> Kernel | None:
        """Where kernel uevents come from: the simulated kernel's feed on a simulated host, the netlink
        socket where the root's /sys is the running kernel's, else none (a copied tree under --root)."""
        if sim_dir is not None:
            from .sim.uevents import FeedReader

            return FeedReader(sim_dir)
        from .host.notify import live_sysfs

        if not live_sysfs(host):
            return None
        from .errors import HostIOError
        from .watch.netlink import NetlinkReader

        try:
            return NetlinkReader()
        except HostIOError as err:
            from .logs import logger

            logger("vgpukit.watch").warning("%s: changes are seen by inotify and the safety net only", err)
            return None

    def derived(self) -> tuple[Callable[[Env], list[Any]], ...]:
        """The files kept current after every change: the CDI specs."""
        from .cdi.refresh import derived_steps

        return (derived_steps,)
