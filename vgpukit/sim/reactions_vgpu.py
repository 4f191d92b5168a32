"""Kernel reactions of NVIDIA's vGPU host driver, and catalogue expansion for vGPU profiles.

Type tables: the simulator's own (:mod:`vgpukit.sim.vgpu_types`, ``vgpukit/sim/data/nvidia-vgpu.yaml``).

* Legacy mdev (``mdev: {vgpu_catalog: tesla-t4}`` under a PCI model): the GPU is an mdev parent
  whose ``nvidia-NNN`` types share the framebuffer (pool = framebuffer in MB, cost = a type's
  framebuffer, ``max_instance`` per type, homogeneous). :func:`mdev_spec` expands the board; the
  generic mdev reactions do the rest. Instances get ``nvidia/vgpu_params``.
* Vendor-specific VFIO (a VF model with ``nvidia_vgpu: {catalog: h100-pcie}``): enabling VFs on the
  PF gives each VF an ``nvidia/`` directory with ``creatable_vgpu_types`` (card-wide list that
  shrinks as the framebuffer fills; homogeneous) and ``current_vgpu_type`` (``0``; write a type id
  to create the vGPU, ``0`` to delete it). The VF stays on ``nvidia``, whose vendor VFIO part
  registers the VF with VFIO while it has a vGPU: ``/dev/vfio/<group>`` appears with the type and goes
  with it (a VMM opens it as a plain PCI hostdev, ``managed='no'``). Errors: unknown id EINVAL; known
  but not creatable now ENOSPC; a VF that already has a vGPU EBUSY; deleting while a VM holds the VF EBUSY; disabling
  VFs while any vGPU exists EBUSY.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from .holders import holders_of
from .kernel import Reaction, Write, fail
from .reactions_pci import _is_pci_dir, sriov_numvfs
from .tree import RO, RW
from .vgpu_types import Board, VgpuType, board

HEADER = "ID    : vGPU Name"


def mdev_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A profile's ``mdev:`` block, with ``vgpu_catalog: KEY`` expanded into a framebuffer pool."""
    if "vgpu_catalog" not in spec:
        return spec
    cat = board(spec["vgpu_catalog"])
    types = {
        f"nvidia-{t.id}": {
            "name": cat.full_name(t),
            "description": t.description(),
            "cost": t.framebuffer_mb,
            "max_instances": t.max_instances,
            "device_api": "vfio-pci",
            "attrs": {"nvidia/vgpu_params": ""},
        }
        for t in cat.types
    }
    return {"pool": cat.framebuffer_mb, "homogeneous": cat.homogeneous, "types": types}


# ----------------------------------------------------------------------------- per-VF vGPU
def _read(path: Path) -> str:
    return path.read_text().strip()


def _vf_catalog(w: Write, pf_dir: Path) -> Board | None:
    if not (pf_dir / "sriov_vf_device").exists():
        return None
    ids = f"{_read(pf_dir / 'vendor')[2:]}:{_read(pf_dir / 'sriov_vf_device').zfill(4)}"
    spec = (w.state.vf_models.get(ids) or {}).get("nvidia_vgpu")
    return board(spec["catalog"]) if spec else None


def _vfs(pf_dir: Path) -> list[Path]:
    links = sorted((p for p in pf_dir.iterdir() if p.name.startswith("virtfn")), key=lambda p: int(p.name[6:]))
    return [Path(os.path.realpath(p)) for p in links]


def _current(vf: Path) -> int:
    f = vf / "nvidia" / "current_vgpu_type"
    return int(_read(f)) if f.exists() else 0


def creatable(cat: Board, used: list[int]) -> list[VgpuType]:
    """What the card can still take, given the type ids of its existing vGPUs."""
    specs = [cat.by_id(u) for u in used]
    free = cat.framebuffer_mb - sum(s.framebuffer_mb for s in specs if s)
    out = []
    for t in cat.types:
        if cat.homogeneous and used and t.id not in used:
            continue
        if t.framebuffer_mb > free or used.count(t.id) >= t.max_instances:
            continue
        out.append(t)
    return out


