"""Fixed hostile documents every reader must refuse in one line (the fuzzers' sharpest cases)."""

from __future__ import annotations

import pytest

from vgpukit.errors import InvalidInput
from vgpukit.mig import config

from .harness import FuzzHost, snapshot
from .test_formats_fuzz import CASES, plant

NESTED = {"json": '{"a":' * 5000 + "1" + "}" * 5000, "yaml": "[" * 5000 + "]" * 5000, "text": "{{" + "(" * 5000 + "}}"}


@pytest.mark.parametrize("name", list(CASES))
def test_5000_levels_of_nesting(fuzz_host: FuzzHost, name: str) -> None:
    rel, fmt, _, commands = CASES[name]
    try:
        for argv in commands:
            plant(fuzz_host.work / rel, NESTED[fmt])
            fuzz_host.before = snapshot(fuzz_host.work)
            fuzz_host.run(argv, group="documents", allow_1=argv[:2] == ["mdev", "start"])  # the contract holds
    finally:
        fuzz_host.before = fuzz_host.pristine_snapshot
        fuzz_host.restore()


@pytest.mark.parametrize(
    "user_file", [NESTED["yaml"], NESTED["json"], "a:\n" + "".join("  " * i + "- \n" for i in range(600))]
)
def test_nested_user_files(fuzz_host: FuzzHost, user_file: str) -> None:
    (fuzz_host.scratch / "deep.yaml").write_text(user_file)
    for argv in (["mig", "apply", "-f", "deep.yaml"], ["sim", "init", "deep-sim", "--profile", "deep.yaml"]):
        res = fuzz_host.run(argv, group="documents")
        assert res.rc == 2 and "nested more than" in res.err, res


@pytest.mark.parametrize("item", [".inf", "2.7", "true", "9223372036854775808", "'٣'", "'0x10'", "[1]", "{}"])
def test_mig_config_device_indices_are_plain_integers(item: str) -> None:
    text = f"version: v1\nmig-configs:\n  a:\n    - devices: [{item}]\n      mig-enabled: false\n"
    with pytest.raises(InvalidInput, match=r"^c\.yaml:4: devices: each item must be an NVML index 0\.\.255$"):
        config.parse(text, "c.yaml")


@pytest.mark.parametrize("count", ["2.5", "true", "-1", "18446744073709551616", ".nan"])
def test_mig_config_counts_are_bounded_integers(count: str) -> None:
    head = "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n"
    text = head + f"      mig-devices: {{1g.5gb: {count}}}\n"
    with pytest.raises(InvalidInput, match=r"^c\.yaml:6: mig-devices: a count must be an integer 0\.\.64$"):
        config.parse(text, "c.yaml")


def test_a_corrupt_sim_state_says_how_to_reset(fuzz_host: FuzzHost) -> None:
    for rel, argv in (
        (".vgpukit-sim/nvml.json", ["mig", "status"]),
        (".vgpukit-sim/kernel.json", ["sriov", "enable", "nic0", "--vfs", "1"]),
        (".vgpukit-sim/sim.json", ["sim", "info"]),
    ):
        plant(fuzz_host.work / rel, '{"gpus": 5}')
        fuzz_host.before = snapshot(fuzz_host.work)
        try:
            res = fuzz_host.run(argv, group="documents")
        finally:
            fuzz_host.before = fuzz_host.pristine_snapshot
            fuzz_host.restore()
        profile = "PROFILE" if rel.endswith("sim.json") else "fuzz-host"  # sim.json is where the name is kept
        assert res.rc == 2 and rel in res.err and f"--profile {profile} --force" in res.err, res
