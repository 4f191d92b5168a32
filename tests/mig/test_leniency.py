"""mig-parted's leniency, kept and said out loud (docs/mig.md, "Leniency"): every config mig-parted's
reader accepts is accepted, as mig-parted reads it; what cannot mean what it says is one warning line
per problem (stderr, and ``warnings`` under --json) naming the file, line and config; ``--strict``
refuses it (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import as_json, invoke
from vgpukit.sim.build import init_sim
from vgpukit.sim.nvml import SimNvml

TWO = """\
version: v1
mig-configs:
  small:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
  big:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 100}
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("len") / "hgx"
    init_sim(root, "hgx-a100")  # 8x A100-SXM4-40GB (0x20B010DE), MIG off
    return root


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def warnings_of(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    assert all(line.startswith("vgpukit: warning: ") for line in lines), stderr
    return [line.removeprefix("vgpukit: warning: ") for line in lines]


def test_a_json_config_indented_with_tabs_is_read_as_mig_parted_reads_it(host: Path, tmp_path: Path) -> None:
    doc = {
        "version": "v1",
        "mig-configs": {"half": [{"devices": [1], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]},
    }
    path = write(tmp_path, json.dumps(doc, indent="\t"), "c.json")
    assert "\t" in path.read_text()
    r = invoke(host, "mig", "apply", "-f", str(path), "--dry-run", "--json")
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    assert [p["profile"] for p in as_json(r)["placements"]] == ["3g.20gb", "3g.20gb"]
    assert invoke(host, "mig", "assert", "-f", str(path), "-a").exit_code == 0
    bad = write(tmp_path, '{\n\t"version": "v1",\n\t"mig-configs": {\n', "bad.json")  # not JSON: YAML's error
    r = invoke(host, "mig", "apply", "-f", str(bad), "--dry-run")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1


def test_a_problem_in_another_config_warns_and_the_selected_one_applies(host: Path, tmp_path: Path) -> None:
    path = write(tmp_path, TWO)
    r = invoke(host, "mig", "apply", "-f", str(path), "-c", "small", "--dry-run", "--json")
    assert r.exit_code == 0
    assert warnings_of(r.stderr) == [f"{path}:10: config big: mig-devices: a count over 64 can never fit a GPU"]
    assert as_json(r)["warnings"] == warnings_of(r.stderr) and len(as_json(r)["placements"]) == 2
    r = invoke(host, "mig", "apply", "-f", str(path), "-c", "small", "--dry-run", "--strict")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and f"{path}:10: config big" in r.stderr
    r = invoke(host, "mig", "apply", "-f", str(path), "-c", "big", "--dry-run")  # the selected one: refused
    assert r.exit_code == 2 and "can never fit" in r.stderr and r.stderr.count("\n") == 1
    r = invoke(host, "mig", "assert", "-f", str(path), "-c", "small", "--json")
    assert r.exit_code == 1 and as_json(r)["warnings"] == [
        f"{path}:10: config big: mig-devices: a count over 64 can never fit a GPU"
    ]


@pytest.mark.parametrize(
    "filt", ['"A100-SXM4-40GB"', '"20B010DE"', '"0x20B010DE:0x134F10DE:0x1"', '["MODEL", "0x20B010DE,0x20B110DE"]']
)
def test_a_device_filter_mig_parted_cannot_read_matches_nothing_with_a_warning(
    host: Path, tmp_path: Path, filt: str
) -> None:
    text = f"version: v1\nmig-configs:\n  c:\n    - devices: all\n      device-filter: {filt}\n"
    text += '      mig-enabled: true\n      mig-devices: {"7g.40gb": 1}\n'
    path = write(tmp_path, text)
    r = invoke(host, "mig", "apply", "-f", str(path), "--dry-run", "--json")
    assert r.exit_code == 0 and as_json(r)["plan"] == []  # no GPU selected: nothing to do, as in mig-parted
    lines = warnings_of(r.stderr)
    assert lines and all(w.startswith(f"{path}:5: config c: device-filter: not a PCI id") for w in lines)
    assert as_json(r)["warnings"] == lines
    for cmd in (["apply", "--dry-run"], ["assert"]):
        r = invoke(host, "mig", *cmd, "-f", str(path), "--strict")
        assert r.exit_code == 2 and r.stderr.startswith(f"vgpukit: error: {path}:5: config c: device-filter")


def test_indices_no_gpu_has_match_nothing_as_in_mig_parted(host: Path, tmp_path: Path) -> None:
    text = "version: v1\nmig-configs:\n  c:\n    - devices: [-1, 99, 300]\n"
    text += '      mig-enabled: true\n      mig-devices: {"7g.40gb": 1}\n'
    path = write(tmp_path, text)
    r = invoke(host, "mig", "apply", "-f", str(path), "--dry-run", "--json")
    assert r.exit_code == 0 and as_json(r)["plan"] == []
    assert warnings_of(r.stderr) == [
        f"{path}:4: config c: devices: an index outside 0..255 matches no GPU (there is no such NVML index)",
        f"{path}:4: config c: devices: an index outside 0..255 matches no GPU (there is no such NVML index)",
        f"{path}:4: config c: devices: index 99 names no GPU here (8 GPUs): the entry skips it, as mig-parted does",
    ]
    r = invoke(host, "mig", "apply", "-f", str(path), "--dry-run", "--strict")
    assert r.exit_code == 2 and "(and 1 more)" in r.stderr and r.stderr.count("\n") == 1
    host_only = write(tmp_path, text.replace("[-1, 99, 300]", "[0, 99]"), "h.yaml")
    r = invoke(host, "mig", "apply", "-f", str(host_only), "--dry-run", "--strict")
    assert r.exit_code == 2 and "index 99 names no GPU here" in r.stderr


def test_duplicate_keys_and_an_empty_mig_enabled_read_as_mig_parted_reads_them(host: Path, tmp_path: Path) -> None:
    text = "version: v1\nmig-configs:\n  c:\n    - devices: [2]\n      mig-enabled: true\n"
    text += '      mig-devices: {"7g.40gb": 1}\n  c:\n    - devices: [2]\n      mig-enabled:\n'
    path = write(tmp_path, text)
    r = invoke(host, "mig", "apply", "-f", str(path), "--dry-run", "--json")
    assert r.exit_code == 0 and as_json(r)["plan"] == []  # the last "c" counts: MIG off, as it is
    assert [w.split(": ", 1)[1] for w in warnings_of(r.stderr)] == [
        "duplicate key in mig-configs: the last one counts (as in mig-parted), the earlier is ignored",
        "config c: mig-enabled is empty: read as false, as mig-parted reads it",
    ]
    assert SimNvml(host).mig_mode(2) == (False, False)


def test_vgpukit_apply_reads_a_mig_parted_file_with_the_same_leniency(host: Path, tmp_path: Path) -> None:
    path = write(tmp_path, TWO)
    r = invoke(host, "diff", "-f", str(path), "-c", "small", "--json")
    assert r.exit_code == 0 and as_json(r)["warnings"] == warnings_of(r.stderr)
    assert as_json(r)["warnings"] == [f"{path}:10: config big: mig-devices: a count over 64 can never fit a GPU"]
    for cmd in ("apply", "diff", "assert"):
        r = invoke(host, cmd, "-f", str(path), "-c", "small", "--strict", *(["--dry-run"] if cmd == "apply" else []))
        assert r.exit_code == 2 and f"{path}:10: config big" in r.stderr, (cmd, r.stderr)
    tabs = write(
        tmp_path,
        json.dumps({"version": "v1", "mig-configs": {"x": [{"devices": [3], "mig-enabled": False}]}}, indent="\t"),
        "t.json",
    )
    assert invoke(host, "diff", "-f", str(tabs)).exit_code == 0


ENTRY_VALUES = {
    "devices": st.sampled_from(["all", "[0]", "[7, 1]", "[-1]", "[99]", "[]", "[1.0]", "[x]", "0", "{}", "'all'"]),
    "device-filter": st.sampled_from(
        ['"0x20B010DE"', '"A100"', '["0x20B010DE", "bogus"]', '""', "[]", "0x20B010DE", "", '"0x20B010DE:0x1:2"']
    ),
    "mig-enabled": st.sampled_from(["true", "false", "", "yes", "1", '"true"']),
    "mig-devices": st.sampled_from(
        [
            '{"1g.5gb": 7}',
            '{"3g.20gb": 2}',
            '{"7g.40gb": 1, "1g.5gb": 1}',
            "{}",
            '{"1g.5gb": 100}',
            '{"bogus": 1}',
            '{"1g.5gb": -1}',
            '{"1g.5gb": 0}',
            '{"1c.3g.20gb": 3}',
            "",
            '{"1g.10gb": 1}',
        ]
    ),
    "extra": st.sampled_from(["", "      devices: all\n", "      bogus: 1\n"]),
}


@st.composite
def documents(draw: st.DrawFn) -> str:
    configs = []
    for name in draw(st.lists(st.sampled_from(["a", "b", "a", "c d", "!x"]), min_size=1, max_size=3)):
        entries = []
        for _ in range(draw(st.integers(1, 2))):
            keys = draw(
                st.lists(st.sampled_from(["devices", "device-filter", "mig-enabled", "mig-devices"]), max_size=5)
            )
            body = "".join(f"      {k}: {draw(ENTRY_VALUES[k])}\n" for k in keys) + draw(ENTRY_VALUES["extra"])
            entries.append("    -" + (body[5:] if body else " {}\n"))
        configs.append(f"  {name}:\n" + "".join(entries))
    return "version: v1\nmig-configs:\n" + "".join(configs)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(text=documents(), strict=st.booleans(), tabs=st.booleans())
def test_any_config_document_is_accepted_with_warnings_or_refused_in_one_line(
    host: Path, tmp_path_factory: pytest.TempPathFactory, text: str, strict: bool, tabs: bool
) -> None:
    if tabs:  # the same document as JSON indented with tabs, when it is one
        try:
            text = json.dumps(yaml.safe_load(text), indent="\t")
        except (yaml.YAMLError, TypeError, ValueError):
            pass
    path = tmp_path_factory.mktemp("doc") / "c.yaml"
    path.write_text(text)
    args = ["mig", "apply", "-f", str(path), "-c", "a", "--dry-run", "--json", *(["--strict"] if strict else [])]
    r = invoke(host, *args)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    if r.exit_code == 0:
        doc = as_json(r)
        assert doc["warnings"] == warnings_of(r.stderr) and not (strict and doc["warnings"])
    else:
        assert r.exit_code in (2, 3), (r.exit_code, r.stderr)  # 3: no config "a" in the file
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("vgpukit: error: "), r.stderr


def test_a_host_document_with_mig_configs_warns_about_every_config_and_refuses_the_selected_one(
    host: Path, tmp_path: Path
) -> None:
    text = "version: vgpukit.host/v1\nconfigs:\n  one:\n    mig: half\n" + TWO.split("\n", 1)[1].replace(
        "small", "half"
    )
    path = write(tmp_path, text)
    r = invoke(host, "diff", "-f", str(path), "-c", "one", "--json")
    assert r.exit_code == 0 and as_json(r)["warnings"] == [
        f"{path}:13: config big: mig-devices: a count over 64 can never fit a GPU"
    ]
    r = invoke(host, "diff", "-f", str(path), "-c", "one", "--strict")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    r = invoke(host, "diff", "-f", str(write(tmp_path, text.replace("mig: half", "mig: big"), "b.yaml")))
    assert r.exit_code == 2 and "can never fit" in r.stderr
