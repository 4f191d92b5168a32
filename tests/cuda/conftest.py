"""Build the device emulator, its C programs and libvgpukit-cuda.so with gcc; run programs against them."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from vgpukit.host import Host

REPO = Path(__file__).resolve().parents[2]
EMULATOR = REPO / "tests" / "cuda" / "emulator"
LIBRARY = REPO / "contrib" / "cuda"

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None, reason="no gcc/make")


def build_all(out: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(EMULATOR), f"O={out}"], check=True)
    subprocess.run(["make", "-s", "-C", str(LIBRARY), f"O={out}"], check=True)
    return out


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("no gcc/make")
    return build_all(tmp_path_factory.mktemp("cuda"))


def parse(out: str) -> dict[str, str]:
    """key=value words of a program's output (later lines win)."""
    kv: dict[str, str] = {}
    for word in out.split():
        if "=" in word:
            k, v = word.split("=", 1)
            kv[k] = v
    return kv


@dataclass
class Cuda:
    """Runs the emulator's programs, with or without the library, for one tenant on a temporary host root."""

    bin: Path
    root: Path
    tenant: str = "t1"

    @property
    def host(self) -> Host:
        return Host(self.root)

    def env(self, preload: bool = True, tenant: bool = True, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPUKIT_", "LD_PRELOAD"))}
        env["VGPUKIT_ROOT"] = str(self.root)
        if preload:
            env["LD_PRELOAD"] = str(self.bin / "libvgpukit-cuda.so")
        if tenant:
            env["VGPUKIT_CUDA_TENANT"] = self.tenant
        env.update(extra)
        return env

    def run(self, *args: str, timeout: float = 60, check: bool = True, **env_kw: object) -> dict[str, str]:
        env = self.env(**env_kw)  # type: ignore[arg-type]
        p = subprocess.run(
            [str(self.bin / args[0]), *args[1:]], env=env, capture_output=True, text=True, timeout=timeout
        )
        if check:
            assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        out = parse(p.stdout)
        out["rc"] = str(p.returncode)
        out["stdout"] = p.stdout
        out["stderr"] = p.stderr
        return out

    def popen(self, *args: str, **env_kw: object) -> subprocess.Popen[str]:
        env = self.env(**env_kw)  # type: ignore[arg-type]
        return subprocess.Popen(
            [str(self.bin / args[0]), *args[1:]],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def cuda(build: Path, tmp_path: Path) -> Cuda:
    (tmp_path / "run" / "vgpukit" / "cuda").mkdir(parents=True)
    return Cuda(build, tmp_path)
