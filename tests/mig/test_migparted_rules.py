"""mig-parted's rules, one test each (docs/mig.md has the table naming these tests)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from tests.conftest import _Main, as_json, invoke
from vgpukit.errors import InvalidInput
from vgpukit.mig import config
from vgpukit.sim.build import init_sim
from vgpukit.sim.nvml import SimNvml

from .test_cli import layout

HEAD = "version: v1\nmig-configs:\n"


def doc(body: str) -> str:
    return HEAD + body


def run(sim: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Result:
    from vgpukit.cli.main import main

    return CliRunner(env=env).invoke(_Main(main), ["--sim", str(sim), *args], input=stdin, catch_exceptions=False)


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    root = tmp_path / "mixed"
    init_sim(root, "mixed-a100-t4")  # gpu0 A100, gpu1 T4, gpu2 A100
    return root


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(
        doc(
            """\
  all-3g:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
  t4-on:
    - devices: [1]
      mig-enabled: true
      mig-devices: {}
  t4-off:
    - devices: [1]
      mig-enabled: false
  overlap:
    - devices: all
      mig-enabled: true
      mig-devices: {"7g.40gb": 1}
    - devices: [2]
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
  conflict:
    - devices: all
      mig-enabled: true
      mig-devices: {"7g.40gb": 1}
    - devices: [2]
      mig-enabled: false
