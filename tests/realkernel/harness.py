"""Boot Debian's own kernel in QEMU (software emulation) and run a batch of commands against it.

The guest is a busybox initramfs whose ``/init`` (``guest_init.sh``) mounts the host's root read-only
over 9p with a tmpfs overlay on top, chroots into it and runs each step with the host's own
``/bin/sh``: the project's code and Python interpreter act on the guest's real kernel. The machine
has an SR-IOV NVMe controller (1b36:0010, 3 VFs), an Intel IOMMU (real IOMMU groups and
/dev/vfio) and, optionally, the kernel's ``mtty`` sample mdev parent built out of tree.

Everything comes from Debian's package registry at run time and is cached under
``${VGPUKIT_CACHE:-~/.cache/vgpukit}/realkernel``. One boot runs a whole batch (boots cost ~10 s).

Use from Python::

    rk = RealKernel(Config.from_env())
    rk.prepare()                       # raises Unavailable (a reason to skip) when it cannot
    run = rk.run([GuestStep("topo", rk.vgpukit_command("topo", "--json"))])
    run["topo"].json()

or from a shell: ``python -m tests.realkernel.harness --vgpukit 'sriov list' --sh 'ls /sys/class/mdev_bus'``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parents[1]
GUEST_OUT = "/run/vgpukit-guest-out"  # where the out share is mounted inside the guest's chroot

BASE_PACKAGES = ("qemu-system-x86", "busybox-static", "cpio", "gzip", "kmod")
# + linux-headers-<abi>-amd64, which pulls kbuild, common and the compiler; xz-utils unpacks linux-source
MTTY_PACKAGES = ("make", "xz-utils")
# libvirt as a client of mdevctl (test_libvirt_mdev_realkernel.py): libvirtd with its nodedev driver
# (pulls libvirt-daemon-driver-qemu and five small libraries) and virsh; the guest runs the host's root.
LIBVIRT_PACKAGES = (
    "libvirt-daemon",
    "libvirt-clients",
    "qemu-utils",
    "iproute2",
)  # qemu-img: render domain's disk; ip: its bridge
MIN_INITRD_BYTES = 512 * 1024  # busybox alone is larger: anything smaller is a broken build
INITRD_KEEP_SECONDS = 24 * 3600  # an initrd of another module set is removed once unused for this long
# Guest modules in load order (their dependencies are resolved with modprobe --show-depends).
GUEST_MODULES = (
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    "overlay",
    "nvme",
    "vfio_iommu_type1",
    "vfio-pci",
    "mdev",
    "bridge",  # render domain's NIC on a Linux bridge, through a tap device (tun)
    "tun",
)
NVME_PF = "0000:00:02.0"
NVME_IDS = "1b36:0010"
NVME_TOTAL_VFS = 3


class Unavailable(RuntimeError):
    """The real-kernel harness cannot run here; the message says why (used as the skip reason)."""


def _truthy(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).strip().lower() in ("1", "yes", "true", "on")


def in_ci() -> bool:
    """CI=true: whatever the suite promises must run; "cannot run here" is a failure, not a skip."""
    return _truthy("CI")


def skip_or_fail(reason: str) -> NoReturn:
    """Skip a real-kernel test locally; fail it in CI (a suite that could not run is not a pass)."""
    import pytest

    if in_ci():
        pytest.fail(f"real-kernel suite could not run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class Config:
    cache_dir: Path
    python: str  # interpreter used inside the guest (a path on the host, seen identically in the chroot)
    checkout: Path  # the vgpukit checkout whose code runs in the guest (PYTHONPATH)
    mtty: bool = True  # build and load the mtty sample mdev parent
    abi: str | None = None  # "6.1.0-56"; resolved from linux-image-amd64 when None
    install: bool = True  # apt-get install missing packages (needs root)
    memory_mb: int = 1024
    smp: int = 1  # one vCPU: under TCG a second one makes every step slower (CONTRIBUTING.md, the suite's time budget)
    timeout: float = 600.0  # whole run
    accel: str = "tcg"  # kvm hangs on the reference machines

    @classmethod
    def from_env(cls) -> Config:
        cache = Path(os.environ.get("VGPUKIT_CACHE") or Path.home() / ".cache" / "vgpukit") / "realkernel"
        checkout = Path(os.environ.get("VGPUKIT_REALKERNEL_CHECKOUT") or CHECKOUT)
        python = os.environ.get("VGPUKIT_REALKERNEL_PYTHON") or _default_python(checkout)
        return cls(
            cache_dir=cache,
            python=python,
            checkout=checkout,
            mtty=_truthy("VGPUKIT_REALKERNEL_MTTY", "1"),
            abi=os.environ.get("VGPUKIT_REALKERNEL_ABI") or None,
            install=not _truthy("VGPUKIT_REALKERNEL_NO_INSTALL"),
            memory_mb=int(os.environ.get("VGPUKIT_REALKERNEL_MEMORY", "1024")),
            accel=os.environ.get("VGPUKIT_REALKERNEL_ACCEL", "tcg"),
            smp=int(os.environ.get("VGPUKIT_REALKERNEL_SMP", "1")),
        )


def _default_python(checkout: Path) -> str:
    venv = checkout / ".venv" / "bin" / "python"
    if venv.exists():
        return str(venv)
    return sys.executable


@dataclass
class GuestStep:
    """One command run in the guest with the host's ``/bin/sh``, in the checkout directory."""

    name: str
    command: str
    timeout: int = 180

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", self.name):
            raise ValueError(f"step name {self.name!r}: use letters, digits, . _ -")


