"""A missing optional dependency (an extra of pyproject.toml) is exit 5 naming the extra to install,
for every extra and every command that needs one, never an internal error or a silent skip.

The CLI runs in a subprocess whose ``sitecustomize`` (in a temporary directory first on PYTHONPATH)
puts a meta-path finder in front that refuses the blocked modules as an absent package would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_sim

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = """
import sys

BLOCKED = {blocked!r}


class _Absent:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name in BLOCKED or any(name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
"""


def run_without(tmp_path: Path, blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    env.pop("VGPUKIT_LIBVIRT_URI", None)
    return subprocess.run([sys.executable, "-m", "vgpukit", *args], capture_output=True, text=True, env=env, timeout=60)


CASES = [
    # (blocked modules, command after --sim DIR, the extra named)
    (("grpc",), ["k8s", "device-plugin"], "k8s"),
    (("google.protobuf",), ["k8s", "device-plugin"], "k8s"),
    (("kubernetes",), ["k8s", "node-agent", "--node", "n1", "--config-file", "/dev/null", "--once"], "k8s"),
    (("libvirt",), ["attach", "vm1", "gpu0"], "libvirt"),
    (("libvirt",), ["sriov", "list", "--libvirt", "test:///default"], "libvirt"),
]


def _id(v: object) -> str:
    return "-".join(v) if isinstance(v, (list, tuple)) else str(v)


@pytest.mark.parametrize(("blocked", "command", "extra"), CASES, ids=_id)
def test_missing_extra_is_exit_5_naming_it(
    tmp_path: Path, blocked: tuple[str, ...], command: list[str], extra: str
) -> None:
    sim = make_sim(tmp_path / "host", "mixed-a100-t4")
    r = run_without(tmp_path, blocked, "--sim", str(sim), *command)
    assert r.returncode == 5, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("vgpukit: error: "), r.stderr
    assert f"pip install 'vgpukit[{extra}]'" in r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    r = run_without(tmp_path, blocked, "--sim", str(sim), "--json", *command)
    assert r.returncode == 5
    doc = json.loads(r.stdout)
    assert doc["schema"] == "vgpukit.error/v1" and doc["error"] == "unsupported"
    assert doc["exit_code"] == 5 and f"vgpukit[{extra}]" in doc["message"]
