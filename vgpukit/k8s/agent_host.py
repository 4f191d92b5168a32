"""What the node agent listens to on its own host (:mod:`vgpukit.watch`, docs/engine.md "The watch").

* the host lock let go (its file closed by a writer, :data:`vgpukit.watch.loop.LOCK`): a config that
  found the host busy is tried again at once, if the lock is free;
* NVML events (kind ``nvml``, with remediation): the remediation policy looks (as on ``pci``, ``docs``);
* a device let go, a device changed, a change committed (kinds ``holders``, ``pci``, ``docs``): a
  config refused for devices in use is tried again when ``apply --dry-run`` says it would pass.

The watch keeps no views here (the agent reads nothing of the host itself: ``apply`` does); it only
tells. Whether the lock is free is a probe: the lock file opened read-only, an exclusive ``flock``
tried and dropped at once (no write, so no event of its own).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine.lock import lock_path
from ..host import Host
from ..logs import logger

if TYPE_CHECKING:
    from ..watch.loop import Watch
    from ..watch.touch import Touch

log = logger("vgpukit.k8s")
TOLD = {"lock", "holders", "pci", "docs", "nvml", "full"}  # kinds of change the agent is told of


class AgentHost:
    """The agent's :class:`~vgpukit.k8s.agent.HostEvents` over a running watch."""

    def __init__(self, host: Host, watch: Watch) -> None:
        self.host = host
        self.watch = watch
        self.tell: Callable[[set[str]], None] | None = None
        watch.listeners.append(self._touched)

    def _touched(self, touch: Touch) -> None:
        kinds = touch.kinds & TOLD
        if kinds and self.tell is not None:
            self.tell(set(kinds))

    def on_change(self, tell: Callable[[set[str]], None]) -> None:
        self.tell = tell

    def lock_free(self) -> bool:
        """Whether no process holds the host lock now."""
        path = Path(lock_path(self.host))
        try:
            self.host.resolve(path.parent)  # a state directory that leads outside the root: refused
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return True  # never locked
        except OSError as err:
            log.debug("the host lock cannot be probed (%s): trying anyway", err)
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            return err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN)  # held; another failure: try anyway
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        finally:
            os.close(fd)

    def close(self) -> None:
        self.watch.close()
