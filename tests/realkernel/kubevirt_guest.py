"""Run in the real-kernel guest (a GUEST_STEP of test_kubevirt_realkernel.py): KubeVirt's two paths end to
end on the guest's kernel, each ending in a domain the guest's libvirtd starts.

1. device plugin: vgpukit makes the devices on demand (``sriov enable``, ``bind <VF> --driver vfio-pci``,
   ``mdev create mtty mtty-1``); the device plugin in KubeVirt mode serves them to the kubelet peer
   (tests/k8s/kubelet.py); its Allocate answer (env, device specs) goes to the virt-launcher stand-in
   (tests/k8s/virtlauncher.py), whose hostdevs make the domain;
2. DRA: the DRA driver (``--device-metadata``) prepares a claim of a VF still on its host driver (bound
   to vfio-pci at prepare) and an mtty mdev; the stand-in reads the metadata file through the metadata
   CDI spec's mount, the domain is made of that; unprepare removes it all.

Prints one JSON document; the host-side cases check it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from tests.conftest import invoke
from tests.k8s import virtlauncher
from tests.k8s.kubelet import Kubelet
from vgpukit.clikit.context import App
from vgpukit.k8s import kubevirt
from vgpukit.k8s.dra import metadata
from vgpukit.k8s.dra.devices import DRIVER
from vgpukit.k8s.dra.server import Driver
from vgpukit.k8s.dra_v1 import api_pb2 as dra
from vgpukit.k8s.plugin import Manager, plugin_dir
from vgpukit.libvirt.domain import DomainXML
from vgpukit.node.dra_names import device_name
from vgpukit.node.inventory import Options, collect
from vgpukit.wiring import Wiring

PF, VF1, VF2 = "0000:00:02.0", "0000:00:02.1", "0000:00:02.2"
U1, U2 = "5a1c0de0-0000-4000-8000-00000000e001", "5a1c0de0-0000-4000-8000-00000000e002"
CLAIM_UID = "6b2d1ef0-0000-4000-8000-00000000c001"
V = ["virsh", "-c", "qemu:///system"]
# the guest has no virtlogd (QEMU logs to its file), no cgroup or mount namespace set-up, no security driver
QEMU_CONF = (
    'user = "root"\ngroup = "root"\nnamespaces = []\ncgroup_controllers = []\n'
    'security_driver = "none"\nstdio_handler = "file"\n'
)


def driver_of(bdf: str) -> str | None:
    link = f"/sys/bus/pci/devices/{bdf}/driver"
    return os.path.basename(os.readlink(link)) if os.path.exists(link) else None


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else {}


def cli(*args: str) -> dict[str, Any]:
    r = invoke(None, *args)
    return {"args": " ".join(args), "rc": r.exit_code, "out": r.stdout[-1500:], "err": r.stderr[-1500:]}


def sh(*argv: str, timeout: float = 300) -> dict[str, Any]:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    return {"args": " ".join(argv), "rc": p.returncode, "out": p.stdout[-4000:], "err": p.stderr[-2000:]}


def libvirtd() -> subprocess.Popen[bytes]:
    for d in (
        "/etc/libvirt/qemu",
        "/run/libvirt",
        "/var/lib/libvirt/qemu",
        "/var/cache/libvirt",
        "/var/log/libvirt/qemu",
    ):
        os.makedirs(d, exist_ok=True)
    with open("/etc/passwd", "a+") as f:
        f.seek(0)
        if "\nlibvirt-qemu:" not in "\n" + f.read():
            f.write("libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin\n")
    with open("/etc/group", "a+") as f:
        f.seek(0)
        text = "\n" + f.read()
        for g, gid in (("libvirt-qemu", 64055), ("kvm", 64056)):
            if f"\n{g}:" not in text:
                f.write(f"{g}:x:{gid}:\n")
    Path("/etc/libvirt/qemu.conf").write_text(QEMU_CONF)
    log = open("/tmp/kubevirt-libvirtd.log", "ab")  # noqa: SIM115 (kept open for the daemon's life)
    proc = subprocess.Popen(["libvirtd"], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    for _ in range(600):
        if sh(*V, "version")["rc"] == 0:
            return proc
        if proc.poll() is not None:
            break
        time.sleep(1)
    raise RuntimeError("libvirtd did not answer")


def run_domain(name: str, hostdevs: list[Any]) -> dict[str, Any]:
    """Define and start a domain of these hostdevs; what libvirt and QEMU show; destroyed again."""
    xml = virtlauncher.domain(name, hostdevs)
    path = Path(tempfile.mkdtemp()) / f"{name}.xml"
    path.write_text(xml)
    out: dict[str, Any] = {"xml": xml, "define": sh(*V, "define", str(path))}
    t0 = time.monotonic()
    out["start"] = sh(*V, "start", name, timeout=600)
    out["start_seconds"] = round(time.monotonic() - t0, 1)
    if out["start"]["rc"] == 0:
        out["state"] = sh(*V, "domstate", name)["out"].strip()
        out["info_pci"] = sh(*V, "qemu-monitor-command", "--hmp", name, "info pci")["out"]
        live = sh(*V, "dumpxml", name)["out"]
        out["live_keys"] = sorted(k for k in DomainXML.parse(live).keyed()) if live else []
        out["sriov_list"] = cli("sriov", "list", "--json")["out"]
        out["mdev_list"] = cli("mdev", "list", "--json")["out"]
        out["destroy"] = sh(*V, "destroy", name)
    else:
        log = Path(f"/var/log/libvirt/qemu/{name}.log")
        out["qemu_log"] = log.read_text()[-3000:] if log.exists() else ""
    out["undefine"] = sh(*V, "undefine", name)
    return out


def plugin_path() -> dict[str, Any]:
    out: dict[str, Any] = {"made": [cli("sriov", "enable", PF, "--vfs", "2"), cli("bind", VF1, "--driver", "vfio-pci")]}
    out["made"].append(cli("mdev", "create", "mtty", "mtty-1", "--uuid", U1))
    app = App(command="vgpukit k8s device-plugin", wiring=Wiring())
    host = app.host
    host.mkdir(plugin_dir(host))
    kubelet = Kubelet(Path(host.socket_address(plugin_dir(host)))).start()

    def open_host() -> Any:
        fresh = App(wiring=Wiring())
        return fresh.host, None, fresh.close

    manager = Manager(host, kubevirt.Poller(open_host, "vgpukit"), "devices")
    try:
        out["events"] = manager.poll()
        vf_res, mdev_res = "vgpukit.io/vm-pci-1b36-0010", "vgpukit.io/vm-mdev-mtty-1"
        kubelet.wait(lambda: all(kubelet.endpoints.get(r) and kubelet.endpoints[r].devices for r in (vf_res, mdev_res)))
        out["listed"] = {r: dict(e.devices) for r, e in kubelet.endpoints.items()}
        env: dict[str, str] = {}
        nodes: list[str] = []
        for r in (vf_res, mdev_res):
            _chosen, resp = kubelet.allocate(r, 1)
            env.update(resp.envs)
            nodes += [d.host_path for d in resp.devices]
        out["env"], out["nodes"] = env, nodes
        out["nodes_exist"] = {n: os.path.exists(n) for n in nodes}
        vmi = {
            "spec": {
                "domain": {
                    "devices": {
                        "hostDevices": [
                            {"name": "nvme-vf", "deviceName": vf_res},
                            {"name": "serial", "deviceName": mdev_res},
                        ]
                    }
                }
            }
        }
        out["domain"] = run_domain("kv-plugin", virtlauncher.from_env(vmi, env))
    finally:
        manager.close()
        kubelet.stop()
        app.close()
        out["cleanup"] = [cli("mdev", "remove", U1), cli("bind", VF1, "--restore"), cli("sriov", "disable", PF)]
    return out


def dra_path() -> dict[str, Any]:
    made = [cli("sriov", "enable", PF, "--vfs", "2"), cli("mdev", "create", "mtty", "mtty-1", "--uuid", U2)]
    out: dict[str, Any] = {"made": made}
    vf_name, mdev_name = device_name("vf", VF2), device_name("mdev", U2)
    results = [
        {"request": "vf", "driver": DRIVER, "pool": "node-1", "device": vf_name},
        {"request": "serial", "driver": DRIVER, "pool": "node-1", "device": mdev_name},
    ]
    claim = {
        "metadata": {
            "name": "vm1-devices-x7k2p",
            "namespace": "default",
            "uid": CLAIM_UID,
            "annotations": {metadata.POD_CLAIM_ANNOTATION: "devices"},
        },
        "status": {"allocation": {"devices": {"results": results}}},
    }

    def opener() -> Any:
        fresh = App(command="vgpukit k8s dra-plugin", wiring=Wiring())
        return fresh.env, lambda only=None: collect(fresh.host, fresh.nvml, Options(replicas=1), only=only), fresh.close

    driver = Driver("node-1", opener, lambda *_: claim, lambda: {}, device_metadata=True)
    out["vf_driver_before"] = (
        os.path.basename(os.readlink(f"/sys/bus/pci/devices/{VF2}/driver"))
        if os.path.exists(f"/sys/bus/pci/devices/{VF2}/driver")
        else None
    )
    resp = driver.prepare(dra.Claim(namespace="default", name="vm1-devices-x7k2p", uid=CLAIM_UID))
    out["prepare_error"] = resp.error
    out["cdi_ids"] = [list(d.cdi_device_ids) for d in resp.devices]
    out["vf_driver_prepared"] = (
        os.path.basename(os.readlink(f"/sys/bus/pci/devices/{VF2}/driver"))
        if os.path.exists(f"/sys/bus/pci/devices/{VF2}/driver")
        else None
    )
    app = App(wiring=Wiring())
    host = app.host
    claim_spec = (
        json.loads(host.dra_claim_cdi_spec(CLAIM_UID).read_text())
        if host.exists(host.dra_claim_cdi_spec(CLAIM_UID))
        else {}
    )
    out["claim_nodes"] = [
        n["path"] for d in claim_spec.get("devices", []) for n in d["containerEdits"].get("deviceNodes", [])
    ]
    specs = [
        json.loads(host.dra_metadata_cdi_spec(DRIVER, CLAIM_UID, r).read_text())
        for r in ("vf", "serial")
        if host.exists(host.dra_metadata_cdi_spec(DRIVER, CLAIM_UID, r))
    ]
    out["metadata_specs"] = specs
    files = [host.dra_metadata_file(DRIVER, "default", "vm1-devices-x7k2p", r) for r in ("vf", "serial")]
    out["metadata_files"] = {str(f): f.read_text() for f in files if f.exists()}
    pod = Path(tempfile.mkdtemp(prefix="virt-launcher."))
    vmi = {
        "spec": {
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": "vm-devices"}],
            "domain": {
                "devices": {
                    "hostDevices": [
                        {"name": "nvme-vf", "claimName": "devices", "requestName": "vf"},
                        {"name": "serial", "claimName": "devices", "requestName": "serial"},
                    ]
                }
            },
        }
    }
    try:
        out["domain"] = run_domain("kv-dra", virtlauncher.from_metadata(vmi, virtlauncher.pod_view(specs, pod)))
    finally:
        unprep = driver.unprepare(dra.Claim(namespace="default", name="vm1-devices-x7k2p", uid=CLAIM_UID))
        out["unprepare_error"] = unprep.error
        out["left_after_unprepare"] = [str(f) for f in [*files, host.dra_claim_cdi_spec(CLAIM_UID)] if f.exists()]
        out["vf_driver_after"] = (
            os.path.basename(os.readlink(f"/sys/bus/pci/devices/{VF2}/driver"))
            if os.path.exists(f"/sys/bus/pci/devices/{VF2}/driver")
            else None
        )
        app.close()
        out["cleanup"] = [cli("mdev", "remove", U2), cli("sriov", "disable", PF)]
    return out


def main() -> int:
    doc: dict[str, Any] = {}
    daemon = None
    try:
        daemon = libvirtd()
        from .render_guest import render_path  # the domains `render domain` writes, in this boot

        for name, fn in (("plugin", plugin_path), ("dra", dra_path), ("render", render_path)):
            try:
                doc[name] = fn()
            except Exception:
                doc[name] = {"crashed": traceback.format_exc()[-3000:]}
    except Exception:
        doc["crashed"] = traceback.format_exc()[-3000:]
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(60)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
