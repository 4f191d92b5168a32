"""Every JSON document the CLI prints, produced by running the commands on simulated hosts.

:func:`documents` runs a fixed session (each command with ``--json``) and returns ``(command, doc)``
pairs; the schema tests validate each against ``vgpukit/data/schemas/<kind>.json``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import Run, make_sim

Docs = list[tuple[str, dict[str, Any]]]
MDEV_UUID = "c2177883-f1bb-47f0-914d-32a22e3a8804"
MDEV_UUID2 = "9b1a8c6e-1e7c-4b5a-9f38-2f0d6c1e0a11"
MIG_CONFIG = """version: v1
mig-configs:
  balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "2g.10gb": 1
        "1g.5gb": 2
"""
HOST_CONFIG = """version: vgpukit.host/v1
configs:
  vms:
    sriov:
      - device: nic0
        vfs: 2
        driver: vfio-pci
    mig: balanced
"""


class Session:
    def __init__(self, run_cli: Run, docs: Docs) -> None:
        self.run_cli = run_cli
        self.docs = docs

    def __call__(self, sim: Path | None, *args: str, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
        r = self.run_cli(sim, *args, "--json")
        assert r.exit_code in ok, f"{args}: {r.exit_code} {r.stderr}"
        doc: dict[str, Any] = json.loads(r.stdout)
        self.docs.append((" ".join(args), doc))
        return doc


def host_session(run: Session, tmp: Path) -> None:
    """hgx-a100: topology, SR-IOV, binding, MIG, rendering, CDI, the simulator's own commands."""
    sim = make_sim(tmp / "hgx")
    run(sim, "topo")
    run(sim, "topo", "--matrix")
    run(sim, "devices")
    run(sim, "devices", "--vendor", "zz", ok=(2,))
    run(sim, "sriov", "list")
    run(sim, "sriov", "enable", "nic0", "--vfs", "2", "--dry-run")
    run(sim, "sriov", "enable", "nic0", "--vfs", "2")
    vf = run(sim, "sriov", "list", "nic0")["pfs"][0]["vfs"][0]["bdf"]
    run(sim, "bind", vf, "--driver", "vfio-pci")
    held = run(sim, "sim", "hold", vf)
    run(sim, "sriov", "list", "nic0")
    run(sim, "sim", "release", str(held["pid"]))
    run(sim, "render", "hostdev", vf, "--mac", "52:54:00:00:00:01")
    run(sim, "render", "domain", "--name", "vm", "--memory", "1024", "--vcpus", "2", "--device", "gpu1")
    img = "/var/lib/libvirt/images"
    rendered = run(sim, "render", "domain", "--name", "vm", "--memory", "1G", "--vcpus", "2", "--disk",
                   f"{img}/demo.qcow2", "--cdrom", f"{img}/debian-12-netinst.iso", "--graphics", "vnc")  # fmt: skip
    (tmp / "vm.xml").write_text(rendered["xml"])
    run(sim, "render", "domain", "--from", str(tmp / "vm.xml"), "--device", "gpu1")
    run(sim, "unbind", vf)
    run(sim, "bind", vf, "--restore")
    run(sim, "sriov", "disable", "nic0")
    run(sim, "mig", "status")
    run(sim, "mig", "profiles", "gpu0")
    run(sim, "partition", "gpu0", "--mig", "3g.20gb,1g.5gb=2", "--dry-run")
    doc = run(sim, "partition", "gpu0", "--mig", "3g.20gb,1g.5gb=2", "--ci", "1c.3g.20gb=3")
    gi = doc["gpus"][0]["gpu_instances"][0]["id"]
    run_plain = run.run_cli
    assert run_plain(sim, "sim", "client", "add", "0", "python3", "--gi", str(gi)).exit_code == 0
    assert run_plain(sim, "sim", "client", "add", "0", "nvidia-persistenced").exit_code == 0
    run(sim, "mig", "status", "gpu0")
    run(sim, "mig", "destroy", "gpu0", "--all", "--force", ok=(4,))
    for p in run(sim, "mig", "status", "gpu0")["gpus"][0]["gpu_processes"]:
        assert run_plain(sim, "sim", "client", "remove", str(p["pid"])).exit_code == 0
    for g in run(sim, "mig", "status", "gpu0")["gpus"][0]["gpu_instances"]:
        for p in g["processes"]:
            assert run_plain(sim, "sim", "client", "remove", str(p["pid"])).exit_code == 0
    run(sim, "cdi", "generate", "--dry-run")
    run(sim, "cdi", "enable", "--class", "vf", "--class", "mig")
    run(sim, "cdi", "list")
    offered = run(sim, "k8s", "resources")["resources"]
    run(sim, "k8s", "allocate", next(iter(offered.values()))[0]["id"])
    run(sim, "k8s", "resources", "--kubernetes", "1.37", "--node", "n1")
    run(sim, "k8s", "resources", "--kubernetes", "1.36", "--node", "n1", "--share-by-capacity", "gpu")
    run(sim, "k8s", "dra-classes")
    run(sim, "k8s", "dra-taint-rules", "gpu0", "--node", "n1")
    run(sim, "k8s", "labels")
    run(sim, "k8s", "labels", "--write")
    run(sim, "mig", "destroy", "gpu0", "--gi", str(gi))
    run(sim, "cdi", "disable")
    run(sim, "mig", "export")
    cfg = tmp / "mig.yaml"
    cfg.write_text(MIG_CONFIG)
    run(sim, "mig", "assert", "-f", str(cfg), ok=(0, 1))
    run(sim, "mig", "apply", "-f", str(cfg))
    run(sim, "mig", "assert", "-f", str(cfg))
    run(sim, "mig", "service", "-f", str(cfg))
    run(sim, "mig", "destroy", "gpu0", "--all")
    run(sim, "mig", "disable", "gpu0", "--no-reset")
    host_cfg = tmp / "host.yaml"
    host_cfg.write_text(HOST_CONFIG + MIG_CONFIG.replace("version: v1\n", ""))
    run(sim, "diff", "-f", str(host_cfg), "-c", "vms")
    run(sim, "apply", "-f", str(host_cfg), "-c", "vms", "--dry-run")
    run(sim, "assert", "-f", str(host_cfg), "-c", "vms", ok=(1,))
    run(sim, "apply", "-f", str(host_cfg), "-c", "vms")
    run(sim, "assert", "-f", str(host_cfg), "-c", "vms")
    run(sim, "export", "-c", "vms")
    run(sim, "apply", "-f", str(host_cfg), "-c", "nosuch", ok=(3,))
    run(sim, "health")
    assert run.run_cli(sim, "sim", "fault", "xid", "gpu5", "48").exit_code == 0
    assert run.run_cli(sim, "sim", "fault", "aer", "0000:a3:00.0", "nonfatal").exit_code == 0
    run(sim, "health", ok=(4,))
    run(sim, "health", "gpu5", ok=(4,))
    assert run.run_cli(sim, "sim", "fault", "ecc", "gpu4").exit_code == 0
    watched = run.run_cli(sim, "health", "--watch", "--for", "0", "--json")  # JSON lines: one document each
    run.docs.extend(("health --watch", json.loads(line)) for line in watched.stdout.splitlines())
    assert run.run_cli(sim, "sim", "fault", "recover", "gpu5").exit_code == 0
    run(None, "sim", "profiles")
    run(None, "sim", "init", str(tmp / "fresh"), "--profile", "qemu-guest")
    hold = run(sim, "sim", "hold", "gpu2")
    run(sim, "sim", "info")
    run(sim, "sim", "release", str(hold["pid"]))
    assert run.run_cli(sim, "sim", "fault", "add", "CreateGpuInstance", "--nth", "5").exit_code == 0
    run(sim, "sim", "fault", "list")
    run(sim, "recover")
    assert run.run_cli(sim, "sim", "fault", "clear").exit_code == 0
    run(sim, "quarantine", "gpu6", "--reason", "bench test")
    run(sim, "release", "gpu6")
    run(sim, "drain", "gpu6", "--dry-run")
    run(sim, "reset", "gpu6")
    assert run.run_cli(sim, "sim", "fault", "xid", "gpu7", "95").exit_code == 0
    run(sim, "remediate", "gpu7", "--dry-run")
    run(sim, "remediate", "gpu7")
    assert run.run_cli(sim, "sim", "fault", "xid", "gpu7", "79").exit_code == 0
    run(sim, "remediate", "gpu7", ok=(5,))
    assert run.run_cli(sim, "sim", "fault", "xid", "gpu6", "95").exit_code == 0
    policy = tmp / "remediation.yaml"
    policy.write_text("vms: shutdown\n")
    looked = run.run_cli(sim, "remediate", "--auto", "--policy", str(policy), "--for", "0", "--json")
    assert looked.exit_code == 0 and looked.stdout, looked.stderr  # JSON lines: one event each
    run.docs.extend(("remediate --auto", json.loads(line)) for line in looked.stdout.splitlines())
    run(sim, "health", ok=(4,))
    run(sim, "units", "list")
    run(sim, "units", "install", "vgpukit-qos.service")
    run(sim, "sim", "reboot")


