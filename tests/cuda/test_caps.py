"""Memory caps on every allocation path, exact to the byte, against the device emulator."""

from __future__ import annotations

import shutil
import signal
import struct
from pathlib import Path

import pytest

from tests.conftest import make_sim
from tests.exporter.helpers import scrape, value
from vgpukit.cuda import region
from vgpukit.cuda.region import read_usage

from .conftest import Cuda

PATHS = ["mem", "v1", "pitch", "managed", "async", "pool", "defpool", "vmm", "array", "array3d", "mipmap"]
CAP = 16 * 1024 * 1024  # a multiple of every path's unit (pitch 2048, VMM granularity 4096)
ODD_CAP = CAP + 123  # paths whose unit is one byte are exact on any cap


@pytest.mark.parametrize("path", PATHS)
def test_cap_is_exact_on_every_path(cuda: Cuda, path: str) -> None:
    cap = ODD_CAP if path in ("mem", "v1", "managed", "async", "pool", "defpool", "array") else CAP
    out = cuda.run("paths", path, VGPUKIT_CUDA_MEMORY=str(cap))
    assert int(out["total"]) == cap and int(out["devicetotal"]) == cap  # what frameworks size pools from
    assert out["over"] == "2" and out["more"] == "2"  # CUDA_ERROR_OUT_OF_MEMORY: 1 unit over is refused
    assert int(out["peak"]) == cap  # the device held exactly the cap, never a byte more
    assert out["full_free"] == "0"
    assert int(out["end_free"]) == cap and out["end_used"] == "0"  # every free uncharged, on the device too
    usage = read_usage(cuda.host, cuda.tenant)
    assert usage is not None and usage.used == (0,) and usage.caps == (cap,)


@pytest.mark.parametrize("path", PATHS)
def test_one_byte_over_the_cap_is_refused_only_by_the_library(cuda: Cuda, path: str) -> None:
    """The control: without the interposer the same allocation reaches the (1 GiB) device."""
    over = str(CAP + 4096)
    env = {"VGPUKIT_CUDA_MEMORY": str(CAP)}
    p = cuda.popen("paths", path, "hold", over, preload=False, **env)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    p.kill()
    p.wait()
    out = cuda.run("paths", path, "hold", over, check=False, timeout=10, **env)
    assert out["rc"] == "1" and "-> 2" in out["stderr"]


