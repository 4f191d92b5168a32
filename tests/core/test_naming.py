"""One grammar and one resolver for device names; one IOMMU viability rule; one sysfs layout."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.attach.fakehost import FakeHost
from tests.conftest import make_sim, sim_host
from vgpukit import iommu, naming
from vgpukit.errors import InvalidInput, NotFound
from vgpukit.host import Host
from vgpukit.pci import Scan
from vgpukit.sim.nvml import SimNvml
from vgpukit.sriov.binding import group_warnings

Run = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[2]


def test_every_spelling_of_a_pci_function(sim_dir: Path) -> None:
    host = sim_host(sim_dir)
    nvml = SimNvml(sim_dir)
    gpu1 = nvml.gpus()[1]
    for name in ("gpu1", "GPU1", " gpu1 ", "04:00.0", "0000:04:00.0", "0000:04:00.0".upper(), gpu1.uuid.lower()):
        t = naming.resolve(host, name, nvml=nvml)
        assert (t.kind, t.bdf) == (naming.PCI, "0000:04:00.0"), name
    assert naming.resolve(host, "nic2").bdf == "0000:85:00.0"
    assert naming.resolve(host, "nvme0").bdf == "0000:06:00.0"


def test_gpus_by_nvml_index_only_where_a_gpu_is_meant(sim_dir: Path) -> None:
    host, nvml = sim_host(sim_dir), SimNvml(sim_dir)
    gpu = frozenset({naming.GPU})
    for name in ("1", "gpu1", "04:00.0", nvml.gpus()[1].uuid):
        t = naming.resolve(host, name, gpu, nvml=nvml)
        assert (t.kind, t.bdf, t.nvml_index) == (naming.GPU, "0000:04:00.0", 1), name
    with pytest.raises(InvalidInput, match="gpu1"):  # plain digits elsewhere: bad input, pointing at gpuN
        naming.resolve(host, "1", nvml=nvml)
    with pytest.raises(NotFound, match="NVML does not report"):  # a NIC is no GPU
        naming.resolve(host, "nic0", gpu, nvml=nvml)


@pytest.mark.parametrize(
    ("name", "exc", "text"),
    [
        ("gpu8", NotFound, "no gpu8 on this host: it has 8 GPUs (gpu0..gpu7)"),
        ("nvme3", NotFound, "no nvme3 on this host: it has 1 NVMe controller (nvme0)"),
        ("0000:99:00.0", NotFound, "no PCI device 0000:99:00.0 on this host"),
        ("GPU-00000000-0000-0000-0000-000000000000", NotFound, "no GPU with UUID"),
        ("../../etc", InvalidInput, "cannot name a device by"),
        ("3b:0", InvalidInput, "cannot name a device by"),
        ("MIG-00000000-0000-0000-0000-000000000000", InvalidInput, "(a MIG device UUID, which this command does not"),
    ],
)
def test_unknown_names_fail_one_way(sim_dir: Path, name: str, exc: type[Exception], text: str) -> None:
    with pytest.raises(exc, match=re.escape(text)):
        naming.resolve(sim_host(sim_dir), name, nvml=SimNvml(sim_dir))


def test_mdev_parents_and_instances(tmp_path: Path) -> None:
    guest = make_sim(tmp_path / "guest", "qemu-guest")
    host = sim_host(guest)
    parent = frozenset({naming.PARENT})
    assert naming.resolve(host, "mtty", parent).parent == "mtty"
    with pytest.raises(NotFound, match=re.escape("no mdev parent 00:02.0 on this host: 0000:00:02.0 is not one")):
        naming.resolve(host, "00:02.0", parent)
    with pytest.raises(NotFound, match="no mdev parent nosuch on this host"):
        naming.resolve(host, "nosuch", parent)
    uid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
    with pytest.raises(NotFound, match=f"no mdev {uid} on this host"):
        naming.resolve(host, uid.upper(), frozenset({naming.MDEV}))
    host.write(host.mdev_type("mtty", "mtty-1", "create"), uid)
    assert naming.resolve(host, uid.upper(), frozenset({naming.MDEV})).uuid == uid


def test_the_cli_takes_the_same_names_everywhere(sim_dir: Path, run_cli: Run) -> None:
    uuid = SimNvml(sim_dir).gpus()[2].uuid
    for name in ("gpu2", "23:00.0", "0000:23:00.0", uuid, "2"):
        r = run_cli(sim_dir, "--json", "mig", "status", name)
        assert r.exit_code == 0 and json.loads(r.stdout)["gpus"][0]["bdf"] == "0000:23:00.0", (name, r.output)
    for name in ("nic1", "25:00.0", "0000:25:00.0"):
        r = run_cli(sim_dir, "--json", "sriov", "list", name)
        assert r.exit_code == 0 and json.loads(r.stdout)["pfs"][0]["bdf"] == "0000:25:00.0", (name, r.output)
    # unknown names: the same one-line shape from every command
    for args in (("mig", "status", "gpu9"), ("sriov", "list", "nic9"), ("bind", "gpu9", "--driver", "vfio-pci"),
                 ("vgpu", "types", "gpu9"), ("sim", "hold", "gpu9")):  # fmt: skip
        r = run_cli(sim_dir, *args)
        assert (r.exit_code == 3 and r.stderr.startswith("vgpukit: error: no gpu9 on this host")) or (
            "nic9" in args and r.stderr.startswith("vgpukit: error: no nic9 on this host")
        ), (args, r.stderr)
    r = run_cli(sim_dir, "sriov", "list", "0")
    assert r.exit_code == 2 and "gpu0" in r.stderr


def _group_of_three(fake: FakeHost, other_driver: str, other_class: int = 0x020000) -> str:
    fake.pci("0000:3b:00.0", driver="vfio-pci", group=7)
    fake.pci("0000:3b:00.1", cls=other_class, driver=other_driver, group=7)
    fake.pci("0000:3a:00.0", cls=0x060400, driver="pcieport", group=7)
    return "0000:3b:00.0"


@pytest.mark.parametrize(
    ("driver", "cls", "viable"),
    [
        ("vfio-pci", 0x020000, True),
        ("mlx5_vfio_pci", 0x020000, True),  # a vendor VFIO variant driver
        ("pcieport", 0x060400, True),
        ("weird_bridge_drv", 0x060400, True),  # a bridge, whatever drives it
        ("mlx5_core", 0x020000, False),
        ("snd_hda_intel", 0x040300, False),
    ],
)
def test_one_iommu_viability_rule(tmp_path: Path, driver: str, cls: int, viable: bool) -> None:
    """bind's warnings and attach's check agree, because both ask vgpukit.iommu."""
    from vgpukit.attach.devices import resolve
    from vgpukit.attach.planner import check_iommu
    from vgpukit.errors import Conflict

    fake = FakeHost(tmp_path)
    bdf = _group_of_three(fake, driver, cls)
    host = Host(tmp_path)
    assert (iommu.blockers(host, 7, {bdf}) == []) is viable
    assert (group_warnings(host, bdf) == []) is viable
    if viable:
        check_iommu(host, resolve(host, bdf))
    else:
        with pytest.raises(Conflict, match="not viable"):
            check_iommu(host, resolve(host, bdf))


def test_sysfs_layout_spelled_only_by_the_host_door() -> None:
    names = r"""["'](mdev_bus|iommu_groups|drivers_probe|mdev_supported_types)["']"""
    spelled = re.compile(names + r"""|sys\(["'](bus|class)["']|["']system["'], ["']node["']""")
    offenders = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in sorted((ROOT / "vgpukit").rglob("*.py"))
        if p != ROOT / "vgpukit/host/kernel_paths.py" and "sim" not in p.relative_to(ROOT / "vgpukit").parts
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if spelled.search(line) and not line.strip().startswith("#")
    ]
    assert not offenders, (
        "sysfs paths spelled outside the host door's kernel layout (host/kernel_paths.py):\n" + "\n".join(offenders)
    )


