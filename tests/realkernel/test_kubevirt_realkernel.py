"""KubeVirt's two paths on the real kernel, each ending in a domain the guest's real libvirtd (Debian 12's
9.0) starts with QEMU: an SR-IOV VF of the emulated NVMe controller (bound to vfio-pci by vgpukit on
demand) and an mtty mdev (made by vgpukit). The device plugin's real Allocate answer, and the DRA
driver's real metadata file (read through its CDI mount), go through the virt-launcher stand-in
(tests/k8s/virtlauncher.py); QEMU's ``info pci`` must list both devices (the NVMe VF 1b36:0010 and
mtty's 4348:3253) and vgpukit must see them held while the domain runs. The guest work is
``kubevirt_guest.py`` (one step in a boot of its own, its JSON read here). docs/design/kubevirt.md, "Proof".
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from vgpukit.k8s import kubevirt
from vgpukit.node.inventory import with_holders

from . import harness
from .targets import PF, VF_BDFS, Target

NVME_VF, MTTY = "1b36:0010", "4348:3253"
VF1, VF2 = "0000:00:02.1", "0000:00:02.2"
U1, U2 = "5a1c0de0-0000-4000-8000-00000000e001", "5a1c0de0-0000-4000-8000-00000000e002"


def test_kubevirt_mode_offers_each_vf_with_its_group_node(target: Target) -> None:
    """Runs on the qemu-guest simulator and in the guest: each VF on vfio-pci is one device (its own IOMMU
    group) with /dev/vfio/vfio and its group node; a process holding the group makes it held."""
    r = target.cli("sriov", "enable", PF, "--vfs", "2", "--driver", "vfio-pci")
    assert r.rc == 0, r
    offers = kubevirt.collect(target.host)
    assert list(offers.resources) == ["vgpukit.io/vm-pci-1b36-0010"], offers.warnings
    offer = offers.resources["vgpukit.io/vm-pci-1b36-0010"]
    assert (offer.kind, offer.selector) == ("pci", "1b36:0010")
    assert [d.id for d in offer.devices] == list(VF_BDFS[:2])
    for d in offer.devices:
        assert d.nodes == ("/dev/vfio/vfio", f"/dev/vfio/{target.group(d.id)}")
        assert d.env == (f"PCI_RESOURCE_VGPUKIT_IO_VM-PCI-1B36-0010={d.id}",)
    with target.holding(VF_BDFS[0]):
        held = with_holders(target.host, offers.inventory()).resources["vgpukit.io/vm-pci-1b36-0010"]
    assert [bool(d.held_by) for d in held] == [True, False]


def _boots(keep: Path, cancel: threading.Event) -> Any:
    """One boot of its own (the shared session guest has enough to do): kubevirt_guest.py's two paths;
    run in the session's background thread (tests/realkernel/conftest.py) while the host-side tests run."""
    reason = harness.skip_reason()
    if reason:
        harness.skip_or_fail(reason)
    kernel = harness.RealKernel(harness.Config.from_env())
    try:
        assets = kernel.prepare()
    except harness.Unavailable as exc:
        harness.skip_or_fail(f"real kernel unavailable: {exc}")
    if not assets.mtty or any(n.startswith("libvirt unavailable") for n in assets.notes):
        harness.skip_or_fail("mtty or libvirt unavailable: " + "; ".join(assets.notes))
    kernel.config.timeout = max(kernel.config.timeout, 1500.0)
    step = harness.GuestStep("kubevirt-paths", kernel.python_command("-m", "tests.realkernel.kubevirt_guest"), 1400)
    run = kernel.run([step], keep_dir=keep, cancel=cancel)
    if not run.completed and run[step.name].rc is None and "Kernel panic" in run.console and not cancel.is_set():
        run = kernel.run([step], keep_dir=keep, cancel=cancel)  # the kernel died before the step: boot once more
    return run


BOOTS = _boots


@pytest.fixture(scope="module")
def result(boots: Any) -> dict[str, Any]:
    run = boots
    out = run["kubevirt-paths"]
    assert out.rc == 0, out.describe() + "\n--- console\n" + run.console_tail()
    doc: dict[str, Any] = json.loads(out.stdout)
    assert "crashed" not in doc, doc["crashed"]
    print(f"guest run {run.seconds:.0f} s, the step {out.seconds or 0:.0f} s")
    return doc


def _started(dom: dict[str, Any], keys: set[str]) -> None:
    assert dom["define"]["rc"] == 0, dom["define"]
    assert dom["start"]["rc"] == 0, json.dumps(dom, indent=1)[-4000:]
    assert dom["state"] == "running", dom
    assert NVME_VF in dom["info_pci"] and MTTY in dom["info_pci"], dom["info_pci"]
    assert keys <= set(dom["live_keys"]), dom["live_keys"]
    assert dom["destroy"]["rc"] == 0 and dom["undefine"]["rc"] == 0, dom
    seen = [line.strip() for line in dom["info_pci"].splitlines() if NVME_VF in line or MTTY in line]
    print(f"domain started in {dom['start_seconds']} s; QEMU info pci: {seen}; live hostdevs: {dom['live_keys']}")


