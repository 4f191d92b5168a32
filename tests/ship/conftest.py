"""Shared fixtures of the shipping tests (docs/install.md): the sdist and wheel are built once per test
session, from this tree, and every later artefact (the .deb, the image) is built from this tree too.

These tests are slow (a build, a clean venv, a Debian chroot, an image): they carry the ``ship``
marker (deselect with ``-m 'not ship'``). Without root or a tool they skip, except under CI=true
where they fail: scripts/setup.sh installs what they need.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.background import lower_priority

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
def dists(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``python -m build`` of this tree: the sdist, and the wheel built from that sdist."""
    need(("make", "cc"))
    job = request.session.stash.get(BUILDS, {}).get("dists")
    return job.result() if job is not None else build_dists(tmp_path_factory.mktemp("dist"))


def build_dists(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "build", "-o", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        env=clean_env(),
        cwd=ROOT,
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
def debs(
    request: pytest.FixtureRequest, dists: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """scripts/build-deb.sh of this tree's wheel: the package, and the same as version PREVIOUS."""
    need(("dpkg-deb", "make", "cc"))
    job = request.session.stash.get(BUILDS, {}).get("debs")
    return job.result() if job is not None else build_debs(dists, tmp_path_factory.mktemp("deb"))


def build_debs(dists: dict[str, Path], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
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
            cwd=ROOT,
        )
        built[key] = Path(done.stdout.strip().splitlines()[-1])
    return built


def _root_is_a_mount() -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == "/" for line in f if len(line.split()) > 4)


_REROOTS: list[str] = []


def _podman() -> list[str]:
    """podman as the project runs it; in a chroot (/ not a mount point: the fresh-machine check) in its
    own mount namespace whose / is a recursive bind of this one, as tests/attach/test_podman.py does."""
    cmd = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    if os.environ.get("VGPUKIT_TEST_PODMAN_REROOT") == "1" or not _root_is_a_mount():
        top = tempfile.mkdtemp(prefix="vgpukit-reroot.")
        _REROOTS.append(top)  # an empty mount point in this namespace: removed at the session's end
        return ["unshare", "--mount", "--propagation", "unchanged", "sh", "-c",
                'mount --rbind / "$0" && exec chroot "$0" "$@"', top, *cmd]  # fmt: skip
    return cmd


PODMAN = _podman()
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


BASE_JOB = pytest.StashKey[Future[Path]]()
BUILDS = pytest.StashKey[dict[str, Future[Any]]]()  # "dists", "debs", "image", "release": from collection on
BUILD_DIR = pytest.StashKey[Path]()


def release_tagged(where: Path, debian_base: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """scripts/release.sh on a clone of the committed tree tagged v<version>: its output directory and
    its run (the image's root file system from the session's debootstrap, as the image fixture's)."""
    clone = where / "vgpukit"
    # cwd given: the process's may be a test's directory, removed while this background job runs (a test
    # chdirs; its tmp_path goes when it passes), and git then fails (exit 128) (every job here does so)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, cwd=ROOT)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "tag", "-a", f"v{version()}",
                    "-m", "test"], cwd=clone, check=True)  # fmt: skip
    out = where / "out"
    done = subprocess.run(
        ["bash", "scripts/release.sh", "-o", str(out)],
        cwd=clone,
        capture_output=True,
        text=True,
        env=clean_env(PYTHON=sys.executable, TMPDIR=str(where), VGPUKIT_IMAGE_BASE=str(debian_base)),
        timeout=1200,
    )
    return out, done


def _wanted(session: pytest.Session, fixture: str) -> bool:
    return any(fixture in getattr(item, "fixturenames", ()) for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the session's slow set-ups in the background, one after another, as soon as the session's
    tests are known: the debootstrap (debian_base), then the sdist and wheel, the .deb and the node
    image of this tree, then scripts/release.sh on a tagged clone of it; each when a collected test
    needs it and its tools are here (else the fixture does the work, or skips saying why). They run
    beside every other test (the shipping tests run last: tests/conftest.py), at a lower priority than
    the tests (tests/background.py); each fixture waits for its job."""
    root = os.geteuid() == 0
    base = _wanted(session, "debian_base") and root and all(shutil.which(t) for t in ("debootstrap", "tar"))
    wants = {name: _wanted(session, name) for name in ("dists", "debs", "image", "tagged_release")}
    wants["debs"] = wants["debs"] or wants["image"]
    wants["dists"] = wants["dists"] or wants["debs"]
    have = {
        "dists": all(shutil.which(t) for t in ("make", "cc")),
        "debs": all(shutil.which(t) for t in ("dpkg-deb", "make", "cc")),
        "image": root and base and all(shutil.which(t) for t in ("podman", "runc")),
        "tagged_release": root and base and all(shutil.which(t) for t in ("git", "podman", "runc", "dpkg-deb")),
    }
    if not base and not any(wants.values()):
        return
    pool = ThreadPoolExecutor(1, thread_name_prefix="ship-setup", initializer=lower_priority)
    if base:
        session.stash[BASE_JOB] = pool.submit(base_tarball)
    out = Path(tempfile.mkdtemp(prefix="vgpukit-ship-builds."))
    session.stash[BUILD_DIR] = out
    jobs: dict[str, Future[Any]] = {}
    if wants["dists"] and have["dists"]:
        jobs["dists"] = pool.submit(build_dists, out / "dist")
        if wants["debs"] and have["debs"]:
            jobs["debs"] = pool.submit(lambda: build_debs(jobs["dists"].result(), out / "deb"))
            if wants["image"] and have["image"]:
                base_job = session.stash[BASE_JOB]
                jobs["image"] = pool.submit(lambda: build_image(jobs["debs"].result(), base_job.result()))
    if wants["tagged_release"] and have["tagged_release"]:  # after the image: the tests need that first
        jobs["release"] = pool.submit(lambda: release_tagged(out / "release", session.stash[BASE_JOB].result()))
    session.stash[BUILDS] = jobs
    pool.shutdown(wait=False)  # the jobs run on; the interpreter waits for them at exit


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = session.stash.get(BUILD_DIR, None)
    jobs = session.stash.get(BUILDS, {})
    for job in jobs.values():  # the session ended first (-x, ^C): builds not started never start
        job.cancel()
    if out is not None and all(j.done() for j in jobs.values()):
        shutil.rmtree(out, ignore_errors=True)
    for top in _REROOTS:
        with contextlib.suppress(OSError):
            os.rmdir(top)


@pytest.fixture(scope="session")
def debian_base(request: pytest.FixtureRequest) -> Path:
    """The one debootstrap of the session (tests/ship/debian.py): a Debian 12 minbase + python3 tarball,
    the .deb's brand-new machine and the base of the image's root file system (build-image.sh --base)."""
    need(("debootstrap", "tar"), root=True)
    job = request.session.stash.get(BASE_JOB, None)
    return job.result() if job is not None else base_tarball()


@pytest.fixture(scope="session")
def image(request: pytest.FixtureRequest, debs: dict[str, Path], debian_base: Path) -> str:
    """scripts/build-image.sh with this tree's package: localhost/vgpukit:<version>."""
    need(("podman", "runc"), root=True)
    job = request.session.stash.get(BUILDS, {}).get("image")
    done = job.result() if job is not None else build_image(debs, debian_base)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def build_image(debs: dict[str, Path], debian_base: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-image.sh"), "--deb", str(debs["current"]), "--base", str(debian_base)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=ROOT,
    )
