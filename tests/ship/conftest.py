"""Shared fixtures of the shipping tests (docs/install.md): the sdist and wheel are built once per test
session, from this tree, and every later artefact (the .deb, the image) is built from this tree too.

These tests are slow (a build, a clean venv, a Debian chroot, an image): they carry the ``ship``
marker (deselect with ``-m 'not ship'``). Without root or a tool they skip, except under CI=true
where they fail: scripts/setup.sh installs what they need.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from .debian import base_tarball

ROOT = Path(__file__).resolve().parents[2]
# dependency wheels for clean installs: downloaded once, then installed with --no-index from here
WHEELHOUSE = Path(os.environ.get("VGPUKIT_WHEELHOUSE", "/var/tmp/vgpukit-wheelhouse"))


def need(tools: tuple[str, ...], root: bool = False) -> None:
    """Skip (fail under CI=true) when a tool is missing or root is needed and this is not root."""
    missing = [t for t in tools if shutil.which(t) is None]
    why = f"missing {', '.join(missing)} (bash scripts/setup.sh installs them)" if missing else ""
    if root and os.geteuid() != 0:
        why = "needs root"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user outside the checkout: no PYTHONPATH, no venv, no simulator."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VGPUKIT_", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def version() -> str:
    text = (ROOT / "vgpukit" / "__init__.py").read_text()
    return text.split('__version__ = "', 1)[1].split('"', 1)[0]


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``python -m build`` of this tree: the sdist, and the wheel built from that sdist."""
    need(("make", "cc"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "-o", str(out), str(ROOT)], check=True, capture_output=True, env=clean_env()
    )
    wheel, sdist = next(out.glob("vgpukit-*.whl")), next(out.glob("vgpukit-*.tar.gz"))
    return {"wheel": wheel, "sdist": sdist, "dir": out}


def wheelhouse(wheel: Path) -> Path:
    """The wheel's dependencies (all extras' too) as wheels in WHEELHOUSE (downloaded when missing)."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    spec = f"{wheel}[k8s]"
    offline = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-index",
        "--find-links",
        str(WHEELHOUSE),
        "-d",
        str(WHEELHOUSE),
        spec,
    ]
    if subprocess.run(offline, capture_output=True, env=clean_env()).returncode != 0:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "-d", str(WHEELHOUSE), spec], check=True, env=clean_env()
        )
    return WHEELHOUSE


PREVIOUS = "0.0.1"  # the "previous release" the upgrade test starts from (same tree, lower version)


@pytest.fixture(scope="session")
def debs(dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """scripts/build-deb.sh of this tree's wheel: the package, and the same as version PREVIOUS."""
    need(("dpkg-deb", "make", "cc"))
    out = tmp_path_factory.mktemp("deb")
    env = clean_env(PYTHON=sys.executable, VGPUKIT_WHEELHOUSE=str(WHEELHOUSE), TMPDIR=str(out))
    built = {}
    for key, extra in (("current", []), ("previous", ["--version", PREVIOUS])):
        done = subprocess.run(
            [
                "bash",
                str(ROOT / "scripts" / "build-deb.sh"),
                "-o",
                str(out / key),
                "--wheel",
                str(dists["wheel"]),
                *extra,
            ],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        built[key] = Path(done.stdout.strip().splitlines()[-1])
    return built


def _root_is_a_mount() -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == "/" for line in f if len(line.split()) > 4)


def _podman() -> list[str]:
    """podman as the project runs it; in a chroot (/ not a mount point: the fresh-machine check) in its
    own mount namespace whose / is a recursive bind of this one, as tests/attach/test_podman.py does."""
    cmd = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    if os.environ.get("VGPUKIT_TEST_PODMAN_REROOT") == "1" or not _root_is_a_mount():
        top = tempfile.mkdtemp(prefix="vgpukit-reroot.")
        return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c",
                'mount --rbind / "$0" && exec chroot "$0" "$@"', top, *cmd]  # fmt: skip
    return cmd


PODMAN = _podman()
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


BASE_JOB = pytest.StashKey[Future[Path]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the session's debootstrap (debian_base) in the background as soon as the session's tests
    are known, when one of them needs it: it needs nothing of this tree, so it runs beside every other
    test (the shipping tests run last: tests/conftest.py)."""
    wanted = any("debian_base" in getattr(item, "fixturenames", ()) for item in session.items)
    if not wanted or os.geteuid() != 0 or not all(shutil.which(t) for t in ("debootstrap", "tar")):
        return
    pool = ThreadPoolExecutor(1, thread_name_prefix="debootstrap")
    session.stash[BASE_JOB] = pool.submit(base_tarball)
    pool.shutdown(wait=False)  # the job runs on; the interpreter waits for it at exit


@pytest.fixture(scope="session")
def debian_base(request: pytest.FixtureRequest) -> Path:
    """The one debootstrap of the session (tests/ship/debian.py): a Debian 12 minbase + python3 tarball,
    the .deb's brand-new machine and the base of the image's root file system (build-image.sh --base)."""
    need(("debootstrap", "tar"), root=True)
    job = request.session.stash.get(BASE_JOB, None)
    return job.result() if job is not None else base_tarball()


@pytest.fixture(scope="session")
def image(debs: dict[str, Path], debian_base: Path) -> str:
    """scripts/build-image.sh with this tree's package: localhost/vgpukit:<version>."""
    need(("podman", "runc"), root=True)
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-image.sh"), "--deb", str(debs["current"]), "--base", str(debian_base)],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]