def mdev_session(run: Session, tmp: Path) -> None:
    """qemu-guest (mtty) for mdevs, t4-mdev for legacy vGPUs."""
    guest = make_sim(tmp / "guest", "qemu-guest")
    run(guest, "mdev", "types")
    run(guest, "mdev", "create", "mtty", "mtty-1", "--uuid", MDEV_UUID)
    held = run(guest, "sim", "hold", MDEV_UUID)
    run(guest, "mdev", "list")
    run(guest, "sim", "release", str(held["pid"]))
    run(guest, "mdev", "define", MDEV_UUID)
    run(guest, "mdev", "define", "--parent", "mtty", "--type", "mtty-2", "--uuid", MDEV_UUID2, "--auto")
    run(guest, "mdev", "modify", "-u", MDEV_UUID2, "--addattr", "a", "--value", "1", "-m")
    run(guest, "mdev", "list", "--defined", "-v")
    run(guest, "mdev", "start", "--all")
    run(guest, "mdev", "start", "-p", "mtty", "-t", "mtty-2")
    run(guest, "mdev", "stop", "-u", MDEV_UUID)
    run(guest, "mdev", "undefine", MDEV_UUID2)
    t4 = make_sim(tmp / "t4", "t4-mdev")
    run(t4, "vgpu", "types")
    created = run(t4, "vgpu", "create", "gpu0", "--type", "T4-4Q", "--count", "2")
    held = run(t4, "sim", "hold", created["vgpus"][0]["id"])
    run(t4, "vgpu", "list")
    run(t4, "sim", "release", str(held["pid"]))
    run(t4, "vgpu", "define", created["vgpus"][0]["id"], "--auto")
    run(t4, "vgpu", "remove", created["vgpus"][0]["id"], "--keep-definition")
    run(t4, "vgpu", "list")  # a vGPU that is only defined
    run(t4, "vgpu", "undefine", created["vgpus"][0]["id"])
    run(t4, "vgpu", "remove", *(v["id"] for v in created["vgpus"][1:]))
    run(t4, "vgpu", "create", "gpu1", "--type", "T4-2Q", "--define")


