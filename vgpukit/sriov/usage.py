"""Is a device in use? Answered the same way on a real host and on the simulator.

A PCI function (VF or PF) or an mdev is *in use* when

* some process holds an fd on its VFIO group node ``/dev/vfio/<group>`` or its VFIO device cdev
  (``/dev/vfio/devices/vfioN``): found by scanning ``/proc/<pid>/fd`` symlinks (``vgpukit sim hold``
  leaves exactly such an entry in a simulated host's ``proc/``);
* it carries mediated devices (UUID-named children) or an NVIDIA vGPU (``nvidia/current_vgpu_type``
  other than 0);
* optionally, a libvirt domain's XML (live or inactive) names it as ``<hostdev type='pci'>`` or
  ``<interface type='hostdev'>``, or names one of its mdevs (only when asked and reachable).
"""

from __future__ import annotations

import msgspec

from ..errors import VgpukitError
from ..holders import OpenFiles
from ..host import BDF_RE, VFIO_DEV, Host
from ..naming import MDEV_UUID_RE


class User(msgspec.Struct, frozen=True):
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


def group_node(host: Host, group: int) -> str:
    return host.display(host.vfio_group_node(group))


def pci_users(host: Host, bdf: str, group: int | None, files: OpenFiles, entries: set[str] | None = None) -> list[User]:
    """Why the PCI function ``bdf`` is in use (empty: free). ``entries``: its directory, if listed already."""
    d = host.pci_device(bdf)
    names = set(host.listdir(d)) if entries is None else entries
    users: list[User] = []
    nodes = [group_node(host, group)] if group is not None else []
    if VFIO_DEV in names:
        nodes += [host.display(host.vfio_device_node(n)) for n in host.listdir(d / VFIO_DEV)]
    for node in nodes:
        users += [User("process", str(h.pid), h.vm or h.comm or "") for h in files.holders(node)]
    users += [User("mdev", name) for name in sorted(names) if MDEV_UUID_RE.match(name)]
    vgpu = host.read_opt(d / "nvidia" / "current_vgpu_type") if "nvidia" in names else None
    if vgpu not in (None, "", "0"):
        users.append(User("vgpu", str(vgpu)))
    return users


def libvirt_users(host: Host, uri: str) -> dict[str, list[User]]:
    """BDF -> the libvirt domains holding that PCI function, read through the libvirt facade.

    A function is assigned when a domain's live or inactive definition names it as
    ``<hostdev type='pci'>`` or ``<interface type='hostdev'>``, or names as ``<hostdev type='mdev'>``
    an mdev whose parent it is. Empty when ``uri`` is not reachable; without libvirt-python, exit 5
    naming the extra (asked for a check it cannot make, it says so).
    """
    from ..libvirt.connection import connect, import_libvirt  # only when a libvirt URI is given
    from ..libvirt.domain import assignments

    import_libvirt()

    try:
        lv = connect(uri)
    except VgpukitError:
        return {}
    try:
        found = assignments(lv)
    except VgpukitError:
        return {}
    finally:
        lv.close()
    out: dict[str, list[User]] = {}
    for key, held in found.items():
        kind, _, ref = key.partition(":")
        bdf = ref if kind == "pci" else mdev_parent(host, ref)
        if bdf is None:
            continue
        detail = "" if kind == "pci" else f"mdev {ref}, "
        out.setdefault(bdf, []).extend(User("libvirt", a.domain, detail + a.state) for a in held)
    return out


def mdev_parent(host: Host, uuid: str) -> str | None:
    """The PCI function an existing mdev lives on (None: gone, or not on a PCI parent)."""
    d = host.mdev_device(uuid)
    if not host.exists(d):
        return None
    parent = host.resolve(d).parent.name
    return parent if BDF_RE.match(parent) else None
