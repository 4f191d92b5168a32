"""Run in the real-kernel guest, in kubevirt_guest.py's boot and under its libvirtd: the domains
``vgpukit render domain`` writes, defined and started by the guest's real libvirtd (Debian 12's 9.0)
with QEMU, each with an SR-IOV VF of the emulated NVMe controller (bound to vfio-pci by vgpukit) and an
mtty mdev:

1. a new VM: a qcow2 disk made by ``qemu-img``, a virtio NIC on a Linux bridge, the serial console,
   ``--virt-type qemu`` (the guest has no KVM), the two devices;
2. ``render domain --from FILE``: the two devices added to a domain XML of the user's.

Each is defined, started, looked at (state, console, disks, NICs, QEMU's ``info pci``), destroyed and
undefined. The guest's /dev has no devpts (no udev, no init system): QEMU's pty console needs one, so it
is mounted here, as a host's init would have it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import invoke
from vgpukit.libvirt.domain import DomainXML

from .kubevirt_guest import PF, V, cli, driver_of, sh

VF = "0000:00:02.1"
U3 = "5a1c0de0-0000-4000-8000-00000000e003"
BRIDGE = "vgpukit-br0"
USER_XML = """<domain type='qemu'>
  <!-- a domain of the user's own: vgpukit adds the devices -->
  <name>from-file</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices><memballoon model='none'/></devices>
</domain>
"""


def render(*args: str) -> dict[str, Any]:
    r = invoke(None, "render", "domain", *args, "--json")
    doc: dict[str, Any] = json.loads(r.stdout) if r.exit_code == 0 else {}
    return {"args": " ".join(args), "rc": r.exit_code, "err": r.stderr[-2000:], "doc": doc}


def whole(*argv: str) -> str:
    """A command's whole output (``sh`` keeps the last 4000 characters: a domain's XML or ``info pci`` is more)."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=300, check=False).stdout


def started(name: str, xml: str, work: Path) -> dict[str, Any]:
    """Define and start the domain; what libvirt and QEMU show while it runs; destroyed and undefined."""
    path = work / f"{name}.xml"
    path.write_text(xml)
    out: dict[str, Any] = {"define": sh(*V, "define", str(path))}
    t0 = time.monotonic()
    out["start"] = sh(*V, "start", name, timeout=600)
    out["start_seconds"] = round(time.monotonic() - t0, 1)
    if out["start"]["rc"] == 0:
        out["state"] = sh(*V, "domstate", name)["out"].strip()
        out["console"] = sh(*V, "ttyconsole", name)["out"].strip()
        out["disks"] = whole(*V, "domblklist", name, "--details")
        out["nics"] = whole(*V, "domiflist", name)
        pci = whole(*V, "qemu-monitor-command", "--hmp", name, "info pci")
        out["info_pci"] = "\n".join(line.strip() for line in pci.splitlines() if "PCI device" in line)
        live = whole(*V, "dumpxml", name)
        out["live_keys"] = sorted(DomainXML.parse(live).keyed()) if live else []
        out["destroy"] = sh(*V, "destroy", name)
    else:
        log = Path(f"/var/log/libvirt/qemu/{name}.log")
        out["qemu_log"] = log.read_text()[-3000:] if log.exists() else ""
    out["undefine"] = sh(*V, "undefine", name)
    return out


def render_path() -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="render."))
    out: dict[str, Any] = {"made": [cli("sriov", "enable", PF, "--vfs", "1", "--driver", "vfio-pci")]}
    out["made"].append(cli("mdev", "create", "mtty", "mtty-1", "--uuid", U3))
    out["vf_driver"] = driver_of(VF)
    os.makedirs("/dev/pts", exist_ok=True)
    if not os.path.ismount("/dev/pts"):
        out["devpts"] = sh("mount", "-t", "devpts", "-o", "ptmxmode=0666", "devpts", "/dev/pts")
    image = work / "disk.qcow2"
    out["image"] = sh("qemu-img", "create", "-f", "qcow2", str(image), "64M")
    out["bridge"] = [sh("ip", "link", "add", BRIDGE, "type", "bridge"), sh("ip", "link", "set", BRIDGE, "up")]
    try:
        new = render("--name", "rendered", "--memory", "64M", "--vcpus", "1", "--virt-type", "qemu",
                     "--disk", str(image), "--bridge", BRIDGE, "--device", VF, "--device", U3)  # fmt: skip
        out["render"] = new
        if new["rc"] == 0:
            out["rendered"] = started("rendered", new["doc"]["xml"], work)
        user = work / "mine.xml"
        user.write_text(USER_XML)
        edited = render("--from", str(user), "--device", VF, "--device", U3)
        out["from"] = edited
        if edited["rc"] == 0:
            out["from_file"] = started("from-file", edited["doc"]["xml"], work)
    finally:
        out["cleanup"] = [
            cli("mdev", "remove", U3),
            cli("sriov", "disable", PF),
            sh("ip", "link", "del", BRIDGE),
        ]
    return out
