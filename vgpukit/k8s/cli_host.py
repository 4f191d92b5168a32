"""What the ``vgpukit k8s`` commands read of the host at every poll (a fresh ``App`` each time: nothing
cached from the previous poll) and how their long-running servers log: shared by ``cli.py`` and
``cli_dra.py``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..clikit.context import App

if TYPE_CHECKING:
    from ..engine.env import Env
    from ..host import Host
    from ..node.inventory import Inventory, Options
    from ..nvml import Nvml


def _options(host: Host, replicas: int) -> Options:
    """gpu-share replicas and the QoS daemon's effective config (tenants' shares and memory caps)."""
    from ..node.inventory import Options
    from ..qos.planner import offered

    return Options(replicas=replicas, qos=offered(host))  # not the tenants the daemon dropped


def _poller(app: App, replicas: int, vms: str | None = None) -> Callable[[], Inventory]:
    """Reads the host afresh at every poll (a new App: nothing cached); ``vms``: the KubeVirt mode's naming."""
    from ..node import inventory
    from . import kubevirt

    def open_host() -> tuple[Host, Nvml | None, Callable[[], None]]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, wiring=app.wiring)
        return fresh.host, fresh.nvml, fresh.close

    if vms:
        return kubevirt.Poller(open_host, vms)
    return inventory.Poller(open_host, lambda host: _options(host, replicas))


def _health(app: App) -> Callable[[], dict[str, str]]:
    """The unusable devices (BDF -> why) at every poll: the one look of the Kubernetes commands
    (:func:`vgpukit.k8s.cli_health.health`: the health layer's unusable devices, the VFs of an unusable PF,
    the quarantined devices)."""
    from .cli_health import health

    return health(app)


def _log(line: str) -> None:
    sys.stderr.write(f"vgpukit: {line}\n")
    sys.stderr.flush()


def _log_to_stderr(name: str) -> None:
    """The plugin's events (registration, publishing, failures) as ``vgpukit: ...`` lines on stderr."""
    import logging

    class Say(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            _log(record.getMessage())

    logger = logging.getLogger(name)
    if not any(type(h).__name__ == "Say" for h in logger.handlers):
        logger.addHandler(Say())
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _dra_opener(app: App) -> Callable[[], tuple[Env, Callable[..., Inventory], Callable[[], None]]]:
    """A fresh host, NVML and engine environment for each kubelet call (nothing cached between calls)."""
    from ..node.inventory import Options, collect

    def open_host() -> tuple[Env, Callable[..., Inventory], Callable[[], None]]:
        fresh = App(root=app.root, sim_dir=app.sim_dir, command="vgpukit k8s dra-plugin", wiring=app.wiring)
        env = fresh.env

        def inventory(only: frozenset[str] | None = None) -> Inventory:
            return collect(fresh.host, fresh.nvml, Options(replicas=1), only=only)

        return env, inventory, fresh.close

    return open_host
