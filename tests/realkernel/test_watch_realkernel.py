"""The watch on a real kernel (docs/engine.md, "The watch"; docs/simulator.md, "Uevents").

* ``[sim]``/``[real]``: pyudev's monitor on the real netlink socket (``vgpukit.watch.netlink``) and
  the simulated kernel's feed see the same uevents, in the same order, for the same writes: VFs
  created by ``sriov_numvfs``, a bind to vfio-pci and an unbind, the VFs removed, an mdev created and
  removed (mtty). The table is the simulator's facts (``vgpukit/sim/uevents.py``), held to Linux here.
* The device plugin as a process in the guest, nothing on a timer (``--interval``/``--resync`` an hour),
  sees VFs created and a driver bound by another command through the kernel's uevents
  (``watch_probe.py``, a guest step; its ``[sim]`` twin on the qemu-guest simulated host).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from vgpukit.host.notify import Uevent
from vgpukit.stopping import readable

from .conftest import GuestSession
from .harness import skip_or_fail
from .targets import PF, VF_BDFS, Target

GUEST_STEPS = [("watch-probe", "python", ("-m", "tests.realkernel.watch_probe", "--real"), 900)]
SETTLE = 0.5  # seconds without a new uevent after a write (the kernel sends them while the write runs)
ROOT = Path(__file__).resolve().parents[2]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
VF1, VF2 = VF_BDFS[0], VF_BDFS[1]


def _listen(target: Target) -> object:
    if target.kind == "sim":
        from vgpukit.sim.uevents import FeedReader

        return FeedReader(target.root)  # type: ignore[attr-defined]
    from vgpukit.watch.netlink import NetlinkReader

    return NetlinkReader()  # pyudev's Monitor, source "kernel", subsystems pci, mdev, vfio, nvidia


def _name(ev: Uevent) -> str:
    last = ev.devpath.rstrip("/").rsplit("/", 1)[-1]
    if ev.subsystem == "vfio":
        return "group"
    if UUID.fullmatch(last):
        return "mdev"
    return {PF: "PF", VF1: "VF1", VF2: "VF2"}.get(last, last)


def _heard(reader: object) -> list[tuple[str, str, str]]:
    """What came since the last call, until SETTLE seconds passed without a new one."""
    out: list[tuple[str, str, str]] = []
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if not readable([reader], SETTLE):
            break
        out += [(e.action, e.subsystem, _name(e)) for e in reader.read()]  # type: ignore[attr-defined]
    return out


def test_the_kernel_announces_what_the_simulator_announces(target: Target) -> None:
    h = target.host
    pf, vf1 = h.pci_device(PF), h.pci_device(VF1)
    reader = _listen(target)
    try:
        _heard(reader)
        probe, drivers = h.sys("bus", "pci", "drivers_probe"), h.sys("bus", "pci", "drivers", "vfio-pci")
        vfio_in = [("add", "vfio", "group"), ("bind", "pci", "VF1")]
        vfio_out = [("remove", "vfio", "group"), ("unbind", "pci", "VF1")]
        vf = [("add", "pci", "VF1"), ("change", "pci", "VF1"), ("add", "pci", "VF2"), ("change", "pci", "VF2")]
        steps: list[tuple[str, Path, str, list[tuple[str, str, str]]]] = [
            ("autoprobe off", pf / "sriov_drivers_autoprobe", "0", []),
            ("2 VFs", pf / "sriov_numvfs", "2", [*vf, ("change", "pci", "PF")]),
            ("override", vf1 / "driver_override", "vfio-pci", []),
            ("probe: vfio-pci", probe, VF1, vfio_in),
            ("unbind", drivers / "unbind", VF1, vfio_out),
            ("bind", drivers / "bind", VF1, vfio_in),
            ("0 VFs", pf / "sriov_numvfs", "0", [*vfio_out, ("remove", "pci", "VF1"), ("remove", "pci", "VF2")]),
        ]
        for what, path, value, expected in steps:
            assert target.write(path, value) is None, what
            assert _heard(reader) == expected, what
        parent = h.sys("class", "mdev_bus", "mtty")
        if not h.is_dir(parent):
            skip_or_fail("no mtty parent here (the harness could not build it)")
        u = str(uuid.uuid4())
        assert target.write(parent / "mdev_supported_types" / "mtty-2" / "create", u) is None
        assert _heard(reader) == [("add", "mdev", "mdev"), ("add", "vfio", "group"), ("bind", "mdev", "mdev")]
        assert target.write(h.sys("bus", "mdev", "devices", u, "remove"), "1") is None
        assert _heard(reader) == [("remove", "vfio", "group"), ("unbind", "mdev", "mdev"), ("remove", "mdev", "mdev")]
    finally:
        reader.close()  # type: ignore[attr-defined]
        if target.kind == "real":
            target.write(vf1 / "driver_override", "\n")


def _probe(doc: dict[str, object]) -> None:
    missed, created, bound = doc["missed"], doc["vfs_created_ms"], doc["driver_bound_ms"]
    assert not missed and isinstance(created, list) and isinstance(bound, list), json.dumps(doc)[-3000:]
    assert len(created) == len(bound) == 3 and doc["plugin_exit"] in (0, -15), json.dumps(doc)[-3000:]
    assert "listening to kernel uevents" in str(doc["plugin"]), doc["plugin"]
    print(f"{doc['target']}: VFs created -> ListAndWatch {created} ms; a driver bound -> {bound} ms")


@pytest.mark.realkernel
def test_the_device_plugin_follows_another_command_in_the_guest(guest: GuestSession) -> None:
    r = guest.step("watch-probe")
    assert r.rc == 0, r.describe()
    _probe(json.loads(r.stdout.strip().splitlines()[-1]))


def test_the_device_plugin_follows_another_command_on_the_simulated_guest() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a DaemonSet's log is a pipe
    env["PYTHONPATH"] = str(ROOT)
    short = tempfile.mkdtemp(prefix="vgw.")  # a socket's path must fit sun_path (108 bytes)
    try:
        cmd = [sys.executable, "-m", "tests.realkernel.watch_probe", "--sim", f"{short}/guest"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert r.returncode == 0, r.stderr[-3000:]
    _probe(json.loads(r.stdout.strip().splitlines()[-1]))
