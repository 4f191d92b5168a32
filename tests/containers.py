"""A real container engine for the tests: podman runs a busybox container with ``--device <CDI name>``.

podman 4.3 (Debian 12) reads CDI specs only from /etc/cdi and /var/run/cdi of the real machine, so
for each run the specs a test names (a simulated host's, a prepared claim's) are copied into /run/cdi
under names of this process's own and removed afterwards. The container's root filesystem is the
host's static busybox. Simulated hosts made with ``--char-devices`` have real character devices
(/dev/null's numbers) that the specs' ``hostPath`` names, so runc can create them in the container.

Needs root, podman, runc and busybox (scripts/setup.sh installs them); in CI (``CI=true``) a missing
tool fails the test instead of skipping it. Used by tests/attach/test_podman.py and
tests/k8s/test_dra_podman.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

PODMAN_OPTS = ["--runtime", "runc", "--cgroup-manager", "cgroupfs", "run", "--rm", "--network", "none",
               "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]  # fmt: skip
TOOLS = ("sh", "ls", "cat", "env", "test")


def need_tools() -> None:
    """Skip (fail in CI) unless podman, runc and busybox are here and this process is root."""
    missing = [t for t in ("podman", "runc", "busybox") if shutil.which(t) is None]
    why = f"missing {', '.join(missing)} (bash scripts/setup.sh installs podman and runc)" if missing else ""
    if os.geteuid() != 0:
        why = "podman runs as root here"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def busybox_rootfs(base: Path) -> Path:
    """``base/rootfs``: the static busybox as /bin/busybox and a few applets."""
    rootfs = base / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    busybox = shutil.which("busybox")
    assert busybox
    shutil.copy(busybox, rootfs / "bin" / "busybox")
    for tool in TOOLS:
        (rootfs / "bin" / tool).symlink_to("busybox")
    return rootfs


def root_is_a_mount() -> bool:
    """False in a chroot whose root directory is not itself a mount point (the fresh-machine check)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == "/" for line in f if len(line.split()) > 4)


def rerooted(top: Path, cmd: list[str]) -> list[str]:
    """``cmd`` in its own mount namespace whose root is a recursive bind mount of this one.

    runc makes the container's / a slave mount ("mount /, flags: 0x84000: invalid argument" where /
    is not a mount point, as in a chroot). A new mount namespace that binds / onto a directory and
    chroots there gives runc a / that is a mount point. The namespace keeps the host's propagation
    (private on these machines), and its mounts vanish with it.
    """
    top.mkdir(exist_ok=True)
    inner = f"mount --rbind / '{top}' && exec chroot '{top}' \"$@\""
    return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", inner, "sh", *cmd]


def run(
    base: Path, rootfs: Path, specs: Iterable[Path], devices: list[str], script: str
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a container with ``--device`` for each of ``devices``, the ``specs`` in view.

    The specs are copied into /run/cdi (the dynamic directory, which wins over /etc/cdi for the same
    device name) under names of this process's own, for this one run, and removed afterwards. (A
    private mount namespace would touch nothing, but cannot be made where / is not a mount point, as
    in a chroot.)
    """
    live = Path("/run/cdi")
    live.mkdir(parents=True, exist_ok=True)
    placed: list[Path] = []
    try:
        for spec in specs:
            placed.append(live / f"vgpukit-test-{os.getpid()}-{spec.name}")
            shutil.copyfile(spec, placed[-1])
        cmd = ["podman", *PODMAN_OPTS, *(a for d in devices for a in ("--device", d))]
        cmd += ["--rootfs", str(rootfs), "/bin/sh", "-c", script]
        if os.environ.get("VGPUKIT_TEST_PODMAN_REROOT") == "1" or not root_is_a_mount():
            cmd = rerooted(base / "reroot", cmd)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        for path in placed:
            path.unlink(missing_ok=True)
