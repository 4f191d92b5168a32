"""The node image (scripts/build-image.sh) run by podman against a simulated host mounted at /host, with
each component's privileges as in deploy/kubernetes: the device plugin registers with the kubelet
peer through the shared device-plugins directory; the node agent applies a config through the API
server stub. (The DaemonSets say ``--root /host``; here ``--sim /host``, because only the simulator's
NVML answers for a simulated host: same mounts, same paths. The simulator's own state directory,
``.vgpukit-sim``, stands for the GPU driver and is mounted writable for the plugin: the simulated
NVML takes its lock there, where a real plugin talks to the driver through /dev.)"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import invoke, make_sim, short_dir, sim_host
from tests.k8s.apiserver import ApiServer
from tests.k8s.kubelet import Kubelet

from .conftest import PODMAN, ROOT, ULIMITS, version

pytestmark = pytest.mark.ship
# least privilege of the device plugin (device-plugin.yaml): host read-only, its socket directory
# writable, no capabilities but reading /proc of host processes, read-only container file system
PLUGIN = ["--network", "none", "--read-only", "--cap-drop", "all", "--cap-add", "SYS_PTRACE",
          "--cap-add", "DAC_READ_SEARCH", "--security-opt", "no-new-privileges"]  # fmt: skip
FLEET = """\
version: vgpukit.host/v1
configs:
  four-vfs:
    sriov:
      - {device: nic0, vfs: 4, driver: vfio-pci}
"""


@pytest.fixture
def short() -> Iterator[Path]:
    with short_dir("vk") as d:  # unix socket paths stay short
        yield d


def _run(image: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN, "run", "--rm", *ULIMITS, *args], capture_output=True, text=True, timeout=300)


def test_version_equals_the_tag_and_the_package(image: str) -> None:
    assert image == f"localhost/vgpukit:{version()}"
    done = _run(image, "--network", "none", image, "vgpukit", "-V")
    assert done.stdout.strip() == f"vgpukit, version {version()}", done.stderr
    for manifest in (ROOT / "deploy" / "kubernetes").glob("*.yaml"):
        for doc in yaml.safe_load_all(manifest.read_text()):
            spec = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []) + spec.get("initContainers", []):
                assert c["image"] == image, (manifest.name, c["image"])


def test_device_plugin_registers_through_the_shared_socket_directory(image: str, short: Path) -> None:
    sim = make_sim(short / "h")
    sockets = sim / "var" / "lib" / "kubelet" / "device-plugins"
    kubelet = Kubelet(sockets).start()
    name = f"vgpukit-test-plugin-{short.name}"
    start = [*PODMAN, "run", "-d", "--name", name, *ULIMITS, *PLUGIN, "-v", f"{sim}:/host:ro",
             "-v", f"{sockets}:/host/var/lib/kubelet/device-plugins", "-v", f"{sim}/run/vgpukit:/host/run/vgpukit",
             "-v", f"{sim}/.vgpukit-sim:/host/.vgpukit-sim", image,
             "vgpukit", "--sim", "/host", "k8s", "device-plugin", "--interval", "1"]  # fmt: skip
    try:
        subprocess.run(start, check=True, capture_output=True, text=True, timeout=120)
        ok = kubelet.wait(lambda: any(ep.devices for ep in kubelet.endpoints.values()), timeout=60)
        shown = subprocess.run([*PODMAN, "logs", name], capture_output=True, text=True)
        logs = shown.stderr
        assert ok, logs
        resource = next(r for r, ep in kubelet.endpoints.items() if ep.devices)
        _chosen, resp = kubelet.allocate(resource, 1)
        assert resp.cdi_devices[0].name.startswith(resource.split("-")[0] + "="), resp
        assert f"registered {resource}" in logs
        # the watch (pyudev's reader in the image): its first line, on standard output
        assert "listening to kernel uevents, inotify" in shown.stdout + logs, shown.stdout + logs
    finally:
        subprocess.run([*PODMAN, "rm", "-f", "-t", "10", name], capture_output=True)
        kubelet.stop()
    assert sim_host(sim).exists(sim / "etc")  # the host tree is intact (mounted read-only)


def test_node_agent_applies_the_labelled_config(image: str, short: Path) -> None:
    sim = make_sim(short / "h")
    (short / "fleet").mkdir()
    (short / "fleet" / "fleet.yaml").write_text(FLEET)
    api = ApiServer("node-1")
    try:
        api.set_labels({"vgpukit.io/config": "four-vfs"})
        kubeconfig = api.kubeconfig(short / "kubeconfig")
        done = _run(image, "--network", "host", "--privileged", "-e", "NODE_NAME=node-1",
                    "-v", f"{sim}:/host", "-v", f"{short / 'fleet'}:/etc/vgpukit-fleet:ro",
                    "-v", f"{kubeconfig}:/kubeconfig:ro", image,
                    "vgpukit", "--sim", "/host", "k8s", "node-agent", "--config-file", "/etc/vgpukit-fleet/fleet.yaml",
                    "--kubeconfig", "/kubeconfig", "--once")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert api.labels()["vgpukit.io/config.state"] == "success", api.node["metadata"].get("annotations")
    finally:
        api.close()
    listed = json.dumps(json.loads(invoke(sim, "--json", "sriov", "list").stdout))
    assert listed.count('"vfio-pci"') >= 4
    assert invoke(sim, "assert", "-f", str(short / "fleet" / "fleet.yaml"), "-c", "four-vfs").exit_code == 0