@dataclass
class StepResult:
    name: str
    rc: int | None  # None: the step never finished (guest crashed or the run timed out)
    stdout: str
    stderr: str
    seconds: float | None

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def json(self) -> Any:
        return json.loads(self.stdout)

    def describe(self) -> str:
        return f"step {self.name}: rc={self.rc}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


@dataclass
class GuestRun:
    steps: dict[str, StepResult]
    console: str
    seconds: float  # wall clock of the whole qemu run (boot + steps + poweroff)
    out_dir: Path
    boot_seconds: float | None = None  # guest uptime when the first step started

    def __getitem__(self, name: str) -> StepResult:
        return self.steps[name]

    @property
    def completed(self) -> bool:
        return "@@VGPUKIT-DONE" in self.console

    def console_tail(self, lines: int = 60) -> str:
        return "\n".join(self.console.splitlines()[-lines:])


@dataclass
class Assets:
    abi: str
    vmlinuz: Path
    initrd: Path
    mtty: bool
    mdevctl: Path | None = None  # Debian's mdevctl package unpacked (dpkg-deb -x) here, on the host
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- host preparation
def _run(cmd: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=False, text=True, capture_output=True, **kw)


def status_is_installed(status: str) -> bool:
    """dpkg's status is exactly "install ok installed" ("unknown ok not-installed" also ends in "installed")."""
    return status.strip() == "install ok installed"


def _installed(pkg: str) -> bool:
    proc = _run(["dpkg-query", "-W", "-f=${Status}", pkg])
    return proc.returncode == 0 and status_is_installed(proc.stdout)


def run_pipeline(script: str, what: str, cwd: Path | None = None) -> None:
    """Run a shell pipeline with bash's pipefail: a failure anywhere in it is a failure."""
    _check(_run(["bash", "-c", "set -euo pipefail; " + script], cwd=cwd), what)


_apt_updated = False


def ensure_packages(packages: Sequence[str], install: bool) -> None:
    """Install the Debian packages that are missing, or raise Unavailable saying which are."""
    global _apt_updated
    if not shutil.which("dpkg-query"):
        raise Unavailable("not a Debian-based host (no dpkg-query): cannot provide QEMU and Debian's kernel")
    missing = [p for p in packages if not _installed(p)]
    if not missing:
        return
    if not install or os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable(f"missing Debian packages {' '.join(missing)} (install them as root, or run as root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600", *missing]
    proc = _run(cmd, env=env)
    if proc.returncode != 0 and not _apt_updated:
        _run(["apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=600"], env=env)
        _apt_updated = True
        proc = _run(cmd, env=env)
    if proc.returncode != 0:
        raise Unavailable(f"apt-get install {' '.join(missing)} failed: {proc.stderr.strip()[-400:]}")
    still = [p for p in missing if not _installed(p)]
    if still:
        raise Unavailable(f"apt-get install succeeded but {' '.join(still)} is still not installed")