def test_vmm_memory_lives_until_released_and_unmapped(cuda: Cuda) -> None:
    out = cuda.run("paths", "vmm", VGPUKIT_CUDA_MEMORY=str(CAP))
    frees = [int(line.split("=")[1]) for line in out["stdout"].splitlines() if line.startswith("after_release_free")]
    assert frees == [0, CAP // 2]  # released but still mapped: still charged


def test_host_memory_is_not_charged(cuda: Cuda) -> None:
    out = cuda.run("paths", "vmmhost", VGPUKIT_CUDA_MEMORY=str(CAP))
    assert int(out["host_free"]) == CAP


def test_driver_errors_are_the_drivers_own(cuda: Cuda) -> None:
    out = cuda.run("paths", "errors", VGPUKIT_CUDA_MEMORY=str(CAP))
    assert (out["zero"], out["badfree"], out["badformat"], out["noctx"]) == ("1", "1", "1", "201")
    assert int(out["free"]) == CAP  # failed calls charged nothing


def test_pass_through_without_configuration(cuda: Cuda) -> None:
    out = cuda.run("paths", "mem", tenant=False, VGPUKIT_CUDA_MEMORY=str(CAP))  # a cap but no tenant
    assert int(out["total"]) == 1 << 30 and int(out["peak"]) == 1 << 30  # the device's own answers
    out = cuda.run("paths", "errors", tenant=False)
    assert (out["zero"], out["noctx"]) == ("1", "201")
    assert not (cuda.root / "run" / "vgpukit" / "cuda" / cuda.tenant).exists()
    p = cuda.popen("paths", "mem", "hold", str(CAP))  # a tenant without any cap: accounted, never refused
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    usage = read_usage(cuda.host, cuda.tenant)
    p.kill()
    p.wait()
    assert usage is not None and usage.used == (CAP,) and usage.caps == (0,)


def test_cap_from_the_tenant_config_file(cuda: Cuda) -> None:
    from vgpukit.cuda.region import write_config

    write_config(cuda.host, cuda.tenant, memory="16MiB")
    out = cuda.run("paths", "mem")
    assert int(out["total"]) == CAP and out["over"] == "2"
    out = cuda.run("paths", "mem", VGPUKIT_CUDA_MEMORY="8MiB")  # the environment overrides the file
    assert int(out["total"]) == CAP // 2


def test_processes_of_a_tenant_share_the_cap_and_kill_9_gives_it_back(cuda: Cuda) -> None:
    env = {"VGPUKIT_CUDA_MEMORY": str(CAP)}
    holders = []
    for _ in range(2):
        p = cuda.popen("paths", "mem", "hold", str(CAP // 4), **env)
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        holders.append(p)
    usage = read_usage(cuda.host, cuda.tenant)
    assert usage is not None and usage.used == (CAP // 2,) and usage.processes == 2
    out = cuda.run("paths", "mem", "hold", str(CAP // 2 + 1), check=False, **env)  # a third process: the rest only
    assert out["rc"] == "1" and "-> 2" in out["stderr"]
    for p in holders:
        p.send_signal(signal.SIGKILL)
        p.wait()
    usage = read_usage(cuda.host, cuda.tenant)
    assert usage is not None and usage.used == (0,)  # dead processes' slots are not counted
    out = cuda.run("paths", "mem", **env)  # and the library takes their usage back
    assert int(out["free"]) == CAP and int(out["peak"]) == CAP and out["over"] == "2"


def test_threads_and_devices(cuda: Cuda) -> None:
    cap = 300_000
    out = cuda.run("multi", "8", "1500", VGPUKIT_CUDA_MEMORY=str(cap), VGPUKIT_EMU_DEVICES="2")
    assert int(out["oom"]) > 0 and int(out["crossfreed"]) > 0  # the cap was hit; frees from another context
    lines = [line for line in out["stdout"].splitlines() if line.startswith("dev=")]
    assert len(lines) == 2
    for line in lines:
        kv = dict(w.split("=") for w in line.split())
        assert int(kv["peak"]) <= cap and int(kv["peak"]) > cap // 2
        assert kv["used"] == "0" and int(kv["free"]) == cap == int(kv["total"])
    usage = read_usage(cuda.host, cuda.tenant)
    assert usage is not None and usage.used == (0, 0)


def test_per_device_caps(cuda: Cuda) -> None:
    out = cuda.run("paths", "mem", VGPUKIT_CUDA_MEMORY="4MiB,16MiB", VGPUKIT_EMU_DEVICES="2")
    assert int(out["total"]) == 4 << 20  # device 0 of "4MiB,16MiB"


def test_a_process_killed_inside_the_lock_blocks_nobody(cuda: Cuda) -> None:
    """kill -9 while holding the region's mutex with a half-done update: the next process recovers the
    mutex (robust, EOWNERDEAD) and recomputes the totals from the per-process slots."""
    env = {"VGPUKIT_CUDA_MEMORY": str(CAP)}
    cuda.run("paths", "mem", **env)  # lays the region out
    holder = cuda.popen("lockholder", str(cuda.root / "run" / "vgpukit" / "cuda" / cuda.tenant))
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    out = cuda.run("paths", "mem", timeout=20, **env)
    assert int(out["free"]) == CAP and int(out["peak"]) == CAP and out["over"] == "2"


def _scrape_region(cuda: Cuda, tmp_path: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The exporter's scrape of a simulated host holding the tenant's region as the library left it."""
    sim = make_sim(tmp_path / "sim")
    dest = sim / "run/vgpukit/cuda" / cuda.tenant
    dest.mkdir(parents=True)
    shutil.copyfile(cuda.root / "run/vgpukit/cuda" / cuda.tenant / "usage", dest / "usage")
    return scrape(sim)


def test_refused_allocations_are_counted_and_exported(cuda: Cuda, tmp_path: Path) -> None:
    """Each allocation attempt the cap refuses adds one to the region's counter (version 2), shown by the
    exporter as vgpukit_tenant_memory_cap_refusals_total."""
    out = cuda.run("paths", "mem", VGPUKIT_CUDA_MEMORY=str(CAP))
    assert out["over"] == "2" and out["more"] == "2"  # the two attempts over the cap
    usage = read_usage(cuda.host, cuda.tenant)
    assert usage is not None and usage.refused == (2,)
    cuda.run("paths", "mem", VGPUKIT_CUDA_MEMORY=str(CAP))
    usage = read_usage(cuda.host, cuda.tenant)
    assert usage is not None and usage.refused == (4,)
    fam = _scrape_region(cuda, tmp_path)
    assert value(fam, "vgpukit_tenant_memory_cap_refusals", tenant=cuda.tenant, gpu="0") == 4  # sample: ..._total


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_region_is_grown_in_place_and_read_by_both(cuda: Cuda, tmp_path: Path, version: int) -> None:
    """A region left by an older library (version 1: no counters; version 2: no memory QoS fields): the
    reader reads it (no refusals, no burst), and this library grows it to version 3 in place, keeping
    what it held."""
    path = cuda.root / "run/vgpukit/cuda" / cuda.tenant / "usage"
    data = bytearray(region.SIZE if version == 1 else region.SIZE_V2)
    region.HEADER.pack_into(data, 0, region.MAGIC, version, region.MAXDEV, region.SLOTS)
    struct.pack_into("<Q", data, region.CAPS_AT, CAP)
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(data))
    usage = read_usage(cuda.host, cuda.tenant)
    assert usage is not None and usage.caps == (CAP,) and usage.refused == (() if version == 1 else (0,))
    assert usage.bursts == () and usage.cls is None
    assert value(_scrape_region(cuda, tmp_path / "a"), "vgpukit_tenant_memory_cap_refusals", gpu="0") == 0
    cuda.run("paths", "mem", VGPUKIT_CUDA_MEMORY=str(CAP))
    assert path.stat().st_size == region.SIZE_V3 and region.HEADER.unpack_from(path.read_bytes())[1] == 3
    usage = read_usage(cuda.host, cuda.tenant)
    assert usage is not None and usage.caps == (CAP,) and usage.used == (0,) and usage.refused == (2,)
    assert usage.bursts == (0,) and usage.evictable == (0,)
