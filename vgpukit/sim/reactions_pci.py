"""Kernel reactions for PCI: SR-IOV VF creation and driver binding.

Behaviour follows the kernel's ``drivers/pci/iov.c``, ``drivers/pci/pci-sysfs.c`` and
``drivers/base/bus.c``, as listed in docs/simulator.md ("Kernel reactions"); cases marked (seen) were
observed on Linux 6.1 and are checked against it by tests/realkernel (docs/real-kernel-tests.md).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from pathlib import Path

from .config_space import HEADER_TYPE_OFFSET
from .files import HeldOpen, read_attr
from .kernel import Reaction, Write, fail
from .uevents import pf_changed

# The kernel's device names (pci_name(): "%04x:%02x:%02x.%d"); the simulator's own, not the toolkit's.
BDF_RE = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([01][0-9a-f])\.([0-7])$")


def _is_pci_dir(path: Path, w: Write | None = None) -> bool:
    """A PCI function's directory: named by its address, with a ``vendor`` (not looked at again when
    this write reached the directory through its ``bus/pci/devices`` link)."""
    if not BDF_RE.match(path.name):
        return False
    if w is not None and w.tree.links.get(str(w.tree.device_link(path.name))) == str(path):
        return True
    return (path / "vendor").exists()


def _attr(name: str) -> Callable[[Write], bool]:
    return lambda w: w.path.name == name and _is_pci_dir(w.path.parent, w)


def _driver_file(name: str) -> Callable[[Write], bool]:
    def match(w: Write) -> bool:
        rel = w.rel()
        return len(rel) == 6 and rel[:4] == ("sys", "bus", "pci", "drivers") and rel[5] == name

    return match


def _read(path: Path) -> str:
    return read_attr(path)


def _override(w: Write, bdf: str) -> str | None:
    value = _read(w.tree.device_dir(bdf) / "driver_override")
    return None if value in ("", "(null)") else value


def _ids(w: Write, bdf: str) -> tuple[str, str]:
    d = w.tree.device_dir(bdf)
    ids = f"{_read(d / 'vendor')[2:]}:{_read(d / 'device')[2:]}"
    return ids, _read(d / "class")


def header_type(w: Write, bdf: str) -> int:
    """The function's configuration-space header type (byte 0x0e, without the multi-function bit)."""
    known = w.tree.headers.get(bdf)
    if known is not None:  # created by this kernel: what its config file holds
        return known
    try:
        fd = os.open(w.tree.device_dir(bdf) / "config", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # a host simulated before config was
        return 0
    try:
        data = os.pread(fd, 1, HEADER_TYPE_OFFSET)  # the one byte: an open, a read and a close per probe
    finally:
        os.close(fd)
    return data[0] & 0x7F if data else 0


def probe_refuses(w: Write, bdf: str, driver: str) -> bool:
    """The driver's probe turns the device down (the kernel logs "probe of ... failed with error -22"):
    vfio-pci takes normal endpoints only (header type 0), never a bridge."""
    return driver == "vfio-pci" and header_type(w, bdf) != 0


def probe(w: Write, bdf: str) -> None:
    """What the driver core does for an unbound device: override first, else the match table. A
    probe that fails leaves the device unbound; the write that asked for it succeeds (seen)."""
    if w.tree.bound_driver(bdf):
        return
    override = _override(w, bdf)
    if override is not None:
        driver: str | None = override if w.tree.is_dir(w.tree.driver_dir(override)) else None
    else:
        driver = w.state.match_driver(*_ids(w, bdf))
    if driver and not probe_refuses(w, bdf, driver):
        w.tree.bind(bdf, driver, w.state.rdma_for(bdf, driver))


# ----------------------------------------------------------------------------- SR-IOV
def virtfn_name(pf: str, offset: int, stride: int, n: int) -> str:
    """The name the PCI core gives VF ``n`` (``pci_iov_virtfn_bus``/``_devfn`` in drivers/pci/iov.c).

    A function's routing ID is ``bus << 8 | devfn`` (devfn = slot << 3 | function); VF n's is the
    PF's plus ``First VF Offset + n * VF Stride`` from the PF's SR-IOV capability; the VF's bus and
    devfn are the routing ID's high and low bytes, in the PF's domain.
    """
    m = BDF_RE.match(pf)
    if m is None:
        raise fail(errno.ENODEV)
    domain, bus, slot, function = (int(x, 16) for x in m.groups())
    rid = (bus << 8) + (slot << 3) + function + offset + n * stride
    vf_bus, devfn = divmod(rid, 256)
    if vf_bus > 0xFF:
        raise fail(errno.ERANGE)  # no bus number left for the VF: the PCI core fails the enable
    return f"{domain:04x}:{vf_bus:02x}:{devfn >> 3:02x}.{devfn & 7}"


def kstrtou16(data: str) -> int:
    """The kernel's ``kstrtou16(buf, 0, ...)``: one optional trailing newline, ``+``, 0x/0 prefixes (seen:
    " 1 " and "-1" are EINVAL, "abc" EINVAL)."""
    text = data[:-1] if data.endswith("\n") else data
    text = text.removeprefix("+")
    if text[:2].lower() == "0x":
        digits, base = text[2:], 16
    elif text.startswith("0") and len(text) > 1:
        digits, base = text[1:], 8
    else:
        digits, base = text, 10
    allowed = "0123456789abcdefABCDEF"[: base if base != 16 else 22]
    if not digits or any(c not in allowed for c in digits):
        raise fail(errno.EINVAL)
    value = int(digits, base)
    if value > 0xFFFF:
        raise fail(errno.ERANGE)
    return value


def sriov_numvfs(w: Write) -> None:
    pf_dir = w.path.parent
    pf = pf_dir.name
    want = kstrtou16(w.data)
    total = int(_read(pf_dir / "sriov_totalvfs"))
    have = int(_read(pf_dir / "sriov_numvfs"))
    if want < 0:
        raise fail(errno.EINVAL)
    if want == have:
        return
    if want > total:
        raise fail(errno.ERANGE)
    if not os.path.lexists(pf_dir / "driver"):
        raise fail(errno.ENOENT)
    if have and want:
        raise fail(errno.EBUSY)
    if want == 0:
        for n in range(have):
            if not os.path.lexists(pf_dir / f"virtfn{n}"):
                continue  # already gone (sim fault pf-reset): the kernel removes what is left
            vf = os.path.basename(os.readlink(pf_dir / f"virtfn{n}"))
            w.tree.remove_pci_device(vf)
            w.tree.unlink(pf_dir / f"virtfn{n}")
        w.tree.set_attr(pf_dir / "sriov_numvfs", 0)
        return
    offset, stride = int(_read(pf_dir / "sriov_offset")), int(_read(pf_dir / "sriov_stride"))
    vendor = _read(pf_dir / "vendor")[2:]
    vf_ids = f"{vendor}:{_read(pf_dir / 'sriov_vf_device').zfill(4)}"
    spec = dict(w.state.vf_models.get(vf_ids) or {"class": _read(pf_dir / "class")})
    spec["ids"] = vf_ids
    numa = int(_read(pf_dir / "numa_node"))
    cpus = _read(pf_dir / "local_cpulist") if (pf_dir / "local_cpulist").exists() else None
    autoprobe = _read(pf_dir / "sriov_drivers_autoprobe") == "1" and _read(w.tree.bus_pci / "drivers_autoprobe") == "1"
    vfs = [virtfn_name(pf, offset, stride, n) for n in range(want)]  # all or none: ERANGE before any change
    groups = [w.state.take_group() for _ in vfs]
    tree = w.tree
    group_dirs = [tree.group_dir(g) for g in groups]
    tree.expect_new(
        [pf_dir.parent / vf for vf in vfs]
        + [tree.device_link(vf) for vf in vfs]
        + group_dirs
        + [pf_dir / f"virtfn{n}" for n in range(want)]
    )
    held = tree.held = HeldOpen()  # the VFs' new files are closed together, a few dozen at a time
    try:
        for n, (vf, group) in enumerate(zip(vfs, groups, strict=True)):
            vf_dir = tree.add_pci_device(pf_dir.parent, vf, spec, None if numa < 0 else numa, cpus, group)
            tree.link(vf_dir / "physfn", pf_dir)
            tree.link(pf_dir / f"virtfn{n}", vf_dir)
            if autoprobe:
                probe(w, vf)
    finally:
        tree.held = None
        held.close_all()
    w.tree.set_attr(pf_dir / "sriov_numvfs", want)
    pf_changed(w.tree, pf)  # after its VFs' add, change and bind (seen on Linux 6.1; none when VFs go)


def _bool_attr(w: Write) -> None:
    value = w.value.lower()
    if value in ("1", "y", "yes", "on", "true"):
        w.tree.store(w.path, 1)
    elif value in ("0", "n", "no", "off", "false"):
        w.tree.store(w.path, 0)
    else:
        raise fail(errno.EINVAL)


def driver_override(w: Write) -> None:
    w.tree.store(w.path, w.value or "(null)")


# ----------------------------------------------------------------------------- binding
def _device_arg(w: Write) -> str:
    bdf = w.value
    link = w.tree.device_link(bdf) if BDF_RE.match(bdf) else None
    if link is None or (w.tree.resolve(link) == str(link) and not os.path.lexists(link)):  # a bus entry is a link
        raise fail(errno.ENODEV)
    return bdf


def unbind(w: Write) -> None:
    bdf = _device_arg(w)
    if w.tree.bound_driver(bdf) != w.path.parent.name:
        raise fail(errno.ENODEV)
    w.tree.unbind(bdf)


def bind(w: Write) -> None:
    # The kernel's bind_store: the driver must match the device (driver_override first, then the id
    # table), else ENODEV, even for a bound device (seen); only a matching driver gets EBUSY when bound.
    bdf = _device_arg(w)
    driver = w.path.parent.name
    override = _override(w, bdf)
    if override is not None:
        matches = override == driver
    else:
        ids, class_code = _ids(w, bdf)
        cls = f"class:{class_code.lower().removeprefix('0x')[:4]}"
        matches = any(entry in (ids, cls) for entry in w.state.driver_ids.get(driver, []))
    if not matches:
        raise fail(errno.ENODEV)
    if w.tree.bound_driver(bdf):
        raise fail(errno.EBUSY)
    if probe_refuses(w, bdf, driver):
        raise fail(errno.EINVAL)  # the probe's own error, returned by bind (seen)
    w.tree.bind(bdf, driver, w.state.rdma_for(bdf, driver))


def drivers_probe(w: Write) -> None:
    probe(w, _device_arg(w))


def new_id(w: Write) -> None:
    parts = w.value.split()
    if len(parts) < 2 or not all(len(p) <= 4 for p in parts[:2]):
        raise fail(errno.EINVAL)
    try:
        ids = f"{int(parts[0], 16):04x}:{int(parts[1], 16):04x}"
    except ValueError:
        raise fail(errno.EINVAL) from None
    driver = w.path.parent.name
    entries = w.state.driver_ids.get(driver, [])
    if ids in entries:
        raise fail(errno.EEXIST)
    w.state.set_driver_ids(driver, [ids, *entries])
    for bdf in w.tree.all_bdfs():
        if not w.tree.bound_driver(bdf) and _ids(w, bdf)[0] == ids and _override(w, bdf) in (None, driver):
            if probe_refuses(w, bdf, driver):
                continue
            w.tree.bind(bdf, driver, w.state.rdma_for(bdf, driver))


def remove_id(w: Write) -> None:
    parts = w.value.split()
    try:
        ids = f"{int(parts[0], 16):04x}:{int(parts[1], 16):04x}"
    except (ValueError, IndexError):
        raise fail(errno.EINVAL) from None
    entries = w.state.driver_ids.get(w.path.parent.name, [])
    if ids not in entries:
        raise fail(errno.ENODEV)
    rest = list(entries)
    rest.remove(ids)
    w.state.set_driver_ids(w.path.parent.name, rest)


def _bus_file(name: str) -> Callable[[Write], bool]:
    return lambda w: w.rel() == ("sys", "bus", "pci", name)


REACTIONS = [
    Reaction("sriov_numvfs", _attr("sriov_numvfs"), sriov_numvfs),
    Reaction("sriov_drivers_autoprobe", _attr("sriov_drivers_autoprobe"), _bool_attr),
    Reaction("driver_override", _attr("driver_override"), driver_override),
    Reaction("unbind", _driver_file("unbind"), unbind),
    Reaction("bind", _driver_file("bind"), bind),
    Reaction("new_id", _driver_file("new_id"), new_id),
    Reaction("remove_id", _driver_file("remove_id"), remove_id),
    Reaction("drivers_probe", _bus_file("drivers_probe"), drivers_probe),
    Reaction("drivers_autoprobe", _bus_file("drivers_autoprobe"), _bool_attr),
]