def resolve_abi(config: Config) -> str:
    if config.abi:
        return config.abi
    proc = _run(["apt-cache", "depends", "linux-image-amd64"])
    m = re.search(r"Depends:\s*linux-image-(\d[\w.+-]*?)-amd64\b", proc.stdout)
    if not m:
        cached = sorted(config.cache_dir.glob("kernel-*/boot/vmlinuz-*"))
        if cached:
            return cached[-1].name.removeprefix("vmlinuz-").removesuffix("-amd64")
        raise Unavailable("cannot resolve Debian's kernel ABI (apt-cache depends linux-image-amd64 found nothing)")
    return m.group(1)


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _download(cache: Path, package: str) -> Path:
    """``apt-get download`` PACKAGE into the cache (once); the .deb's path."""
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if found:
        return found[-1]
    proc = _run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", package], cwd=debs)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if proc.returncode != 0 or not found:
        raise Unavailable(f"apt-get download {package} failed: {proc.stderr.strip()[-400:]}")
    return found[-1]


def _extract_kernel(cache: Path, abi: str) -> Path:
    """The kernel image and the modules the guest loads (``.complete`` names them: another set extracts again)."""
    kdir = cache / f"kernel-{abi}"
    wanted = "\n".join(GUEST_MODULES) + "\n"
    done = kdir / ".complete"
    if done.exists() and done.read_text() == wanted:
        return kdir
    if done.exists() and all(ko.exists() for ko in _module_files(kdir, abi, GUEST_MODULES)):
        done.write_text(wanted)  # made before the set was recorded, and holding it all
        return kdir
    deb = _download(cache, f"linux-image-{abi}-amd64")
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".kernel-"))
    try:
        _check(_run(["dpkg-deb", "-x", str(deb), str(tmp)]), "dpkg-deb -x")
        _check(_run(["depmod", "-b", str(tmp), f"{abi}-amd64"]), "depmod")
        keep = set(_module_files(tmp, abi, GUEST_MODULES))
        for ko in (tmp / "lib" / "modules").rglob("*.ko"):  # ~400 MB of modules the guest never loads
            if ko not in keep:
                ko.unlink()
        (tmp / ".complete").write_text(wanted)
        if kdir.exists():
            shutil.rmtree(kdir)
        tmp.rename(kdir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    deb.unlink(missing_ok=True)  # extracted and pruned: the .deb is not needed any more
    return kdir


def _check(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        raise Unavailable(f"{what} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-400:]}")


def build_mtty(cache: Path, abi: str, install: bool) -> Path:
    """The kernel's samples/vfio-mdev/mtty.c built out of tree against Debian's headers (cached)."""
    ko = cache / f"mtty-{abi}.ko"
    if _is_module(ko):
        return ko
    ensure_packages((*MTTY_PACKAGES, f"linux-headers-{abi}-amd64"), install)
    series = ".".join(abi.split(".")[:2])  # 6.1
    src_deb = _download(cache, f"linux-source-{series}")
    work = Path(tempfile.mkdtemp(dir=cache, prefix=".mtty-"))
    try:
        member = f"linux-source-{series}/samples/vfio-mdev/mtty.c"
        pipeline = (
            f"dpkg-deb --fsys-tarfile {shlex.quote(str(src_deb))}"
            f" | tar -xO ./usr/src/linux-source-{series}.tar.xz"
            f" | tar -xJ -C {shlex.quote(str(work))} --strip-components=3 {shlex.quote(member)}"
        )
        run_pipeline(pipeline, "extracting mtty.c from linux-source")
        (work / "Makefile").write_text("obj-m := mtty.o\n")
        headers = Path(f"/usr/src/linux-headers-{abi}-amd64")
        _check(_run(["make", "-s", "-C", str(headers), f"M={work}", "modules"]), "building mtty.ko")
        if not _is_module(work / "mtty.ko"):
            raise Unavailable("building mtty.ko produced no loadable module")
        shutil.copy2(work / "mtty.ko", str(ko) + ".tmp")
        os.replace(str(ko) + ".tmp", ko)
        src_deb.unlink(missing_ok=True)  # 140 MB, only mtty.c was needed
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ko


def _is_module(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF" and path.stat().st_size > 4096
    except OSError:
        return False


def unpack_mdevctl(cache: Path) -> Path:
    """Debian's own ``mdevctl`` package unpacked into the cache (``usr/bin/mdevctl``, ``etc/mdevctl.d``)."""
    tree = cache / "mdevctl"
    if (tree / ".complete").exists() and (tree / "usr" / "bin" / "mdevctl").is_file():
        return tree
    deb = _download(cache, "mdevctl")
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".mdevctl-"))
    try:
        _check(_run(["dpkg-deb", "-x", str(deb), str(tmp)]), "dpkg-deb -x mdevctl")
        if not (tmp / "usr" / "bin" / "mdevctl").is_file():
            raise Unavailable("the mdevctl package holds no usr/bin/mdevctl")
        (tmp / ".complete").touch()
        if tree.exists():
            shutil.rmtree(tree)
        tmp.rename(tree)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return tree


def _module_files(kdir: Path, abi: str, names: Sequence[str]) -> list[Path]:
    """The .ko files for ``names`` with their dependencies, in load order, deduplicated."""
    files: list[Path] = []
    for name in names:
        proc = _run(["modprobe", "-d", str(kdir), "-S", f"{abi}-amd64", "--show-depends", name])
        _check(proc, f"modprobe --show-depends {name}")
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "insmod":
                p = Path(parts[1])
                if p not in files:
                    files.append(p)
    return files


def initrd_ok(path: Path) -> bool:
    """A plausible initrd: big enough to hold busybox and the modules, and a complete gzip stream."""
    try:
        if path.stat().st_size < MIN_INITRD_BYTES:
            return False
    except OSError:
        return False
    return _run(["gzip", "-t", str(path)]).returncode == 0


def build_initrd(cache: Path, kdir: Path, abi: str, mtty_ko: Path | None) -> Path:
    busybox = shutil.which("busybox") or "/bin/busybox"
    modules = _module_files(kdir, abi, GUEST_MODULES)
    extra = [mtty_ko] if mtty_ko else []
    init = (HERE / "guest_init.sh").read_bytes()
    digest = hashlib.sha256(init)
    for p in [Path(busybox), *modules, *extra]:
        digest.update(str(p).encode())
        digest.update(str(p.stat().st_size).encode())
    out = cache / f"initrd-{abi}-{digest.hexdigest()[:16]}.gz"
    if initrd_ok(out):
        os.utime(out)  # in use: kept by the clean-up below of another checkout's build
        return out
    root = Path(tempfile.mkdtemp(dir=cache, prefix=".initrd-"))
    try:
        for d in ("bin", "sbin", "proc", "sys", "dev", "lib/modules"):
            (root / d).mkdir(parents=True, exist_ok=True)
        shutil.copy2(busybox, root / "bin" / "busybox")
        applets = _run([busybox, "--list"]).stdout.split()
        for applet in applets:
            link = root / "bin" / applet
            if not link.exists():
                link.symlink_to("busybox")
        listed: list[str] = []
        for ko in [*modules, *extra]:
            dest = root / "lib" / "modules" / ko.name
            shutil.copy2(ko, dest)
            listed.append(f"/lib/modules/{ko.name}")
        (root / "modules.list").write_text("\n".join(listed) + "\n")
        (root / "init").write_bytes(init)
        (root / "init").chmod(0o755)
        tmp_out = str(out) + ".tmp"
        pipeline = f"find . -print0 | cpio --null -o -H newc --quiet | gzip -1 > {shlex.quote(tmp_out)}"
        run_pipeline(pipeline, "packing the initrd (find | cpio | gzip)", cwd=root)
        if not initrd_ok(Path(tmp_out)):
            Path(tmp_out).unlink(missing_ok=True)
            raise Unavailable(f"the initrd came out broken (under {MIN_INITRD_BYTES} bytes or not gzip)")
        os.replace(tmp_out, out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for old in cache.glob(f"initrd-{abi}-*.gz"):  # another module set's, unused for a day: gone
        # (not at once: a checkout with other GUEST_MODULES may be booting it now, on a shared cache)
        if old != out and time.time() - old.stat().st_mtime > INITRD_KEEP_SECONDS:
            old.unlink(missing_ok=True)
    return out


# --------------------------------------------------------------------------- running the guest
class RealKernel:
    """Prepare once, then boot as many batches as needed (each boot is a fresh guest)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config.from_env()
        self.assets: Assets | None = None

    def prepare(self) -> Assets:
        if self.assets is not None:
            return self.assets
        cfg = self.config
        if sys.platform != "linux":
            raise Unavailable("the real-kernel harness needs a Linux host")
        if not Path(cfg.python).exists():
            raise Unavailable(f"guest python {cfg.python} does not exist (set VGPUKIT_REALKERNEL_PYTHON)")
        ensure_packages(BASE_PACKAGES, cfg.install)
        abi = resolve_abi(cfg)
        with _locked(cfg.cache_dir):
            kdir = _extract_kernel(cfg.cache_dir, abi)
            notes: list[str] = []
            mtty_ko: Path | None = None
            if cfg.mtty:
                try:
                    mtty_ko = build_mtty(cfg.cache_dir, abi, cfg.install)
                except Unavailable as exc:
                    notes.append(f"mtty unavailable: {exc}")
            initrd = build_initrd(cfg.cache_dir, kdir, abi, mtty_ko)
            mdevctl: Path | None = None
            try:
                mdevctl = unpack_mdevctl(cfg.cache_dir)
            except Unavailable as exc:
                notes.append(f"mdevctl unavailable: {exc}")
            try:
                ensure_packages(LIBVIRT_PACKAGES, cfg.install)
            except Unavailable as exc:
                notes.append(f"libvirt unavailable: {exc}")
        self.assets = Assets(
            abi=abi,
            vmlinuz=kdir / "boot" / f"vmlinuz-{abi}-amd64",
            initrd=initrd,
            mtty=mtty_ko is not None,
            mdevctl=mdevctl,
            notes=notes,
        )
        return self.assets

    def vgpukit_command(self, *args: str) -> str:
        """Shell command running ``python -m vgpukit ARGS`` from the checkout in the guest."""
        return " ".join(shlex.quote(a) for a in (self.config.python, "-m", "vgpukit", *args))

    def install_mdevctl_command(self) -> str:
        """Shell command that installs Debian's mdevctl in the guest's writable root (the overlay) the
        way the package does: ``/usr/bin/mdevctl``, ``lsmdev`` and ``/etc/mdevctl.d/scripts.d/{callouts,notifiers}``."""
        assets = self.prepare()
        if assets.mdevctl is None:
            raise Unavailable("mdevctl could not be unpacked: " + "; ".join(assets.notes))
        tree = shlex.quote(str(assets.mdevctl))
        return (
            f"cp {tree}/usr/bin/mdevctl /usr/bin/mdevctl && ln -sf mdevctl /usr/bin/lsmdev"
            f" && mkdir -p /etc/mdevctl.d && cp -a {tree}/etc/mdevctl.d/. /etc/mdevctl.d/"
            " && mdevctl --version"
        )

    def python_command(self, *args: str) -> str:
        return " ".join(shlex.quote(a) for a in (self.config.python, *args))

    def qemu_argv(self, assets: Assets, out_dir: Path) -> list[str]:
        cfg = self.config
        accel = ["-accel", cfg.accel]
        return [
            "qemu-system-x86_64",
            *accel,
            "-m",
            str(cfg.memory_mb),
            "-smp",
            str(cfg.smp),
            "-M",
            "q35,kernel-irqchip=split",
            "-device",
            "intel-iommu,intremap=on",
            "-nographic",
            "-no-reboot",
            "-net",
            "none",
            "-kernel",
            str(assets.vmlinuz),
            "-initrd",
            str(assets.initrd),
            "-append",
            "console=ttyS0 quiet intel_iommu=on panic=-1 no_timer_check",  # TCG under load: no IO-APIC timer check
            "-device",  # a PCIe root port (a PCI-to-PCI bridge, header type 1) on pcieport, nothing behind it
            "pcie-root-port,id=rp0,bus=pcie.0,chassis=1,addr=0x1c",
            "-device",
            "nvme-subsys,id=subsys0",
            "-device",
            "nvme,serial=deadbeef,subsys=subsys0,sriov_max_vfs=3,sriov_vq_flexible=8,sriov_vi_flexible=4,"
            "max_ioqpairs=13,msix_qsize=9",
            "-virtfs",
            "local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap",
            "-virtfs",
            f"local,path={out_dir},mount_tag=vgpukitout,security_model=none,multidevs=remap",
        ]

    def steps_script(self, steps: Sequence[GuestStep], extra_env: dict[str, str] | None = None) -> str:
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(self.config.checkout),
            "PYTHONDONTWRITEBYTECODE": "1",
            "VGPUKIT_IN_GUEST": "1",
            "VGPUKIT_GUEST_OUT": GUEST_OUT,
            "VGPUKIT_SKIP_REALKERNEL": "1",  # no nested guests
            **(extra_env or {}),
        }
        prefix = "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        lines = ["# generated by tests/realkernel/harness.py"]
        for s in steps:
            inner = f"cd {shlex.quote(str(self.config.checkout))} && {s.command}"
            full = f"{prefix} /bin/sh -c {shlex.quote(inner)}"
            lines.append(f"step {s.name} {int(s.timeout)} {shlex.quote(full)}")
        return "\n".join(lines) + "\n"

    def run(
        self,
        steps: Sequence[GuestStep],
        keep_dir: Path | None = None,
        env: dict[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> GuestRun:
        """Boot one guest, run ``steps`` in order, power off; every step's outcome. ``cancel``: set
        it to stop the guest early (the steps not finished then have no outcome)."""
        names = [s.name for s in steps]
        if len(set(names)) != len(names):
            raise ValueError("step names must be unique")
        assets = self.prepare()
        out_dir = keep_dir or Path(tempfile.mkdtemp(prefix="vgpukit-guest-"))
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "steps.sh").write_text(self.steps_script(steps, env))
        limit = self.config.timeout
        t0 = time.monotonic()
        with open(out_dir / "console.log", "w") as log:
            proc = subprocess.Popen(
                self.qemu_argv(assets, out_dir), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
            while proc.poll() is None:
                left = limit - (time.monotonic() - t0)
                if left <= 0 or (cancel is not None and cancel.is_set()):
                    proc.kill()
                    proc.wait()
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=min(left, 1.0))
        seconds = time.monotonic() - t0
        console = (out_dir / "console.log").read_text(errors="replace")
        results: dict[str, StepResult] = {}
        first_start: float | None = None
        for s in steps:
            rc: int | None = None
            took: float | None = None
            rc_file = out_dir / f"{s.name}.rc"
            if rc_file.exists():
                fields = rc_file.read_text().split()
                rc = int(fields[0])
                if len(fields) == 3:
                    took = float(fields[2]) - float(fields[1])
                    first_start = float(fields[1]) if first_start is None else first_start
            results[s.name] = StepResult(
                name=s.name,
                rc=rc,
                stdout=_read(out_dir / f"{s.name}.out"),
                stderr=_read(out_dir / f"{s.name}.err"),
                seconds=took,
            )
        run = GuestRun(steps=results, console=console, seconds=seconds, out_dir=out_dir, boot_seconds=first_start)
        return run

    def cleanup(self, run: GuestRun) -> None:
        shutil.rmtree(run.out_dir, ignore_errors=True)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def skip_reason() -> str | None:
    """Why real-kernel tests must be skipped without even trying, or None."""
    if _truthy("VGPUKIT_SKIP_REALKERNEL"):
        return "VGPUKIT_SKIP_REALKERNEL=1"
    if sys.platform != "linux":
        return "the real-kernel suite needs a Linux host"
    return None


# --------------------------------------------------------------------------- command line
def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Run commands in a QEMU guest booting Debian's kernel.")
    ap.add_argument("--vgpukit", action="append", default=[], metavar="ARGS", help="vgpukit arguments (repeatable)")
    ap.add_argument("--sh", action="append", default=[], metavar="CMD", help="shell command in the guest (repeatable)")
    ap.add_argument("--no-mtty", action="store_true", help="do not build/load the mtty sample driver")
    ap.add_argument("--keep", metavar="DIR", help="keep the run directory (console.log, step outputs) here")
    ap.add_argument("--prepare-only", action="store_true", help="download and build the assets, do not boot")
    args = ap.parse_args(argv)
    cfg = Config.from_env()
    if args.no_mtty:
        cfg.mtty = False
    rk = RealKernel(cfg)
    try:
        assets = rk.prepare()
    except Unavailable as exc:
        print(f"real kernel unavailable: {exc}", file=sys.stderr)
        return 77
    print(f"kernel {assets.abi}, initrd {assets.initrd}, mtty={'yes' if assets.mtty else 'no'}", file=sys.stderr)
    for note in assets.notes:
        print(note, file=sys.stderr)
    if args.prepare_only:
        return 0
    steps: list[GuestStep] = []
    for i, a in enumerate(args.vgpukit):
        steps.append(GuestStep(f"vgpukit-{i}", rk.vgpukit_command(*shlex.split(a))))
    for i, c in enumerate(args.sh):
        steps.append(GuestStep(f"sh-{i}", c))
    run = rk.run(steps, keep_dir=Path(args.keep) if args.keep else None)
    failed = 0
    for r in run.steps.values():
        print(f"===== {r.name} rc={r.rc} ({r.seconds if r.seconds is not None else '?'} s)")
        sys.stdout.write(r.stdout)
        if r.stderr:
            sys.stdout.write("--- stderr\n" + r.stderr)
        failed += 0 if r.ok else 1
    print(f"===== guest run {run.seconds:.1f} s, completed={run.completed}", file=sys.stderr)
    if not run.completed:
        print(run.console_tail(), file=sys.stderr)
    return 1 if failed or not run.completed else 0


if __name__ == "__main__":
    sys.exit(main())
