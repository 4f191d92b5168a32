"""What the SR-IOV and binding planner reads of the host: each fact through the facades, at most once
per command (:class:`Facts`; the planner, :mod:`vgpukit.sriov.planner`, decides)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from .. import pci_kind
from ..exclusion import Exclusions
from ..holders import OpenFiles
from ..host import Host
from ..pci import PciDevice, Scan
from . import binding
from .model import PfInfo, read_pf
from .usage import User, libvirt_users, pci_users

if TYPE_CHECKING:
    from ..nvml import Nvml


class Facts:
    """The host as the planner sees it: each fact read through the facades at most once per command.
    ``libvirt_uri``: also count libvirt domains as users (when reachable). ``nvml``: the NVML facade the
    health fact reads (opened only when a rule asks; None or returning None: the PCI facts only)."""

    def __init__(
        self,
        host: Host,
        scan: Scan | None = None,
        files: OpenFiles | None = None,
        libvirt_uri: str | None = None,
        nvml: Callable[[], Nvml | None] | None = None,
    ) -> None:
        self.host = host
        self.nvml = nvml
        self.scan = scan or Scan(host)
        self.exclusions = Exclusions(host, nvml, self.scan)  # the one predicate (quarantine, health), read once
        self.files = files or OpenFiles(host)
        self.libvirt_uri = libvirt_uri
        self._domains: dict[str, list[User]] | None = None
        self._pfs: dict[str, PfInfo] = {}
        self._loaded: set[str] = set()

    def device(self, bdf: str) -> PciDevice:
        return self.scan.device(bdf)

    def header_type(self, bdf: str) -> int | None:
        return pci_kind.header_type(self.host, bdf)

    def driver(self, bdf: str) -> str | None:
        return binding.current_driver(self.host, bdf)

    def domains(self) -> dict[str, list[User]]:
        if self._domains is None:
            self._domains = libvirt_users(self.host, self.libvirt_uri) if self.libvirt_uri else {}
        return self._domains

    def users(self, bdf: str) -> list[User]:
        return [*pci_users(self.host, bdf, self.device(bdf).iommu_group, self.files), *self.domains().get(bdf, [])]

    def pf(self, bdf: str, alias: str | None = None, name: str | None = None) -> PfInfo:
        """The PF and its VFs (with their users); Unsupported when ``bdf`` has no SR-IOV."""
        if bdf not in self._pfs:
            pf = read_pf(self.host, bdf, self.files, alias=alias, name=name, scan=self.scan)
            doms = self.domains()
            if doms:
                vfs = tuple(replace(v, users=(*v.users, *doms.get(v.bdf, []))) for v in pf.vfs)
                pf = replace(pf, vfs=vfs)
            self._pfs[bdf] = pf
        return self._pfs[bdf]

    def require_driver(self, driver: str) -> None:
        if driver not in self._loaded:
            binding.require_driver(self.host, driver)
            self._loaded.add(driver)
