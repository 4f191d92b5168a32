"""Kernel uevents from the netlink socket, through pyudev's monitor (the running kernel's devices).

The monitor listens to the kernel's own messages (source ``kernel``: no udevd needed, as in a minimal
guest or a container), filtered to the subsystems whose devices vgpukit hands out. Only what the
message carries is read (a device received from a monitor is sealed: libudev reads no sysfs for it),
so nothing here reaches the host's files outside the host door. A receive buffer that overflowed
(``ENOBUFS``: the kernel dropped messages) is reported as :class:`~vgpukit.host.notify.Lost`.
"""

from __future__ import annotations

import errno
from typing import Any

from ..errors import HostIOError
from ..host.notify import Lost, Uevent

SUBSYSTEMS = ("pci", "mdev", "vfio", "nvidia")
BUFFER = 16 << 20  # bytes the socket may hold unread (a burst of thousands of VFs); needs CAP_NET_ADMIN


class NetlinkReader:
    """``fileno`` for ``poll``; :meth:`read` never blocks."""

    def __init__(self, buffer: int = BUFFER, subsystems: tuple[str, ...] = SUBSYSTEMS) -> None:
        try:
            import pyudev
        except ImportError as err:  # the dependency, or libudev.so.1 under it, is missing
            raise HostIOError(f"kernel uevents cannot be read: {err}") from None
        try:
            self.monitor: Any = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
            for s in subsystems:
                self.monitor.filter_by(s)
            try:
                self.monitor.set_receive_buffer_size(buffer)
            except OSError:  # not allowed (no CAP_NET_ADMIN): the system's default, an overflow re-reads
                pass
            self.monitor.start()
        except OSError as err:
            raise HostIOError(f"kernel uevents cannot be read: {err.strerror or err}") from None

    def fileno(self) -> int:
        return int(self.monitor.fileno())

    def read(self) -> list[Uevent]:
        out: list[Uevent] = []
        while True:
            try:
                device = self.monitor.poll(timeout=0)
            except OSError as err:
                if err.errno == errno.ENOBUFS:
                    raise Lost("the kernel dropped uevents (netlink receive buffer full)") from None
                if err.errno in (errno.EAGAIN, errno.EINTR):
                    return out
                raise HostIOError(f"reading kernel uevents: {err.strerror or err}") from None
            if device is None:
                return out
            props = dict(device.properties)  # the message's KEY=value pairs (sealed: no sysfs read)
            env = tuple(sorted((k, v) for k, v in props.items() if k not in ("ACTION", "DEVPATH", "SUBSYSTEM")))
            out.append(Uevent(props.get("ACTION", ""), props.get("DEVPATH", ""), props.get("SUBSYSTEM", ""), env))

    def close(self) -> None:
        self.monitor = None  # pyudev closes the socket when the monitor is freed
