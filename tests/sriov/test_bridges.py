"""Bridges, host-critical functions and the console: the simulated kernel's vfio-pci turns bridges
down as the real one does, and the planner refuses first, whichever door asks (tests/doors has the
door matrix; tests/realkernel/test_bridge_realkernel.py the same sequence on Linux)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Run, invoke, make_sim, sim_host
from tests.doors.harness import host_config, host_state
from tests.realkernel.targets import CliResult, Target
from vgpukit.pci_kind import header_type

CONSOLE, BMC_BRIDGE, ROOT_PORT = "0000:02:00.0", "0000:01:00.0", "0000:00:1c.0"  # t4-mdev


class SimT4(Target):
    """The t4-mdev simulated host as a test target (the real-kernel suite's interface)."""

    kind = "sim"

    def __init__(self, root: Path) -> None:
        self.root = make_sim(root, "t4-mdev")
        self.host = sim_host(self.root)

    def cli(self, *args: str) -> CliResult:
        r = invoke(self.root, *args)
        return CliResult(r.exit_code, r.stdout, r.stderr)


def test_config_space_says_which_functions_are_bridges(tmp_path: Path) -> None:
    host = SimT4(tmp_path / "h").host
    assert [header_type(host, b) for b in (ROOT_PORT, BMC_BRIDGE, CONSOLE, "0000:3b:00.0")] == [1, 1, 0, 0]
    config = host.read_bytes_opt(host.pci_device(CONSOLE, "config"), 64)
    assert config is not None and config[:4] == bytes.fromhex("031a0020")  # vendor 1a03, device 2000


def test_sim_kernel_vfio_pci_turns_a_bridge_down(tmp_path: Path) -> None:
    """The real-kernel case's sequence: drivers_probe succeeds and leaves the bridge unbound, a bind
    write answers the probe's EINVAL; put back, pcieport takes it again."""
    t = SimT4(tmp_path / "h")
    h = t.host
    assert t.write(h.pci_device(ROOT_PORT, "driver_override"), "vfio-pci") is None
    assert t.write(h.pci_driver("pcieport", "unbind"), ROOT_PORT) is None
    assert t.write(h.sys("bus", "pci", "drivers_probe"), ROOT_PORT) is None
    assert t.driver(ROOT_PORT) is None
    assert t.write(h.pci_driver("vfio-pci", "bind"), ROOT_PORT) == "EINVAL"
    assert t.write(h.pci_device(ROOT_PORT, "driver_override"), "\n") is None
    assert t.write(h.sys("bus", "pci", "drivers_probe"), ROOT_PORT) is None
    assert t.driver(ROOT_PORT) == "pcieport"
    # an endpoint still goes: the fact is about the header, not about vfio-pci
    assert t.write(h.pci_device("0000:3b:00.0", "driver_override"), "vfio-pci") is None
    assert t.write(h.pci_driver("nvidia", "unbind"), "0000:3b:00.0") is None
    assert t.write(h.sys("bus", "pci", "drivers_probe"), "0000:3b:00.0") is None
    assert t.driver("0000:3b:00.0") == "vfio-pci"


def test_bind_refuses_a_bridge_even_forced_and_changes_nothing(tmp_path: Path) -> None:
    t = SimT4(tmp_path / "h")
    before = host_state(t.root)
    for extra in ((), ("--force",)):
        r = t.cli("bind", ROOT_PORT, "--driver", "vfio-pci", *extra)
        assert r.rc == 5 and r.stderr.count("\n") == 1, r
        assert "it is a PCI-to-PCI bridge (header type 1)" in r.stderr
        assert host_state(t.root) == before
    assert t.cli("unbind", ROOT_PORT).rc == 0  # unbinding is not putting it on vfio-pci
    assert t.cli("bind", ROOT_PORT, "--restore").rc == 0 and t.driver(ROOT_PORT) == "pcieport"


HOST_CRITICAL = """\
version: 1
name: chipset
numa_nodes: {0: '0-3'}
drivers: {lpc_ich: ['8086:a1c1'], vfio-pci: []}
models:
  host-bridge: {ids: '8086:2020', class: '0x060000'}
  lpc: {ids: '8086:a1c1', class: '0x060100'}
  bmc-vga: {ids: '1a03:2000', class: '0x030000'}
host_bridges:
- name: pci0000:00
  devices:
  - {bdf: '0000:00:00.0', model: host-bridge}
  - {bdf: '0000:00:1f.0', model: lpc}
  - {bdf: '0000:00:05.0', model: bmc-vga}
"""


def test_host_critical_bridges_with_a_normal_header_and_the_bmc_vga(tmp_path: Path, run_cli: Run) -> None:
    (tmp_path / "chipset.yaml").write_text(HOST_CRITICAL)
    sim = make_sim(tmp_path / "h", str(tmp_path / "chipset.yaml"))
    host = sim_host(sim)
    assert header_type(host, "0000:00:00.0") == header_type(host, "0000:00:1f.0") == 0  # vfio-pci would take them
    before = host_state(sim)
    for bdf, cls in (("0000:00:00.0", "0600"), ("0000:00:1f.0", "0601")):
        r = run_cli(sim, "bind", bdf, "--driver", "vfio-pci", "--force")
        assert r.exit_code == 5, r.stderr
        assert f"it is a bridge (class 0x{cls}), host-critical: vgpukit never puts bridges on vfio-pci" in r.stderr
    # the BMC's VGA is the (remote) console even without boot_vga
    r = run_cli(sim, "bind", "0000:00:05.0", "--driver", "vfio-pci")
    assert r.exit_code == 4 and "it is the console display device (the BMC's VGA)" in r.stderr, r.stderr
    assert host_state(sim) == before


def test_a_match_leaves_the_bridge_out_and_force_moves_the_console(tmp_path: Path) -> None:
    """``match: ASPEED`` selects the BMC's bridge and its VGA: the bridge is no candidate; the VGA is
    the console, moved only with ``force: true`` (as ``bind --force``); a second apply does nothing."""
    sim = make_sim(tmp_path / "h", "t4-mdev")
    path = host_config(tmp_path, "vfio:\n  - {match: ASPEED, force: true}")
    r = invoke(sim, "--json", "apply", "-f", str(path), "-c", "door")
    assert r.exit_code == 0, r.stderr
    t = SimT4.__new__(SimT4)
    t.root, t.host = sim, sim_host(sim)
    assert (t.driver(CONSOLE), t.driver(BMC_BRIDGE)) == ("vfio-pci", "pcieport")
    again = invoke(sim, "--json", "apply", "-f", str(path), "-c", "door")
    assert again.exit_code == 0 and '"changed": false' in again.stdout, again.stdout