@pytest.mark.realkernel
def test_device_plugin_allocate_drives_a_real_domain(result: dict[str, Any]) -> None:
    p = result["plugin"]
    assert "crashed" not in p, p["crashed"]
    assert all(m["rc"] == 0 for m in p["made"]), p["made"]
    assert p["env"] == {
        "PCI_RESOURCE_VGPUKIT_IO_VM-PCI-1B36-0010": VF1,
        "MDEV_PCI_RESOURCE_VGPUKIT_IO_VM-MDEV-MTTY-1": U1,
    }, p["env"]
    assert "/dev/vfio/vfio" in p["nodes"] and all(p["nodes_exist"].values()), p["nodes_exist"]
    _started(p["domain"], {f"pci:{VF1}", f"mdev:{U1}"})
    held = json.loads(p["domain"]["mdev_list"])["instances"]  # vgpukit sees QEMU hold the mdev
    assert any(i["uuid"] == U1 and i["in_use"] for i in held), held
    assert all(c["rc"] == 0 for c in p["cleanup"]), p["cleanup"]


@pytest.mark.realkernel
def test_dra_metadata_drives_a_real_domain(result: dict[str, Any]) -> None:
    d = result["dra"]
    assert "crashed" not in d, d["crashed"]
    assert all(m["rc"] == 0 for m in d["made"]), d["made"]
    assert d["prepare_error"] == "", d
    assert d["vf_driver_prepared"] == "vfio-pci", d  # bound at prepare
    ids = [i for ids in d["cdi_ids"] for i in ids]
    assert f"gpu.vgpukit.io/metadata={'6b2d1ef0-0000-4000-8000-00000000c001'}_vf" in ids, ids
    assert any(n.startswith("/dev/vfio/") and n != "/dev/vfio/vfio" for n in d["claim_nodes"]), d["claim_nodes"]
    streams = list(d["metadata_files"].values())
    versions = ['"metadata.resource.k8s.io/v1beta1"', '"metadata.resource.k8s.io/v1alpha1"']
    assert len(streams) == 2 and all(all(v in s for v in versions) for s in streams), streams
    _started(d["domain"], {f"pci:{VF2}", f"mdev:{U2}"})
    assert d["unprepare_error"] == "" and d["left_after_unprepare"] == [], d
    assert d["vf_driver_after"] != "vfio-pci", d
    assert all(c["rc"] == 0 for c in d["cleanup"]), d["cleanup"]


VIRTIO_BLK, VIRTIO_NET = ("1af4:1001", "1af4:1042"), ("1af4:1000", "1af4:1041")  # legacy / modern ids
VF3, U3 = "0000:00:02.1", "5a1c0de0-0000-4000-8000-00000000e003"


@pytest.mark.realkernel
def test_render_domain_makes_a_vm_the_real_libvirtd_starts(result: dict[str, Any]) -> None:
    """``render domain`` (issue 29): a qcow2 disk made by qemu-img (its format read from the header), a
    NIC on a Linux bridge, the serial console, ``--virt-type qemu``, a VF on vfio-pci and an mtty mdev:
    defined and started by the guest's libvirtd, running with all of them; then ``--from FILE`` adds
    the two devices to a domain of the user's, which starts too. Run in kubevirt_guest.py's boot
    (render_guest.py)."""
    r = result["render"]
    assert "crashed" not in r, r["crashed"]
    assert all(m["rc"] == 0 for m in r["made"]) and r["vf_driver"] == "vfio-pci", r["made"]
    assert r["image"]["rc"] == 0 and all(b["rc"] == 0 for b in r["bridge"]), (r["image"], r["bridge"])
    new = r["render"]
    assert new["rc"] == 0, new["err"]
    assert new["doc"]["disks"][0]["format"] == "qcow2" and new["doc"]["networks"] == [
        {"type": "bridge", "source": "vgpukit-br0"}
    ]
    dom = r["rendered"]
    assert dom["define"]["rc"] == 0, dom["define"]
    assert dom["start"]["rc"] == 0, json.dumps(dom, indent=1)[-4000:]
    assert dom["state"] == "running", dom
    assert dom["console"].startswith("/dev/pts/"), dom  # virsh console rendered
    assert "disk.qcow2" in dom["disks"] and "vgpukit-br0" in dom["nics"], (dom["disks"], dom["nics"])
    pci = dom["info_pci"]
    assert NVME_VF in pci and MTTY in pci, pci
    assert any(i in pci for i in VIRTIO_BLK) and any(i in pci for i in VIRTIO_NET), pci
    assert {f"pci:{VF3}", f"mdev:{U3}"} <= set(dom["live_keys"]), dom["live_keys"]
    assert dom["destroy"]["rc"] == 0 and dom["undefine"]["rc"] == 0, dom
    edited = r["from"]
    assert edited["rc"] == 0, edited["err"]
    assert "<!-- a domain of the user's own" in edited["doc"]["xml"]
    mine = r["from_file"]
    assert mine["start"]["rc"] == 0 and mine["state"] == "running", json.dumps(mine, indent=1)[-4000:]
    assert NVME_VF in mine["info_pci"] and MTTY in mine["info_pci"], mine["info_pci"]
    assert mine["destroy"]["rc"] == 0 and mine["undefine"]["rc"] == 0, mine
    assert all(c["rc"] == 0 for c in r["cleanup"]), r["cleanup"]
    print(f"rendered domain started in {dom['start_seconds']} s, QEMU info pci: {pci.splitlines()}")
    print(f"--from domain started in {mine['start_seconds']} s")
