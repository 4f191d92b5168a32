"""Every host path a container of deploy/kubernetes/ writes is mounted writable in that container.

Each DaemonSet container's own command line runs (as it does in the pod, with ``--root`` naming a
simulated host's tree instead of ``/host``) for a few polls; every file it created, changed or removed
under that root is then looked up in the container's mounts (the most specific mount over
``/host/<path>`` decides, as the kernel's mount table does), and must not be on a read-only one. A
container whose ``/host`` is writable (the node agent: it applies host configs) writes anywhere.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_sim

from .apiserver import ApiServer
from .test_deploy import DEPLOY, DRA, manifests

CHECKOUT = Path(__file__).resolve().parents[2]
NODE = "node-1"


def containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(file, container, its pod spec) for every container of every DaemonSet."""
    import yaml

    out = []
    for path in manifests(DEPLOY) + manifests(DRA) + manifests(DEPLOY / "kubevirt"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "DaemonSet":
                pod = doc["spec"]["template"]["spec"]
                name = str(path.relative_to(DEPLOY))
                out += [(name, c, pod) for c in pod.get("initContainers", []) + pod["containers"]]
    return out


def mounts(container: dict[str, Any], pod: dict[str, Any]) -> list[tuple[str, bool]]:
    """(mount path, read-only) of each volume mount; a hostPath under /host must be that host path."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    out = []
    for m in container["volumeMounts"]:
        host_path = volumes[m["name"]].get("hostPath", {}).get("path")
        if m["mountPath"].startswith("/host") and host_path is not None:
            assert m["mountPath"] == "/host" + host_path.rstrip("/"), m  # /host is the node's tree, seen whole
        out.append((m["mountPath"], bool(m.get("readOnly", False))))
    return out


def writable(path: str, table: list[tuple[str, bool]]) -> bool:
    """Whether ``path`` (in the container) is on a writable mount: the longest mount path over it decides."""
    over = [(mp, ro) for mp, ro in table if path == mp or path.startswith(mp.rstrip("/") + "/")]
    assert over, f"{path} is on no mount"
    return not max(over, key=lambda m: len(m[0]))[1]


def snapshot(root: Path) -> dict[str, tuple[int, int, int, int]]:
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_container(container: dict[str, Any], root: Path, api: ApiServer, tmp: Path) -> tuple[set[str], str]:
    """What the container's command wrote under ``root``: until it exits, or until its writes are the
    same for two seconds (a daemon: at least a few polls; the exporter after one scrape)."""
    command = [root.as_posix() if a == "/host" else a for a in container["command"]]
    assert command[:3] == ["vgpukit", "--root", root.as_posix()]
    port = _free_port()
    if "exporter" in command:
        command[command.index("--listen") + 1] = f"127.0.0.1:{port}"
    if "dra-plugin" in command:
        command += ["--kubeconfig", str(api.kubeconfig(tmp / "kubeconfig"))]
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT), "NODE_NAME": NODE}
    before = snapshot(root)
    seen: set[str] = set()
    with running([sys.executable, "-m", "vgpukit", *command[1:]], env) as proc:
        deadline, still = time.monotonic() + 90, time.monotonic()
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if "exporter" in command:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
                except OSError:
                    continue  # not listening yet
            now = changed(before, snapshot(root))
            if now != seen or (not now and "exporter" not in command):
                seen, still = now, time.monotonic()
            elif time.monotonic() - still > 2:
                break
    out = proc.stdout.read() if proc.stdout else ""
    return changed(before, snapshot(root)), out


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    server = ApiServer(NODE)
    try:
        yield server
    finally:
        server.close()


CASES = [(f, c, p) for f, c, p in containers()]


@pytest.mark.parametrize(("name", "container", "pod"), CASES, ids=[f"{f}:{c['name']}" for f, c, _ in CASES])
def test_what_a_container_writes_is_mounted_writable(
    name: str, container: dict[str, Any], pod: dict[str, Any], api: ApiServer, short_tmp: Path
) -> None:
    table = mounts(container, pod)
    if writable("/host", table):
        return  # the node agent: its host is writable as a whole
    root = make_sim(short_tmp / "host")
    for v in pod["volumes"]:  # the kubelet makes (DirectoryOrCreate) or finds (Directory) each one first
        if "hostPath" in v:
            (root / v["hostPath"]["path"].lstrip("/")).mkdir(parents=True, exist_ok=True)
    wrote, log = run_container(container, root, api, short_tmp)
    refused = sorted(p for p in wrote if not writable(f"/host/{p}", table))
    assert not refused, f"{name} {container['name']} writes on read-only mounts: {refused}\n{log[-2000:]}"
    if container["name"] == "device-plugin":  # both modes: the run was long enough to catch the fix's case
        assert "run/vgpukit/health/state.json" in wrote, log[-2000:]
    if container["name"] == "exporter":
        assert not wrote, wrote  # it only reads


def test_a_write_under_a_read_only_mount_is_caught() -> None:
    table = [("/host", True), ("/host/var/lib/kubelet/device-plugins", False)]
    assert writable("/host/var/lib/kubelet/device-plugins/vgpukit-x.sock", table)
    assert not writable("/host/run/vgpukit/health/state.json", table)
    assert not writable("/host/var/lib/kubelet/device-plugins-other", table)
