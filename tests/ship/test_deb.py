"""The Debian package on a brand-new Debian 12 (a chroot from the session's debootstrap, minbase + python3):
install the previous version, upgrade to this one, run the demo tour's read commands on simulated
hosts, check the mdevctl alternative, units installed but not enabled; purge leaves the file system as
it was; lintian shows only the tags docs/install.md explains."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from .conftest import PREVIOUS, need, version
from .debian import Chroot

pytestmark = pytest.mark.ship
# what a purge may change: apt's and dpkg's own records, caches, logs, our scratch space
SNAPSHOT = (
    "find / -xdev \\( -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/cache -o -path /var/log "
    "-o -path /tmp -o -path /root -o -path /etc/ld.so.cache \\) -prune -o -print | LC_ALL=C sort"
)
# lintian tags docs/install.md explains (the private directory of vendored dependencies)
EXPLAINED = {"embedded-library", "unusual-interpreter"}


def _lintian(deb: Path) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="vgpukit-lintian-") as tmp:  # it leaves an mldbm-elf-* file there
        return subprocess.run(
            ["lintian", "--no-tag-display-limit", str(deb)],
            capture_output=True,
            text=True,
            env={**os.environ, "TMPDIR": tmp},
        )


@pytest.fixture(scope="module", autouse=True)
def lintian_job(debs: dict[str, Path]) -> Iterator[Future[subprocess.CompletedProcess[str]] | None]:
    """lintian of the package, started before the chroot tests and run while they do (it reads only the
    .deb); test_lintian reads its answer."""
    if shutil.which("lintian") is None:
        yield None
        return
    with ThreadPoolExecutor(1, thread_name_prefix="lintian") as pool:
        yield pool.submit(_lintian, debs["current"])


@pytest.fixture(scope="module")
def machine(debs: dict[str, Path], debian_base: Path) -> Iterator[Chroot]:
    need(("chroot", "mount", "tar"), root=True)
    box = Chroot(debian_base)
    try:
        for deb in debs.values():
            (box.root / "tmp" / deb.name).write_bytes(deb.read_bytes())
        box.run("apt-get update -qq")
        box.run(f"{SNAPSHOT} > /tmp/before")
        yield box
    finally:
        box.close()


def test_install_upgrade_and_tour(machine: Chroot, debs: dict[str, Path]) -> None:
    machine.run(f"apt-get install -y -qq /tmp/{debs['previous'].name}")
    assert machine.run("vgpukit -V").stdout.split()[-1] == PREVIOUS
    machine.run(f"apt-get install -y -qq /tmp/{debs['current'].name}")
    assert machine.run("vgpukit -V").stdout.split()[-1] == version()
    assert machine.run("dpkg-query -W -f '${Version}' vgpukit").stdout == version()
    profiles = ("hgx-a100", "t4-mdev", "h100-vgpu")
    reads = ("devices", "devices --kind gpu", "topo", "topo --matrix", "sriov list", "mdev list", "mdev types",
             "vgpu list", "vgpu types gpu0", "mig status", "mig export -c demo", "render hostdev gpu0",
             "render domain --name vm --memory 4096 --vcpus 4 --device gpu0", "cdi generate --output -",
             "cdi generate", "cdi list", "k8s resources", "units list")  # fmt: skip
    machine.run(" && ".join(f"vgpukit sim init /tmp/{p} --profile {p} >/dev/null" for p in profiles))
    for p in profiles:
        machine.run(" && ".join(f"vgpukit --sim /tmp/{p} {c} >/dev/null" for c in reads))
    # the shims: /usr/sbin/mdevctl is vgpukit's through update-alternatives (no mdevctl package here)
    assert machine.run("readlink -f /usr/sbin/mdevctl").stdout.strip() == "/usr/lib/vgpukit/bin/mdevctl"
    machine.run("VGPUKIT_SIM=/tmp/t4-mdev mdevctl list && VGPUKIT_SIM=/tmp/t4-mdev lsmdev")
    # the watch's runtime dependency: Debian's python3-pyudev (the Depends) over libudev1, loadable
    machine.run("python3 -c 'import pyudev; pyudev.Context()' && dpkg-query -W libudev1 python3-pyudev")
    # and /usr/bin/nvidia-mig-parted (no nvidia-mig-manager package here)
    assert (
        machine.run("readlink -f /usr/bin/nvidia-mig-parted").stdout.strip() == "/usr/lib/vgpukit/bin/nvidia-mig-parted"
    )
    machine.run("VGPUKIT_SIM=/tmp/hgx-a100 nvidia-mig-parted -d export | grep -q 'mig-enabled: false'")
    units = machine.run("vgpukit units list --json").stdout
    assert "/usr/bin/vgpukit" in units
    machine.run(
        "test -f /lib/systemd/system/vgpukit-qos.service && grep -q '^ExecStart=/usr/bin/vgpukit ' "
        "/lib/systemd/system/vgpukit-qos.service && ! ls /etc/systemd/system/*.wants/vgpukit* 2>/dev/null"
    )
    machine.run(
        "test -f /usr/share/man/man1/vgpukit.1.gz && test -f /usr/share/bash-completion/completions/vgpukit"
        " && test -f /usr/lib/vgpukit/libvgpukit-cuda.so"
    )
    # never into the system's site-packages; Debian's click, the vendored NVML binding
    machine.run(
        "! python3 -c 'import vgpukit' 2>/dev/null && ! python3 -c 'import pynvml' 2>/dev/null"
        " && python3 -c 'import click'"
    )


def test_purge_leaves_the_host_as_it_was(machine: Chroot) -> None:
    machine.run("mkdir -p /etc/vgpukit /etc/mdevctl.d && echo keep > /etc/vgpukit/qos.yaml")
    machine.run("apt-get purge -y -qq vgpukit && apt-get autoremove -y -qq --purge")
    machine.run("test -f /etc/vgpukit/qos.yaml && rm -r /etc/vgpukit /etc/mdevctl.d")  # the operator's: kept
    machine.run("test ! -e /usr/sbin/mdevctl && test ! -e /usr/bin/nvidia-mig-parted")
    machine.run(f"{SNAPSHOT} > /tmp/after")
    diff = machine.run("diff /tmp/before /tmp/after", check=False).stdout
    assert diff == "", diff


def test_lintian(debs: dict[str, Path], lintian_job: Future[subprocess.CompletedProcess[str]] | None) -> None:
    need(("lintian",))
    done = lintian_job.result() if lintian_job is not None else _lintian(debs["current"])
    tags = {line.split()[2] for line in done.stdout.splitlines() if line[:2] in ("E:", "W:")}
    assert tags <= EXPLAINED, sorted(tags - EXPLAINED)