def test_no_caches_keyed_by_object_identity() -> None:
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "vgpukit").rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "[id(" in line and "id(step)" not in line and "id(steps" not in line
    ]
    assert not offenders, offenders


AUDIT = """
import sys
from collections import Counter
opened = Counter()
root = sys.argv[1]
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].startswith(root + "/sys/"):
        opened[args[0]] += 1
sys.addaudithook(hook)
from vgpukit.cli.main import main
rc = main(["--sim", root, *sys.argv[2:]])
print("AUDIT", rc, max(opened.values(), default=0), sum(opened.values()))
"""


@pytest.mark.parametrize("args", [("sriov", "list"), ("topo", "--json"), ("devices",), ("mdev", "list")])
def test_read_commands_read_each_sysfs_file_once(tmp_path: Path, args: tuple[str, ...]) -> None:
    sim = make_sim(tmp_path / "host")
    Host(sim, kernel=__import__("vgpukit.sim.kernel", fromlist=["SimKernel"]).SimKernel(sim)).write(
        Host(sim).pci_device("0000:05:00.0", "sriov_numvfs"), "8"
    )
    out = subprocess.run(
        [sys.executable, "-c", AUDIT, str(sim), *args], capture_output=True, text=True, check=True, cwd=ROOT
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("AUDIT"))
    _, rc, most, total = line.split()
    assert rc == "0" and most == ("1" if total != "0" else "0") and (total != "0" or args == ("mdev", "list")), line


def test_a_scan_reads_a_device_once(sim_dir: Path) -> None:
    scan = Scan(sim_host(sim_dir))
    assert scan.device("0000:03:00.0") is scan.device("0000:03:00.0")
    physical = scan.physical()
    assert all(not d.is_vf for d in physical) and physical is scan.physical()
