"""Tenants: with a QoS daemon running, its tenants' share series are in the scrape (the daemon's own
status, rendered as the daemon renders it); the CUDA library's region gives memory used and cap."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.conftest import invoke, make_sim
from tests.qos.conftest import DaemonProc, wait_for
from vgpukit.cuda import region

from .helpers import scrape, value


def test_no_daemon_no_share_series(sim_dir: Path) -> None:
    fam = scrape(sim_dir)
    assert value(fam, "vgpukit_qos_daemon_up") == 0
    assert "vgpukit_qos_target_share_ratio" not in fam


def test_tenants_of_a_running_daemon_show_their_shares(tmp_path: Path, spawn) -> None:  # type: ignore[no-untyped-def]
    sim = make_sim(tmp_path / "host")
    d = DaemonProc(sim, sim=True).start()
    try:
        p, q = spawn(), spawn()
        rc = invoke(sim, "qos", "set", "gpu0", "--policy", "fixed-share").exit_code
        for name, pid, share in (("a", p.pid, 20), ("b", q.pid, 30)):
            args = ["gpu0", name, "--class", "offline", "--share", str(share), "--pid", str(pid), "--demand", "sample"]
            rc |= invoke(sim, "qos", "tenant", "add", *args).exit_code
        assert rc == 0
        assert wait_for(lambda: d.status()["a"]["frozen_s"] > 0.1, timeout=5)
        fam = scrape(sim)
    finally:
        assert d.stop() == 0
    assert value(fam, "vgpukit_qos_daemon_up") == 1
    assert value(fam, "vgpukit_qos_target_share_ratio", gpu="gpu0", tenant="a") == 0.2
    assert value(fam, "vgpukit_qos_target_share_ratio", gpu="gpu0", tenant="b") == 0.3
    assert value(fam, "vgpukit_qos_achieved_share_ratio", tenant="a", window="10s") is not None
    assert value(fam, "vgpukit_qos_frozen_seconds", tenant="a") > 0
    assert value(fam, "vgpukit_qos_preemptions", tenant="b") is not None


def _region(path: Path, caps: dict[int, int]) -> None:
    """A region as libvgpukit-cuda leaves it (layout: contrib/cuda/region.c) with no live process."""
    data = bytearray(region.SIZE)
    region.HEADER.pack_into(data, 0, region.MAGIC, 1, region.MAXDEV, region.SLOTS)
    for dev, cap in caps.items():
        struct.pack_into("<Q", data, region.CAPS_AT + 8 * dev, cap)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))


def test_memory_cap_from_the_cuda_region(sim_dir: Path) -> None:
    _region(sim_dir / "run/vgpukit/cuda/web/usage", {0: 16 << 20, 1: 0})
    fam = scrape(sim_dir)
    assert value(fam, "vgpukit_tenant_memory_cap_bytes", tenant="web", gpu="0") == 16 << 20
    assert value(fam, "vgpukit_tenant_memory_used_bytes", tenant="web", gpu="0") == 0
    assert value(fam, "vgpukit_tenant_processes", tenant="web") == 0
    assert value(fam, "vgpukit_tenant_memory_cap_refusals", tenant="web", gpu="0") == 0  # version 1: none counted
