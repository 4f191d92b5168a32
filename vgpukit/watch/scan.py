"""A PCI snapshot kept for the life of a watch: functions are read again only when a change names them."""

from __future__ import annotations

from collections.abc import Iterable

from ..host import PHYSFN, Host
from ..pci import Scan


class WarmScan(Scan):
    """A :class:`~vgpukit.pci.Scan` the watch's model keeps between refreshes (an object of the model,
    never module state): :meth:`forget` drops what a change names, and each refresh reads through the
    fresh host it opened."""

    def forget(self, bdfs: Iterable[str], added: Iterable[str], host: Host) -> None:
        """Read ``bdfs`` again when next asked, with their PFs (a VF that comes or goes changes its PF's
        count and ``virtfnN`` links); ``added``: functions that appeared, whose PF is found by their link.
        The list of functions is read again."""
        self.host = host
        for bdf in set(bdfs) | set(added):
            dev = self._read.pop(bdf, None)
            self._entries.pop(bdf, None)
            pf = dev.physfn if dev is not None else None
            if pf is None and bdf in added:
                pf = host.link_name(host.pci_device(bdf, PHYSFN))
            if pf:
                self._read.pop(pf, None)
                self._entries.pop(pf, None)
        self._bdfs = None
        self._physical = None
        self._kinds = None
