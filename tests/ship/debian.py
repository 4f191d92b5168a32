"""A brand-new Debian 12 in a chroot, from the shipping tests' base tarball: debootstrap minbase +
python3 from this machine's mirror, made once (cached in /var/tmp/vgpukit-ship/) for the .deb's chroot
and the node image's root file system (scripts/build-image.sh --base: the image's Depends go in by apt).

Only /proc and /dev (non-recursive binds) are mounted; :meth:`Chroot.close` unmounts them and removes
the tree only when nothing under it is still mounted (a leftover /dev bind must never be deleted
through)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

BASE_DIR = Path("/var/tmp/vgpukit-ship")
BASE = BASE_DIR / "bookworm-minbase-python3.tar"


def mirror() -> str:
    """The Debian archive this machine's apt uses (the rule of fresh-machine.sh)."""
    uris: list[str] = []
    for f in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        uris += [line.split()[1] for line in f.read_text().splitlines() if line.startswith("URIs:")]
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        uris += [w[1] for w in (line.split() for line in legacy.read_text().splitlines()) if w[:1] == ["deb"]]
    good = [u for u in uris if "security" not in u and "updates" not in u]
    return good[0] if good else "http://deb.debian.org/debian"


def base_tarball() -> Path:
    """debootstrap --variant=minbase with python3 (nothing of the .deb's other Depends: apt must resolve
    them), and ca-certificates only when the mirror is https (apt in the chroot needs them then)."""
    packages = "python3,ca-certificates" if mirror().startswith("https:") else "python3"
    if not BASE.exists():
        BASE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="b.", dir=BASE_DIR))
        try:
            subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={packages}", "bookworm", str(tmp), mirror()],
                check=True,
                capture_output=True,
                cwd=BASE_DIR,  # not the process's: a test's directory may go while this runs (tests/ship/conftest.py)
            )
            part = tmp.with_suffix(".tar")
            subprocess.run(["tar", "-C", str(tmp), "--numeric-owner", "-cf", str(part), "."], check=True, cwd=BASE_DIR)
            part.rename(BASE)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.with_suffix(".tar").unlink(missing_ok=True)
    return BASE


class Chroot:
    def __init__(self, base: Path) -> None:
        self.top = Path(tempfile.mkdtemp(prefix="vgpukit-ship.", dir="/var/tmp"))
        self.root = self.top / "r"
        self.root.mkdir()
        self.mounts: list[Path] = []
        subprocess.run(["tar", "-C", str(self.root), "-xf", str(base)], check=True)
        shutil.copy("/etc/resolv.conf", self.root / "etc" / "resolv.conf")
        for m, fs in (("proc", "/proc"), ("dev", "/dev")):
            subprocess.run(["mount", "--bind", fs, str(self.root / m)], check=True)
            self.mounts.append(self.root / m)

    def run(self, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            "HOME": "/root",
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "DEBIAN_FRONTEND": "noninteractive",
        }
        done = subprocess.run(
            ["chroot", str(self.root), "/bin/sh", "-ec", script],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"in the chroot: {script}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def close(self) -> None:
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(m)], check=False)
        with open("/proc/self/mountinfo") as f:
            busy = [line.split()[4] for line in f if line.split()[4].startswith(str(self.top))]
        if not busy:
            shutil.rmtree(self.top, ignore_errors=True)
