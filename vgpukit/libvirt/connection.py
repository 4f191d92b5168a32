"""libvirt behind one facade: connection handling, lazy import, libvirt errors mapped to vgpukit errors.

Every libvirt call of vgpukit goes through :class:`Libvirt` (attach/detach, ``sriov``/``mdev``
in-use checks, QoS suspend/resume of domain tenants). ``import libvirt`` happens only in
:func:`connect`, so hosts without libvirt-python still run the rest of vgpukit. libvirt's default
error handler (which prints to stderr) is silenced; every failure surfaces as one vgpukit error
naming the URI or the domain. Domain XML is read and written with :mod:`vgpukit.libvirt.domain`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import Conflict, HostIOError, InvalidInput, NotFound, Unsupported, VgpukitError
from ..extras import message, require

DEFAULT_URI = "qemu:///system"
AFFECT_LIVE = 1
AFFECT_CONFIG = 2
STATE_PAUSED = 3  # VIR_DOMAIN_PAUSED
INSTALL_HINT = message("libvirt")


def import_libvirt() -> Any:
    libvirt = require("libvirt")
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def _map(lv: Any, exc: Exception, what: str) -> VgpukitError:
    code = exc.get_error_code() if hasattr(exc, "get_error_code") else None
    msg = f"{what}: {exc}"
    if code == getattr(lv, "VIR_ERR_NO_DOMAIN", -1):
        return NotFound(msg)
    if code in (getattr(lv, "VIR_ERR_XML_ERROR", -1), getattr(lv, "VIR_ERR_XML_DETAIL", -1)):
        return InvalidInput(msg)
    if code in (getattr(lv, "VIR_ERR_NO_SUPPORT", -1), getattr(lv, "VIR_ERR_OPERATION_UNSUPPORTED", -1)):
        return Unsupported(msg)
    if code == getattr(lv, "VIR_ERR_OPERATION_INVALID", -1):
        return Conflict(msg)
    return HostIOError(msg)


@dataclass
class DomainInfo:
    name: str
    active: bool
    persistent: bool


class Libvirt:
    """One connection. Use :func:`connect`."""

    def __init__(self, lv: Any, conn: Any, uri: str) -> None:
        self.lv = lv
        self.conn = conn
        self.uri = uri

    @property
    def is_test_driver(self) -> bool:
        """libvirt's test driver parses and stores XML but cannot attach or detach devices."""
        return str(self._call("asking the driver type of", lambda: self.conn.getType())).lower() == "test"

    def _call(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except self.lv.libvirtError as exc:
            raise _map(self.lv, exc, f"libvirt ({self.uri}) failed {what}") from exc

    def _dom(self, name: str) -> Any:
        try:
            return self.conn.lookupByName(name)
        except self.lv.libvirtError as exc:
            if exc.get_error_code() == self.lv.VIR_ERR_NO_DOMAIN:
                raise NotFound(f"no domain {name!r} on {self.uri}", value=name, hint="see: virsh list --all") from exc
            raise _map(self.lv, exc, f"libvirt ({self.uri}) failed looking up domain {name!r}") from exc

    def domain(self, name: str) -> DomainInfo:
        dom = self._dom(name)
        return DomainInfo(name, bool(dom.isActive()), bool(dom.isPersistent()))

    def domains(self) -> list[DomainInfo]:
        doms = self._call("listing domains", lambda: self.conn.listAllDomains(0))
        return [DomainInfo(d.name(), bool(d.isActive()), bool(d.isPersistent())) for d in doms]

    def xml(self, name: str, inactive: bool = False) -> str:
        dom = self._dom(name)
        flags = self.lv.VIR_DOMAIN_XML_INACTIVE if inactive else 0
        return str(self._call(f"reading the XML of {name!r}", lambda: dom.XMLDesc(flags)))

    def define(self, xml: str) -> str:
        dom = self._call("defining a domain", lambda: self.conn.defineXML(xml))
        return str(dom.name())

    def attach(self, name: str, device_xml: str, flags: int) -> None:
        dom = self._dom(name)
        self._call(f"attaching a device to {name!r}", lambda: dom.attachDeviceFlags(device_xml, flags))

    def detach(self, name: str, device_xml: str, flags: int) -> None:
        dom = self._dom(name)
        self._call(f"detaching a device from {name!r}", lambda: dom.detachDeviceFlags(device_xml, flags))

    # ------------------------------------------------------------------ lifecycle (QoS tenants)
    def suspend(self, name: str) -> None:
        dom = self._dom(name)
        self._call(f"suspending {name!r}", dom.suspend)

    def resume(self, name: str) -> None:
        dom = self._dom(name)
        self._call(f"resuming {name!r}", dom.resume)

    def paused(self, name: str) -> bool:
        dom = self._dom(name)
        return bool(self._call(f"reading the state of {name!r}", dom.state)[0] == STATE_PAUSED)

    def cpu_time_ns(self, name: str) -> int:
        dom = self._dom(name)
        return int(self._call(f"reading the CPU time of {name!r}", dom.info)[4])

    # ------------------------------------------------------------------ lifecycle (draining a device)
    def exists(self, name: str) -> bool:
        try:
            self._dom(name)
        except NotFound:
            return False
        return True

    def shutdown(self, name: str) -> None:
        """Ask the guest to shut down (ACPI): it may take its time, or ignore it."""
        dom = self._dom(name)
        self._call(f"shutting down {name!r}", dom.shutdown)

    def destroy(self, name: str) -> None:
        """Stop the domain at once (pull the plug)."""
        dom = self._dom(name)
        self._call(f"destroying {name!r}", dom.destroy)

    def managed_save(self, name: str) -> None:
        """Save the domain's state to libvirt's managed save image and stop it; the next start restores it."""
        dom = self._dom(name)
        self._call(f"saving {name!r} (managed save)", lambda: dom.managedSave(0))

    def start(self, name: str) -> None:
        """Start a defined domain (from its managed save image when it has one)."""
        dom = self._dom(name)
        self._call(f"starting {name!r}", dom.create)

    def create_xml(self, xml: str) -> str:
        """Start a transient domain from its XML."""
        dom = self._call("starting a transient domain", lambda: self.conn.createXML(xml, 0))
        return str(dom.name())

    def migrate(self, name: str, dest: Libvirt) -> None:
        """Live-migrate the domain to ``dest`` (persistent there, undefined here)."""
        dom = self._dom(name)
        flags = self.lv.VIR_MIGRATE_LIVE | self.lv.VIR_MIGRATE_PERSIST_DEST | self.lv.VIR_MIGRATE_UNDEFINE_SOURCE
        self._call(f"migrating {name!r} to {dest.uri}", lambda: dom.migrate(dest.conn, flags, None, None, 0))

    def close(self) -> None:
        try:
            self.conn.close()
        except self.lv.libvirtError:
            pass


def connect(uri: str = DEFAULT_URI) -> Libvirt:
    lv = import_libvirt()
    try:
        conn = lv.open(uri)
    except lv.libvirtError as exc:
        raise HostIOError(
            f"cannot connect to {uri}: {exc}",
            value=uri,
            hint="is libvirtd (or virtqemud) running and are you allowed to use it? try: virsh -c " + uri + " list",
        ) from exc
    if conn is None:
        raise HostIOError(f"cannot connect to {uri}", value=uri)
    return Libvirt(lv, conn, uri)


class Session:
    """One connection to ``uri``, opened on first use and shared by everyone holding the session
    (the QoS daemon's domain tenants, one ``thaw_all`` pass). ``close()`` ends it; a later use reopens."""

    def __init__(self, uri: str = DEFAULT_URI, lv: Libvirt | None = None) -> None:
        self.uri = lv.uri if lv is not None else uri
        self._lv = lv

    def get(self) -> Libvirt:
        if self._lv is None:
            self._lv = connect(self.uri)
        return self._lv

    def close(self) -> None:
        if self._lv is not None:
            self._lv.close()
            self._lv = None
