"""The mdev planner's exclusion rule: no mdev goes on a parent the one predicate leaves alone (a
quarantined device or one the health layer finds unusable, or a VF carved from one:
:class:`vgpukit.exclusion.Exclusions`). A parent named by the request is refused (exit 6); the
planner's own choice among parents skips the excluded ones.
"""

from __future__ import annotations

from ..errors import DeviceUnusable
from ..exclusion import Exclusions
from ..host import BDF_RE


def excluded(ex: Exclusions | None, parent: str) -> DeviceUnusable | None:
    """Why no mdev goes on ``parent`` (None: plan it); named ``gpu0 (0000:3b:00.0)`` as every door names it."""
    if ex is None or ex.host is None or not BDF_RE.match(parent) or ex.check_carved(parent, parent) is None:
        return None
    from ..naming import aliases
    from ..pci import Scan

    ex.scan = ex.scan or Scan(ex.host)
    alias = aliases(ex.scan, light=True).get(parent)
    return ex.check_carved(parent, f"{alias} ({parent})" if alias else parent)


def refuse_excluded(ex: Exclusions | None, parents: list[str]) -> list[str]:
    """``parents`` without the excluded ones; the first one's refusal when that leaves none."""
    left = [p for p in parents if excluded(ex, p) is None]
    if parents and not left:
        refused = excluded(ex, parents[0])
        assert refused is not None
        raise refused
    return left
