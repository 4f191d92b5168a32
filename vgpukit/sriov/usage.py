"""Is a device in use? Answered the same way on a real host and on the simulator.

A PCI function (VF or PF) or an mdev is *in use* when

* some process holds an fd on its VFIO group node ``/dev/vfio/<group>`` or its VFIO device cdev
  (``/dev/vfio/devices/vfioN``): found by scanning ``/proc/<pid>/fd`` symlinks (``vgpukit sim hold``
  leaves exactly such an entry in a simulated host's ``proc/``);
* it carries mediated devices (UUID-named children) or an NVIDIA vGPU (``nvidia/current_vgpu_type``
  other than 0);
* optionally, a libvirt domain's XML names it as a PCI hostdev (only when asked and reachable).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import VgpukitError
from ..holders import OpenFiles
from ..host import VFIO_DEV, Host

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True)
class User:
    """One reason a device is in use."""

    kind: str  # process | mdev | vgpu | libvirt
    ref: str  # pid, mdev uuid, vGPU type id, domain name
    detail: str = ""  # process name, ...

    def describe(self) -> str:
        if self.kind == "process":
            return f"held open by pid {self.ref} ({self.detail or '?'})"
        if self.kind == "mdev":
            return f"carries mdev {self.ref}"
        if self.kind == "vgpu":
            return f"carries vGPU type {self.ref}"
        return f"assigned to libvirt domain {self.ref}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ref": self.ref, "detail": self.detail}


def group_node(host: Host, group: int) -> str:
    return host.display(host.vfio_group_node(group))


def pci_users(host: Host, bdf: str, group: int | None, files: OpenFiles, entries: set[str] | None = None) -> list[User]:
    """Why the PCI function ``bdf`` is in use (empty: free). ``entries``: its directory, if listed already."""
    d = host.pci_device(bdf)
    names = set(host.listdir(d)) if entries is None else entries
    users: list[User] = []
    nodes = [group_node(host, group)] if group is not None else []
    if VFIO_DEV in names:
        nodes += [host.display(host.dev("vfio", "devices", n)) for n in host.listdir(d / VFIO_DEV)]
    for node in nodes:
        users += [User("process", str(h.pid), h.vm or h.comm or "") for h in files.holders(node)]
    users += [User("mdev", name) for name in sorted(names) if UUID_RE.match(name)]
    vgpu = host.read_opt(d / "nvidia" / "current_vgpu_type") if "nvidia" in names else None
    if vgpu not in (None, "", "0"):
        users.append(User("vgpu", str(vgpu)))
    return users


def libvirt_users(uri: str) -> dict[str, list[User]]:
    """BDF -> domains naming it as a PCI hostdev. Empty when libvirt is not installed or reachable."""
    import importlib
    import xml.etree.ElementTree as ET

    try:
        facade = importlib.import_module("vgpukit.attach.libvirt_facade")
        conn = facade.connect(uri)
    except (ImportError, VgpukitError):
        return {}
    out: dict[str, list[User]] = {}
    try:
        for dom in conn.domains():
            root = ET.fromstring(conn.xml(dom.name))
            for addr in root.iterfind("./devices/hostdev[@type='pci']/source/address"):
                try:
                    bdf = "{:04x}:{:02x}:{:02x}.{:x}".format(
                        *(int(addr.get(k, "0"), 0) for k in ("domain", "bus", "slot", "function"))
                    )
                except ValueError:
                    continue
                state = "running" if dom.active else "defined"
                out.setdefault(bdf, []).append(User("libvirt", dom.name, state))
    except VgpukitError:
        return out
    finally:
        conn.close()
    return out