"""
        )
    )
    return p


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("filt", "want"),
    [
        ('"0x20B010DE"', [config.DeviceId(0x20B0, 0x10DE)]),
        ('["0x20B010DE", "0x20B210DE"]', [config.DeviceId(0x20B0, 0x10DE), config.DeviceId(0x20B2, 0x10DE)]),
        ('"0x20B010DE:0x134F10DE"', [config.DeviceId(0x20B0, 0x10DE, (0x134F, 0x10DE))]),
        ('"548540638"', [config.DeviceId(0x20B2, 0x10DE)]),  # Go's ParseUint(s, 0, 32): decimal too
        ('""', None),  # mig-parted: an empty filter is no filter
    ],
)
def test_device_filter_forms(filt: str, want: list[config.DeviceId] | None) -> None:
    e = config.parse(doc(f"  c:\n    - devices: all\n      device-filter: {filt}\n      mig-enabled: false\n"))["c"][0]
    assert e.device_filter == want


@pytest.mark.parametrize(
    "filt",
    ['"A100-SXM4-40GB"', '"20B010DE"', '["0x20B010DE", "MODEL"]', '"0x20B010DE:0x1:0x2"', '"0x1FFFFFFFF"'],
)
def test_unknown_filter_forms_match_nothing_with_a_note_naming_the_line(filt: str) -> None:
    """mig-parted reads such an item as an id no GPU has (it ignores the parse error): the file is
    accepted, the item matches nothing, and vgpukit says so (a note: a warning, refused by --strict)."""
    text = doc(f"  c:\n    - devices: all\n      mig-enabled: false\n      device-filter: {filt}\n")
    parsed = config.parse_file(text, "c.yaml")
    (entry,) = parsed.configs["c"]
    assert not entry.selects(0, config.DeviceId(0x20B1, 0x10DE))  # an A100 80GB: no filter item is it
    assert entry.selects(0, config.DeviceId(0x20B0, 0x10DE)) is ("0x20B010DE" in filt and "MODEL" in filt)
    assert [str(n).split(": ", 2)[:2] for n in parsed.notes] == [["c.yaml:6", "config c"]]
    assert "device-filter: not a PCI id mig-parted can read" in str(parsed.notes[0])
    with pytest.raises(InvalidInput, match=r"^c\.yaml:6: config c: device-filter: not a PCI id"):
        config.screen(parsed.notes, "c", strict=True)


def test_an_unquoted_number_as_filter_is_refused_as_mig_parted_refuses_it() -> None:
    text = doc("  c:\n    - devices: all\n      mig-enabled: false\n      device-filter: 0x20B010DE\n")
    with pytest.raises(InvalidInput, match=r"^c\.yaml:6: device-filter"):
        config.parse(text, "c.yaml")


def test_subsystem_filter_matches_only_that_board_and_zero_matches_unknown() -> None:
    f = config.parse_device_id("0x233010DE:0x16C010DE")
    assert f.matches(config.DeviceId(0x2330, 0x10DE, (0x16C0, 0x10DE)))
    assert not f.matches(config.DeviceId(0x2330, 0x10DE, (0x16C1, 0x10DE)))
    assert not f.matches(config.DeviceId(0x2330, 0x10DE))
    assert config.parse_device_id("0x233010DE:0x0").matches(config.DeviceId(0x2330, 0x10DE))


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("1g.5gb", "1g.5gb"), ("1c.1g.5gb", "1g.5gb"), ("1c.3g.20gb", "1c.3g.20gb"), ("1g.5gb+me", "1g.5gb+me")],
)
def test_profile_names_as_go_nvlib_reads_them(name: str, canonical: str) -> None:
    assert str(config.parse_mig_name(name)) == canonical


@pytest.mark.parametrize("name", ["1G.5GB", "bogus", "1g.5gb+me-x", "1g", "1g.5gb+1x", " 1g.5gb"])
def test_malformed_profile_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match=r":7: mig-devices: a key"):
        config.parse(
            doc(f'  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        "{name}": 1\n')
        )


def test_entry_rules() -> None:
    with pytest.raises(InvalidInput, match="mig-devices is required when mig-enabled is true"):
        config.parse(doc("  c:\n    - devices: all\n      mig-enabled: true\n"))
    with pytest.raises(InvalidInput, match="all counts are 0"):
        config.parse(doc('  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"1g.5gb": 0}\n'))
    with pytest.raises(InvalidInput, match="needs at least one config"):
        config.parse("version: v1\nmig-configs: {}\n")
    with pytest.raises(InvalidInput, match='devices must be "all" or a list'):
        config.parse(doc("  c:\n    - devices: 0\n      mig-enabled: false\n"))
    e = config.parse(
        doc('  c:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {"1c.1g.5gb": 2, "1g.5gb": 1}\n')
    )
    assert e["c"][0].mig_devices == {"1g.5gb": 3}  # one device name, however it is spelled
    e = config.parse(doc("  c:\n    - devices: all\n      mig-enabled: false\n      mig-devices: {}\n"))
    assert e["c"][0].mig_devices == {}


# ----------------------------------------------------------------------------- the walk
def test_devices_all_skips_gpus_that_cannot_do_mig(mixed: Path, cfg: Path) -> None:
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g")
    assert r.exit_code == 0, r.stderr
    assert [sorted(p for p, _, _ in layout(mixed, i)) for i in (0, 2)] == [[9, 9], [9, 9]]
    assert invoke(mixed, "mig", "assert", "-f", str(cfg), "-c", "all-3g").exit_code == 0


def test_mig_on_an_explicitly_listed_non_mig_gpu_is_the_error(mixed: Path, cfg: Path) -> None:
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "t4-on")
    assert r.exit_code == 5 and r.stderr.count("\n") == 1
    assert re.search(r"c\.yaml:8:[0-9]+: gpu1 \(Tesla T4\) is not MIG-capable", r.stderr), r.stderr  # its devices
    assert invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "t4-off").exit_code == 0  # disabled: skipped


def test_overlapping_entries_apply_in_order_the_last_wins(mixed: Path, cfg: Path) -> None:
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "overlap")
    assert r.exit_code == 0, r.stderr
    assert [p for p, _, _ in layout(mixed, 0)] == [0]
    assert sorted(p for p, _, _ in layout(mixed, 2)) == [19] * 7
    assert invoke(mixed, "mig", "assert", "-f", str(cfg), "-c", "overlap").exit_code == 0


def test_overlapping_entries_that_disagree_on_the_mode(mixed: Path, cfg: Path) -> None:
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "conflict")
    assert r.exit_code == 2 and "lines 22 and 25 both select gpu2" in r.stderr
    assert SimNvml(mixed).mig_mode(0) == (False, False)  # nothing done
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "conflict", "--mode-only")
    assert r.exit_code == 0, r.stderr
    assert [SimNvml(mixed).mig_mode(i)[0] for i in (0, 2)] == [True, False]  # --mode-only: the last wins
    assert invoke(mixed, "mig", "assert", "-f", str(cfg), "-c", "conflict", "-m").exit_code == 1  # as mig-parted


# ----------------------------------------------------------------------------- CLI conventions
def test_stdin_and_environment_select_file_and_config(mixed: Path, cfg: Path) -> None:
    text = cfg.read_text()
    assert run(mixed, "mig", "apply", "-f", "-", "-c", "all-3g", stdin=text).exit_code == 0
    assert (
        run(
            mixed, "mig", "assert", env={"MIG_PARTED_CONFIG_FILE": str(cfg), "MIG_PARTED_SELECTED_CONFIG": "all-3g"}
        ).exit_code
        == 0
    )
    both = {"VGPUKIT_MIG_SELECTED_CONFIG": "t4-off", "MIG_PARTED_SELECTED_CONFIG": "overlap"}
    r = run(mixed, "mig", "assert", "-f", str(cfg), "--json", env=both)  # vgpukit's name wins
    assert as_json(r)["config"] == "t4-off"
    r = run(mixed, "mig", "assert", "-f", str(cfg), "-c", "all-3g", "--json", env=both)  # the option wins
    assert as_json(r)["config"] == "all-3g"
    r = run(mixed, "mig", "apply", env={"VGPUKIT_MIG_CONFIG_FILE": "", "MIG_PARTED_CONFIG_FILE": ""})
    assert r.exit_code == 2 and "no config file" in r.stderr


def test_mode_only_and_skip_reset(mixed: Path, cfg: Path) -> None:
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g", "--mode-only", "--skip-reset")
    assert r.exit_code == 0, r.stderr
    assert SimNvml(mixed).mig_mode(0) == (False, True)  # pending until a reset, as mig-parted -s leaves it
    assert invoke(mixed, "mig", "assert", "-f", str(cfg), "-c", "all-3g", "-m").exit_code == 1
    r = invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g", "--skip-reset")
    assert r.exit_code == 4 and "--skip-reset" in r.stderr
    assert invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g", "-m").exit_code == 0  # resets now
    assert invoke(mixed, "mig", "assert", "-f", str(cfg), "-c", "all-3g", "-m").exit_code == 0
    assert layout(mixed, 0) == []  # --mode-only made no MIG devices
    assert invoke(mixed, "mig", "assert", "-f", str(cfg), "-c", "all-3g").exit_code == 1
    assert invoke(mixed, "mig", "assert", "-f", str(cfg), "-c", "all-3g", "-a").exit_code == 0  # valid config


def test_export_on_a_host_without_mig_gpus_is_a_valid_document(tmp_path: Path) -> None:
    for profile in ("qemu-guest", "t4-mdev"):
        root = tmp_path / profile
        init_sim(root, profile)
        r = invoke(root, "mig", "export")
        assert r.exit_code == 0
        entries = config.parse(r.stdout, "export")["current"]
        assert [(e.devices, e.mig_enabled, e.mig_devices) for e in entries] == [(None, False, {})]
        saved = tmp_path / f"{profile}.yaml"
        saved.write_text(r.stdout)
        assert invoke(root, "mig", "apply", "-f", str(saved)).exit_code == 0
        assert invoke(root, "mig", "assert", "-f", str(saved)).exit_code == 0


def test_export_merges_as_mig_parted(mixed: Path, cfg: Path) -> None:
    invoke(mixed, "mig", "apply", "-f", str(cfg), "-c", "all-3g")
    out = yaml.safe_load(invoke(mixed, "mig", "export", "-l", "now").stdout)["mig-configs"]["now"]
    assert out == [
        {"device-filter": "0x20B010DE", "devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
        {"device-filter": "0x1EB810DE", "devices": "all", "mig-enabled": False, "mig-devices": {}},
    ]
    r = invoke(mixed, "mig", "export", "-o", "json")
    assert '"mig-configs"' in r.stdout


def test_boot_unit_uses_the_entry_point_and_orders_before_gpu_users(mixed: Path, cfg: Path) -> None:
    r = invoke(mixed, "mig", "service", "-f", str(cfg), "-c", "all-3g", "--install")
    assert r.exit_code == 0, r.stderr
    unit = (mixed / "etc/systemd/system/vgpukit-mig.service").read_text()
    assert "Before=nvidia-gpu-reset.target" in unit and "kubelet.service" in unit
    assert "After=nvidia-persistenced.service nvidia-fabricmanager.service" in unit
    assert f'Environment="VGPUKIT_MIG_CONFIG_FILE={cfg}"' in unit
    exe = next(line for line in unit.splitlines() if line.startswith("ExecStart="))[len("ExecStart=") :].split()
    assert exe[-2:] == ["mig", "apply"] and Path(exe[0]).is_absolute() and Path(exe[0]).exists()
    assert (mixed / "etc/systemd/system/nvidia-gpu-reset.target").exists()
    r = invoke(mixed, "mig", "service", "-f", "-", "-c", "all-3g")
    assert r.exit_code == 2
