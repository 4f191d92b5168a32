"""The change engine's CDI refresh (a derived-file refresher: the front end's composition,
``vgpukit.clikit.context``, hands it to the engine in ``Env.derived``), kept light: when the host has not
enabled spec generation it costs one missing file and imports nothing more."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..cdi_settings import load_settings
from ..errors import VgpukitError
from ..logs import logger

if TYPE_CHECKING:
    from ..engine import Env, Step

log = logger("vgpukit.cdi")


def derived_steps(env: Env) -> list[Step]:
    """The change engine's refresh (``Env.derived``): the spec files that no longer describe the host, when
    generation is enabled. Cheap when it is not (one missing file); spec collection is imported only
    then. A problem reading the settings or the host's devices never blocks the change that ran: it is
    said on stderr, every time, until fixed."""
    try:
        settings = load_settings(env.host)
        if settings is None:
            return []
        from .planner import Refresh, plan

        return plan(env.host, lambda: env.nvml, Refresh()).steps
    except VgpukitError as err:
        log.warning("CDI specs not refreshed: %s (fix it, or run 'vgpukit cdi disable')", err)
        return []
