"""vfio-pci and PCI bridges on a real kernel: the kernel's vfio-pci turns a bridge down, and
``vgpukit bind`` refuses before touching it.

The guest has a PCIe root port at 0000:00:1c.0 (QEMU ``pcie-root-port``, header type 1, bound to
``pcieport``; nothing behind it). The same sequence runs on the simulator's bridge in
tests/sriov/test_bridges.py.
"""

from __future__ import annotations

from .targets import Target

BRIDGE = "0000:00:1c.0"


def _put_back(t: Target) -> None:
    h = t.host
    if t.override(BRIDGE):
        t.write(h.pci_device(BRIDGE, "driver_override"), "\n")
    if t.driver(BRIDGE) is None:
        t.write(h.sys("bus", "pci", "drivers_probe"), BRIDGE)


def test_kernel_vfio_pci_turns_a_pci_bridge_down(real_target: Target) -> None:
    t, h = real_target, real_target.host
    assert t.driver(BRIDGE) == "pcieport"
    config = h.read_bytes_opt(h.pci_device(BRIDGE, "config"), 64)
    assert config is not None and config[0x0E] & 0x7F == 1  # a PCI-to-PCI bridge header
    try:
        assert t.write(h.pci_device(BRIDGE, "driver_override"), "vfio-pci") is None
        assert t.write(h.pci_driver("pcieport", "unbind"), BRIDGE) is None
        probed = t.write(h.sys("bus", "pci", "drivers_probe"), BRIDGE)
        now = t.driver(BRIDGE)
        # the probe failed (vfio-pci: EINVAL for a non-normal header); the driver core's answer to the write:
        assert (probed, now) == (None, None), f"drivers_probe -> {probed}, driver now {now}"
        bound = t.write(h.pci_driver("vfio-pci", "bind"), BRIDGE)
        assert (bound, t.driver(BRIDGE)) == ("EINVAL", None), f"vfio-pci/bind -> {bound}"
    finally:
        _put_back(t)
    assert t.driver(BRIDGE) == "pcieport" and t.override(BRIDGE) is None


def test_cli_refuses_to_bind_a_bridge_to_vfio_and_changes_nothing(real_target: Target) -> None:
    t = real_target
    for extra in ((), ("--force",)):  # --force never overrides what the kernel refuses anyway
        r = t.cli("bind", BRIDGE, "--driver", "vfio-pci", *extra)
        assert r.rc == 5, r
        assert r.stderr.count("\n") == 1 and "it is a PCI-to-PCI bridge (header type 1)" in r.stderr, r
        assert t.driver(BRIDGE) == "pcieport" and t.override(BRIDGE) is None
        assert BRIDGE + ".json" not in t.bind_records()