def libvirt_session(run: Session, tmp: Path) -> None:
    """attach / detach against libvirt's test driver (skipped where libvirt-python is missing)."""
    sim = make_sim(tmp / "lv")
    node = tmp / "node.xml"
    node.write_text(
        "<node><domain type='kvm'><name>vm1</name><memory unit='MiB'>1024</memory>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os></domain></node>"
    )
    uri = f"test://{node}"
    run(sim, "attach", "vm1", "gpu1", "--config", "--connect", uri, "--dry-run")
    run(sim, "detach", "vm1", "gpu1", "--config", "--connect", uri)
    run(sim, "--dry-run", "cdi", "generate")


def qos_session(run: Session, tmp: Path) -> None:
    """qos set / tenant / status against a daemon on a simulated host."""
    from tests.qos.conftest import DaemonProc

    sim = make_sim(tmp / "qos")
    d = DaemonProc(sim, sim=True).start()
    spinner = subprocess.Popen(["/bin/sh", "-c", "sleep 30"])
    try:
        run(sim, "qos", "set", "gpu0", "--policy", "fixed-share")
        run(sim, "qos", "tenant", "add", "gpu0", "a", "--class", "online", "--share", "30", "--pid", str(spinner.pid))
        run(sim, "qos", "status")
        run(sim, "qos", "tenant", "rm", "gpu0", "a")
    finally:
        spinner.kill()
        spinner.wait()
        d.stop()
