"""Door matrix, mdev and vGPU rows: one request through every door that takes it (the area command,
``apply -f FILE -c NAME``, the node agent's apply, the Ansible module, the mdevctl shim:
tests/doors/harness.py) gives the same
refusal (exit code, error kind, message shape) and leaves the host exactly as it was."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import as_json, invoke, make_sim
from tests.doors.harness import Answer, every_door

U = "5a1c0de0-0000-4000-8000-0000000000d1"
VETO = '#!/bin/sh\n[ "$6" = capabilities ] && exit 2\n[ "$4" = pre ] && { echo vetoed >&2; exit 1; }\nexit 0\n'


def _doors(sim: Path, tmp: Path, area: tuple[str, ...], config: str, shim: tuple[str, ...] | None = None) -> Answer:
    return every_door(sim, tmp, config, area, shim)[0]


def _guest(tmp: Path) -> Path:
    return make_sim(tmp / "guest", "qemu-guest")


def test_pre_callout_veto(tmp_path: Path) -> None:
    sim = _guest(tmp_path)
    script = sim / "etc/mdevctl.d/scripts.d/callouts/10-veto"
    script.parent.mkdir(parents=True)
    script.write_text(VETO)
    script.chmod(0o755)
    config = "mdev:\n  - {parent: mtty, type: mtty-2, count: 2}"
    first = _doors(
        sim,
        tmp_path,
        ("mdev", "create", "mtty", "mtty-2", "--count", "2"),
        config,
        ("start", "-p", "mtty", "-t", "mtty-2"),
    )
    assert (first.code, first.kind) == (1, "callout-refused")
    shown = "/" + script.relative_to(sim).as_posix()
    assert first.shape == f"callout script {shown} refused to start <uuid> (return code 1)"


def test_mdev_in_use_removed_by_a_converge(tmp_path: Path) -> None:
    sim = _guest(tmp_path)
    assert invoke(sim, "mdev", "create", "mtty", "mtty-1", "--uuid", U).exit_code == 0
    assert invoke(sim, "sim", "hold", U, "--vm", "vm1").exit_code == 0
    config = "mdev:\n  - {parent: mtty, type: mtty-1, count: 0}"
    first = _doors(sim, tmp_path, ("mdev", "remove", U), config, ("stop", "-u", U))
    assert (first.code, first.kind) == (4, "in-use")
    assert first.shape.startswith("mdev <uuid> (mtty-1 on mtty) is in use by ")


def test_missing_parent(tmp_path: Path) -> None:
    sim = _guest(tmp_path)
    config = "mdev:\n  - {parent: nosuch, type: mtty-2, count: 2}"
    first = _doors(
        sim, tmp_path, ("mdev", "create", "nosuch", "mtty-2"), config, ("start", "-p", "nosuch", "-t", "mtty-2")
    )
    assert (first.code, first.kind, first.shape) == (3, "not-found", "no mdev parent nosuch on this host")


def test_unknown_type(tmp_path: Path) -> None:
    sim = _guest(tmp_path)
    config = "mdev:\n  - {parent: mtty, type: nosuch, count: 1}"
    first = _doors(sim, tmp_path, ("mdev", "create", "mtty", "nosuch"), config, ("start", "-p", "mtty", "-t", "nosuch"))
    assert (first.code, first.kind, first.shape) == (3, "not-found", "parent mtty has no mdev type nosuch")


def test_no_capacity(tmp_path: Path) -> None:
    sim = _guest(tmp_path)
    types = as_json(invoke(sim, "mdev", "types", "mtty", "--json"))["parents"][0]["types"]
    n = next(t["available"] for t in types if t["type_id"] == "mtty-2")
    assert invoke(sim, "mdev", "create", "mtty", "mtty-2", "--count", str(n)).exit_code == 0
    config = f"mdev:\n  - {{parent: mtty, type: mtty-2, count: {n + 1}}}"
    first = _doors(sim, tmp_path, ("mdev", "create", "mtty", "mtty-2"), config, ("start", "-p", "mtty", "-t", "mtty-2"))
    assert (first.code, first.kind) == (4, "no-capacity")
    assert first.shape == "1 x mtty-2 do not fit: 0 available in total (mtty: 0)"


def test_vgpu_type_homogeneity(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "t4", "t4-mdev")
    assert invoke(sim, "vgpu", "create", "gpu0", "--type", "T4-4Q").exit_code == 0
    config = "vgpu:\n  - {device: gpu0, type: T4-4Q, count: 1}\n  - {device: gpu0, type: T4-2Q, count: 1}"
    first = _doors(sim, tmp_path, ("vgpu", "create", "gpu0", "--type", "T4-2Q"), config)
    assert (first.code, first.kind) == (4, "no-capacity")
    assert first.shape == "gpu0 cannot take 1 x GRID T4-2Q: the host reports 0 available"


def test_vgpu_vf_in_use(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h100", "h100-vgpu")
    vf = as_json(invoke(sim, "vgpu", "create", "gpu0", "--type", "H100-4C", "--json"))["vgpus"][0]["id"]
    assert invoke(sim, "sim", "hold", vf, "--vm", "vm1").exit_code == 0
    first = _doors(sim, tmp_path, ("vgpu", "remove", vf), "vgpu:\n  - {device: gpu0, type: H100-4C, count: 0}")
    assert (first.code, first.kind) == (4, "in-use")
    assert first.shape.startswith(f"vGPU {vf} is in use by ")
