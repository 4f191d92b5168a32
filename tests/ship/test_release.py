"""scripts/release.sh on a clone of the committed tree: refuses a dirty tree and an untagged HEAD;
tagged v<__version__>, it builds the sdist, the wheel, the .deb and the image, and they agree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BUILDS, ROOT, clean_env, need, release_tagged, version

pytestmark = pytest.mark.ship


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need(("git",))
    where = tmp_path_factory.mktemp("release") / "vgpukit"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    return where


def _release(clone: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/release.sh", *args],
        cwd=clone,
        capture_output=True,
        text=True,
        env=clean_env(PYTHON=sys.executable, TMPDIR=str(clone.parent), **env),
        timeout=1200,
    )


def test_refuses_a_dirty_tree_and_an_untagged_head(clone: Path) -> None:
    (clone / "stray.txt").write_text("x")
    done = _release(clone, "--snapshot")
    assert done.returncode == 1 and "uncommitted changes or untracked files" in done.stderr
    (clone / "stray.txt").unlink()
    done = _release(clone)
    assert done.returncode == 1 and f"HEAD is not tagged v{version()}" in done.stderr


@pytest.fixture(scope="module")
def tagged_release(
    request: pytest.FixtureRequest, debian_base: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """scripts/release.sh on a clone of this tree tagged v<version> (started at collection: conftest)."""
    need(("git", "podman", "runc", "dpkg-deb"), root=True)
    job = request.session.stash.get(BUILDS, {}).get("release")
    return job.result() if job is not None else release_tagged(tmp_path_factory.mktemp("tagged"), debian_base)


def test_tagged_release_builds_every_artefact_with_one_version(
    tagged_release: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, done = tagged_release
    assert done.returncode == 0, done.stderr[-3000:]
    v = version()
    names = {p.name for p in out.iterdir()}
    assert {f"vgpukit-{v}.tar.gz", f"vgpukit-{v}-py3-none-linux_x86_64.whl", f"vgpukit_{v}_amd64.deb",
            f"vgpukit-image_{v}_amd64.tar", "SHA256SUMS.txt"} <= names  # fmt: skip
    assert f"image: localhost/vgpukit:{v} " in done.stdout
    sums = (out / "SHA256SUMS.txt").read_text()
    assert len(re.findall(r" sha256:[0-9a-f]{64}\n", sums)) == 4
    deb_version = subprocess.run(["dpkg-deb", "-f", str(out / f"vgpukit_{v}_amd64.deb"), "Version"],
                                 capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert deb_version == v
