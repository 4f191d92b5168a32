"""CDI proven by a real container engine: podman runs a container with ``--device vgpukit.io/...``.

The simulated host is made with ``--char-devices`` (its nodes are real character devices with
/dev/null's numbers), spec generation is enabled once, and every later change is followed by the
engine's refresh. For each run the simulated host's current specs are copied into the real /run/cdi
(podman 4.3 reads only /etc/cdi and /var/run/cdi) and removed afterwards; the container's root
filesystem is the host's static busybox (tests/containers.py, shared with the DRA end-to-end test).

Needs root, podman and runc (scripts/setup.sh installs them); in CI a missing tool fails the test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests import containers
from tests.conftest import Run

from .test_cdi import validate_cdi

NIC = "0000:05:00.0"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    containers.need_tools()
    base = tmp_path_factory.mktemp("podman")
    return {"base": base, "rootfs": containers.busybox_rootfs(base)}


def podman(world: dict[str, Path], sim: Path, device: str, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a container with ``--device device``, the simulated host's current specs in view."""
    specs = [s for s in sorted((sim / "var" / "run" / "cdi").iterdir()) if s.suffix in (".yaml", ".json")]
    return containers.run(world["base"], world["rootfs"], specs, [device], script)


@pytest.fixture(scope="module")
def gpu_host(world: dict[str, Path]) -> Path:
    """hgx-a100 with CDI enabled, a VFIO VF, a MIG slice and a QoS tenant (gpu-share)."""
    from vgpukit.cli.main import main

    sim = world["base"] / "hgx"
    lib = sim / "usr/lib/vgpukit/libvgpukit-cuda.so"

    def vg(*args: str) -> None:
        assert main(["--sim", str(sim), *args]) == 0, args

    assert main(["sim", "init", str(sim), "--profile", "hgx-a100", "--char-devices"]) == 0
    lib.parent.mkdir(parents=True)
    built = REPO / "build" / "libvgpukit-cuda.so"
    lib.write_bytes(built.read_bytes() if built.exists() else b"placeholder\n")
    (sim / "etc/vgpukit/qos.yaml").write_text(
        "gpus:\n  gpu0:\n    tenants:\n      train: {class: offline, share: 50, pids: [4242], memory: 1GiB}\n"
    )
    (sim / "run/vgpukit/cuda/train").mkdir(parents=True)
    (sim / "run/vgpukit/cuda/train/config").write_text("memory=1073741824\n")
    vg("cdi", "enable", "--dir", "/var/run/cdi", "--hook", str(sim / "usr/bin/nvidia-cdi-hook"))
    vg("sriov", "enable", "nic0", "--vfs", "1", "--driver", "vfio-pci")
    vg("partition", "gpu1", "--mig", "3g.20gb")
    for spec in (sim / "var/run/cdi").iterdir():
        validate_cdi(yaml.safe_load(spec.read_text()))
    return sim


def _spec(sim: Path, cls: str) -> dict[str, object]:
    doc = yaml.safe_load((sim / f"var/run/cdi/vgpukit-{cls}.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_vf_through_vfio_group_node(world: dict[str, Path], gpu_host: Path) -> None:
    vf = yaml.safe_load((gpu_host / "var/run/cdi/vgpukit-vf.yaml").read_text())["devices"][0]
    group = vf["containerEdits"]["deviceNodes"][1]["path"]
    res = podman(world, gpu_host, f"vgpukit.io/vf={vf['name']}", f"ls -l /dev/vfio/vfio {group}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("crw") == 2 and group.rsplit("/", 1)[1] in res.stdout


def test_mig_slice_nodes_and_driver(world: dict[str, Path], gpu_host: Path) -> None:
    """The MIG slice's GPU node and its GI/CI access nodes, the control nodes, the driver's libraries
    and binaries, and the ldconfig hook run by runc with nvidia-ctk's arguments."""
    log = gpu_host / "run/nvidia-cdi-hook.log"
    log.unlink(missing_ok=True)
    mig = _spec(gpu_host, "mig")["devices"][1]  # MIG-<uuid>
    assert isinstance(mig, dict) and str(mig["name"]).startswith("MIG-")
    caps = [n["path"] for n in mig["containerEdits"]["deviceNodes"]][1:]
    script = (
        f"ls -l /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm {' '.join(caps)}"
        " && test -f /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05 && test -x /usr/bin/nvidia-smi && env"
    )
    res = podman(world, gpu_host, f"vgpukit.io/mig={mig['name']}", script)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("crw") == 5
    assert "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu" in res.stdout
    calls = log.read_text().splitlines()
    assert "update-ldcache --folder /usr/lib/x86_64-linux-gnu --folder /usr/lib/x86_64-linux-gnu/vdpau" in calls


def test_whole_gpu_by_index_and_all(world: dict[str, Path], gpu_host: Path) -> None:
    res = podman(world, gpu_host, "vgpukit.io/gpu=0", "ls -l /dev/nvidia0 && test ! -e /dev/nvidia2")
    assert res.returncode == 0, res.stderr
    res = podman(world, gpu_host, "vgpukit.io/gpu=all", "ls /dev/nvidia0 /dev/nvidia2 /dev/nvidia7")
    assert res.returncode == 0, res.stderr


def test_gpu_share_tenant(world: dict[str, Path], gpu_host: Path) -> None:
    script = (
        "env && test -f /usr/lib/vgpukit/libvgpukit-cuda.so && cat /run/vgpukit/cuda/train/config && ls -l /dev/nvidia0"
    )
    res = podman(world, gpu_host, "vgpukit.io/gpu-share=train", script)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "LD_PRELOAD=/usr/lib/vgpukit/libvgpukit-cuda.so" in out and "VGPUKIT_QOS_TENANT=train" in out
    assert "VGPUKIT_QOS_GPU=gpu0" in out and "VGPUKIT_CUDA_DIR=/run/vgpukit/cuda/train" in out
    assert "memory=1073741824" in out and "crw" in out


def test_mdev_and_stale_device_refused(world: dict[str, Path], run_cli: Run) -> None:
    """An mdev through its own group; after `mdev remove` the engine's refresh took it out of the spec,
    so podman refuses the name it no longer has."""
    from vgpukit.cli.main import main

    sim = world["base"] / "guest"
    assert main(["sim", "init", str(sim), "--profile", "qemu-guest", "--char-devices"]) == 0
    uuid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
    assert main(["--sim", str(sim), "cdi", "enable", "--dir", "/var/run/cdi"]) == 0
    assert main(["--sim", str(sim), "mdev", "create", "mtty", "mtty-2", "--uuid", uuid]) == 0
    res = podman(world, sim, f"vgpukit.io/mdev={uuid}", "ls -l /dev/vfio")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("crw") == 2
    assert main(["--sim", str(sim), "mdev", "remove", uuid]) == 0
    res = podman(world, sim, f"vgpukit.io/mdev={uuid}", "true")
    assert res.returncode != 0 and "unresolvable CDI devices" in res.stderr
