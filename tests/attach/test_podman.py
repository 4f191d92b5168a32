"""CDI proven by a real container engine: podman runs a container with ``--device vgpukit.io/...``.

The simulated host is made with ``--char-devices`` (its nodes are real character devices with
/dev/null's numbers), spec generation is enabled once, and every later change is followed by the
engine's refresh. podman 4.3 (Debian 12) reads specs only from /etc/cdi and /var/run/cdi, so for each
run the simulated host's current specs are copied into /run/cdi under this test's own file names and
removed afterwards. The container's root filesystem is the host's static busybox.

Needs root, podman and runc (scripts/setup.sh installs them); in CI a missing tool fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import Run

from .test_cdi import validate_cdi

NIC = "0000:05:00.0"
PODMAN_OPTS = ["--runtime", "runc", "--cgroup-manager", "cgroupfs", "run", "--rm", "--network", "none",
               "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]  # fmt: skip
REPO = Path(__file__).resolve().parents[2]


def _need_tools() -> None:
    missing = [t for t in ("podman", "runc", "busybox") if shutil.which(t) is None]
    why = f"missing {', '.join(missing)} (bash scripts/setup.sh installs podman and runc)" if missing else ""
    if os.geteuid() != 0:
        why = "podman runs as root here"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    _need_tools()
    base = tmp_path_factory.mktemp("podman")
    rootfs = base / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    busybox = shutil.which("busybox")
    assert busybox
    shutil.copy(busybox, rootfs / "bin" / "busybox")
    for tool in ("sh", "ls", "cat", "env", "test"):
        (rootfs / "bin" / tool).symlink_to("busybox")
    return {"base": base, "rootfs": rootfs}


def _root_is_a_mount() -> bool:
    """False in a chroot whose root directory is not itself a mount point (the fresh-machine check)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == "/" for line in f if len(line.split()) > 4)


def _rerooted(top: Path, cmd: list[str]) -> list[str]:
    """``cmd`` in its own mount namespace whose root is a recursive bind mount of this one.

    runc makes the container's / a slave mount ("mount /, flags: 0x84000: invalid argument" where /
    is not a mount point, as in a chroot). A new mount namespace that binds / onto a directory and
    chroots there gives runc a / that is a mount point. The namespace keeps the host's propagation
    (private on these machines), and its mounts vanish with it.
    """
    top.mkdir(exist_ok=True)
    inner = f"mount --rbind / '{top}' && exec chroot '{top}' \"$@\""
    return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", inner, "sh", *cmd]


def podman(world: dict[str, Path], sim: Path, device: str, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a container with ``--device device``, the simulated host's specs in view.

    podman 4.3 reads specs only from /etc/cdi and /var/run/cdi, so the simulated host's current specs
    are copied into /run/cdi (the dynamic directory, which wins over /etc/cdi for the same device
    name) under names of this test's own, for this one run, and removed afterwards. (A private mount
    namespace would touch nothing, but cannot be made where / is not a mount point, as in a chroot.)
    """
    live = Path("/run/cdi")
    live.mkdir(parents=True, exist_ok=True)
    placed: list[Path] = []
    try:
        for spec in sorted((sim / "var" / "run" / "cdi").iterdir()):
            if spec.suffix in (".yaml", ".json"):
                placed.append(live / f"vgpukit-test-{os.getpid()}-{spec.name}")
                shutil.copyfile(spec, placed[-1])
        cmd = ["podman", *PODMAN_OPTS, "--device", device, "--rootfs", str(world["rootfs"]), "/bin/sh", "-c", script]
        if os.environ.get("VGPUKIT_TEST_PODMAN_REROOT") == "1" or not _root_is_a_mount():
            cmd = _rerooted(world["base"] / "reroot", cmd)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        for path in placed:
            path.unlink(missing_ok=True)


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