def refresh(w: Write, cat: Board, pf_dir: Path) -> None:
    vfs = _vfs(pf_dir)
    used = [c for c in (_current(vf) for vf in vfs) if c]
    text = "\n".join([HEADER] + [f"{t.id:<6}: {cat.full_name(t)}" for t in creatable(cat, used)])
    for vf in vfs:
        f = vf / "nvidia" / "creatable_vgpu_types"
        if not f.exists() or _read(f) != text:
            w.tree.set_attr(f, text)


def _numvfs_match(w: Write) -> bool:
    return w.path.name == "sriov_numvfs" and _is_pci_dir(w.path.parent, w) and _vf_catalog(w, w.path.parent) is not None


def numvfs(w: Write) -> None:
    """The PCI core's VF handling, plus the nvidia/ directory the vGPU driver adds to each VF."""
    pf_dir = w.path.parent
    cat = _vf_catalog(w, pf_dir)
    assert cat is not None
    if any(_current(vf) for vf in _vfs(pf_dir)) and w.value.strip() != _read(pf_dir / "sriov_numvfs"):
        raise fail(errno.EBUSY)
    sriov_numvfs(w)
    for vf in _vfs(pf_dir):
        if not (vf / "nvidia").is_dir():
            w.tree.write_attr(vf / "nvidia" / "current_vgpu_type", 0, RW)
    refresh(w, cat, pf_dir)


def _type_match(w: Write) -> bool:
    return (
        w.path.name == "current_vgpu_type"
        and w.path.parent.name == "nvidia"
        and os.path.lexists(w.path.parent.parent / "physfn")
    )


def set_type(w: Write) -> None:
    vf = w.path.parent.parent
    pf_dir = Path(os.path.realpath(vf / "physfn"))
    cat = _vf_catalog(w, pf_dir)
    if cat is None:
        raise fail(errno.ENODEV)
    try:
        want = int(w.value, 10)
    except ValueError:
        raise fail(errno.EINVAL) from None
    cur = _current(vf)
    nv = vf / "nvidia"
    if want == cur:
        return
    if want == 0:
        group = os.path.basename(os.readlink(vf / "iommu_group"))
        if holders_of(w.root, group):
            raise fail(errno.EBUSY)
        for name in ("vgpu_params", "placement_id"):
            w.tree.unlink(nv / name)
        w.tree.set_attr(nv / "current_vgpu_type", 0)
        w.tree.unlink(w.tree.devnode("vfio", group))  # unregistered from VFIO with its vGPU
        refresh(w, cat, pf_dir)
        return
    if cur != 0:
        raise fail(errno.EBUSY)
    spec = cat.by_id(want)
    if spec is None:
        raise fail(errno.EINVAL)
    used = [c for c in (_current(v) for v in _vfs(pf_dir)) if c]
    if spec not in creatable(cat, used):
        raise fail(errno.ENOSPC)
    w.tree.set_attr(nv / "current_vgpu_type", want)
    w.tree.write_attr(nv / "vgpu_params", "", RW)
    placed = [v / "nvidia" / "placement_id" for v in _vfs(pf_dir)]
    taken = {int(_read(p)) for p in placed if p.exists()}
    w.tree.write_attr(nv / "placement_id", min(set(range(len(taken) + 1)) - taken), RO)
    group = os.path.basename(os.readlink(vf / "iommu_group"))
    w.tree.make_devnode(w.tree.devnode("vfio", group), 243, int(group))  # registered with VFIO
    refresh(w, cat, pf_dir)


def _params_match(w: Write) -> bool:
    return w.path.name == "vgpu_params" and w.path.parent.name == "nvidia"


def set_params(w: Write) -> None:
    """``nvidia/vgpu_params`` of an mdev instance or a VF vGPU: plain text, settable before VM start."""
    if not w.path.exists():
        raise fail(errno.ENOENT)
    w.tree.store(w.path, w.value)


REACTIONS = [
    Reaction("nvidia sriov_numvfs", _numvfs_match, numvfs),
    Reaction("nvidia current_vgpu_type", _type_match, set_type),
    Reaction("nvidia vgpu_params", _params_match, set_params),
]
