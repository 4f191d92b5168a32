"""The opt-in run of mig-parted's own client scripts, unchanged, over the ``nvidia-mig-parted`` shim
(tests/mig/test_migparted_clients.py collects it only with ``VGPUKIT_MIG_PARTED_SRC``: a mig-parted
checkout or its git directory; the files are read from it at :data:`~tests.mig.migparted_clients.SOURCE_COMMIT`
when it is a git directory, never copied into this repository).

Root only: the scripts run in a private mount namespace where ``/etc`` is an overlay (the service's
files go to ``/etc/nvidia-mig-manager`` as its package installs them; the real ``/etc`` is untouched),
``/usr/local/sbin`` holds the stubs (``kubectl``, ``systemctl``, ``nvidia-smi``: first on the scripts'
PATH and on the default PATH the hooks get) and ``/proc/modules`` lists the nvidia module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import invoke
from tests.engine.helpers import fresh
from tests.mig import migparted_clients as clients

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ("service.sh", "utils.sh", "hooks.sh", "hooks-default.yaml", "hooks-minimal.yaml")
STUB = """#!/bin/sh
echo "$(basename "$0") $*" >> {log}
case "$(basename "$0") $1" in
  "kubectl get") echo true;;
  "systemctl is-active"|"systemctl is-enabled"|"systemctl is-failed") exit 1;;
  "nvidia-smi -i") echo 8.0;;
esac
exit 0
"""


def upstream(src: Path, path: str) -> bytes:
    if (src / path).is_file():
        return (src / path).read_bytes()
    show = ["git", "--git-dir", str(src if (src / "objects").is_dir() else src / ".git"), "show"]
    return subprocess.run([*show, f"{clients.SOURCE_COMMIT}:{path}"], capture_output=True, check=True).stdout


def run_real_scripts(src: Path, tmp: Path, configs: str) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("the real scripts run in a private mount namespace: root and unshare(1) needed")
    sim = fresh(tmp, "hgx-a100")
    upper, work, stubs = tmp / "etc-upper", tmp / "etc-work", tmp / "stubs"
    config_dir = upper / "nvidia-mig-manager"
    for d in (config_dir, work, stubs):
        d.mkdir(parents=True)
    for name in SYSTEMD:
        (config_dir / name).write_bytes(upstream(src, f"deployments/systemd/{name}"))
    (config_dir / "config-default.yaml").write_text(configs)
    reconfigure = tmp / "reconfigure-mig.sh"
    reconfigure.write_bytes(upstream(src, clients.RECONFIGURE))
    log = tmp / "calls.log"
    for name in ("kubectl", "systemctl", "nvidia-smi"):
        (stubs / name).write_text(STUB.format(log=log))
        (stubs / name).chmod(0o755)
    shutil.copy(ROOT / "templates" / "bin" / "nvidia-mig-parted", stubs / "nvidia-mig-parted")
    proc = tmp / "proc"  # a kernel without loadable modules has no /proc/modules: a directory of its own
    proc.mkdir()
    (proc / "modules").write_text("nvidia 56823808 0 - Live 0x0000000000000000 (POE)\n")
    (proc / "modules").chmod(0o444)
    inner = f"""set -e
mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc
mount --bind {stubs} /usr/local/sbin
if [ -e /proc/modules ]; then mount --bind {proc}/modules /proc/modules; else mount --bind {proc} /proc; fi
set +e
MIG_PARTED_SELECTED_CONFIG=all-1g.5gb bash /etc/nvidia-mig-manager/service.sh > {tmp}/service.out 2>&1
echo "service.sh $?" >> {log}
bash {reconfigure} -n node1 -f /etc/nvidia-mig-manager/config.yaml -c all-balanced -p gpu-operator \
  > {tmp}/reconfigure.out 2>&1
echo "reconfigure-mig.sh $?" >> {log}
"""
    path = f"/usr/local/sbin:{Path(sys.executable).parent}:/usr/bin:/bin"
    env = {**os.environ, "VGPUKIT_SIM": str(sim), "PATH": path}
    namespace = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner]
    subprocess.run(namespace, env=env, check=True, timeout=600)
    calls = log.read_text()
    outputs = {n: (tmp / f"{n}.out").read_text() for n in ("service", "reconfigure")}
    assert "service.sh 0" in calls and "reconfigure-mig.sh 0" in calls, (calls, outputs)
    config = upper / "nvidia-mig-manager" / "config.yaml"  # service.sh's fallback copy, in the overlay
    assert invoke(sim, "mig", "assert", "-f", str(config), "-c", "all-balanced").exit_code == 0, outputs
    assert "nvidia.com/mig.config.state=success" in calls  # the operator's script labelled the node so
