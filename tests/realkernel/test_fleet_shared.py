"""``vgpukit apply`` (docs/fleet.md) on the simulator AND on the real kernel in the shared QEMU boot:
SR-IOV VFs on vfio-pci plus mtty mdevs in one plan, a no-op re-run, export applied as a no-op, a VF
held open (as a VM would) refused with exit 4 and nothing changed, then back to the boot state."""

from __future__ import annotations

import os
from pathlib import Path

from .targets import PF, VF_BDFS, Target

U = "6f1c0a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"


def _doc(vfs: int, mdevs: int, mtty: bool) -> str:
    text = f"version: vgpukit.host/v1\nconfigs:\n  node:\n    sriov:\n      - device: nvme0\n        vfs: {vfs}\n"
    text += "        driver: vfio-pci\n"
    if mtty:
        pins = f"\n        uuids: [{U}]" if mdevs else ""
        text += f"    mdev:\n      - parent: mtty\n        type: mtty-2\n        count: {mdevs}{pins}\n"
    return text


def _apply(target: Target, tmp_path: Path, text: str, name: str = "host.yaml") -> tuple[int, dict]:  # type: ignore[type-arg]
    path = tmp_path / name
    path.write_text(text)
    r = target.cli("apply", "-f", str(path), "--json")
    return r.rc, r.json()


def test_apply_converges_exports_a_no_op_and_refuses_a_held_vf(target: Target, tmp_path: Path) -> None:
    h = target.host
    mtty = h.exists(h.mdev_parent("mtty"))
    assert mtty or (target.kind == "real" and os.environ.get("VGPUKIT_GUEST_MTTY") != "1")  # built: used
    try:
        rc, doc = _apply(target, tmp_path, _doc(3, 2, mtty))
        assert rc == 0 and doc["changed"], doc
        assert doc["areas"]["sriov"] >= 4 and doc["areas"]["mdev"] == (2 if mtty else 0)
        assert [target.driver(v) for v in VF_BDFS] == ["vfio-pci"] * 3
        if mtty:
            assert h.exists(h.mdev_device(U))
        rc, doc = _apply(target, tmp_path, _doc(3, 2, mtty))
        assert (rc, doc["plan"]) == (0, []), doc
        exported = target.cli("export")
        assert exported.rc == 0
        rc, doc = _apply(target, tmp_path, exported.stdout, "export.yaml")
        assert (rc, doc["plan"]) == (0, []), doc
        with target.holding(VF_BDFS[2]):
            rc, doc = _apply(target, tmp_path, _doc(1, 2, mtty))
            assert rc == 4 and doc["error"] == "in-use" and VF_BDFS[2] in doc["message"], doc
            assert target.num_vfs() == 3
    finally:
        rc, doc = _apply(target, tmp_path, _doc(0, 0, mtty))
        assert rc == 0, doc
    assert target.num_vfs() == 0 and target.driver(PF) == "nvme"
    if mtty:
        assert not h.exists(h.mdev_device(U))
