"""The simulator's own SR-IOV arithmetic, checked by hand and against the toolkit's (two independent sources).

The real kernel checks it too: tests/realkernel/test_shared_behaviour.py places VFs by the PF's
offset and stride on both the simulator and Linux.
"""

from __future__ import annotations

import itertools

import pytest

from vgpukit import pci
from vgpukit.sim.reactions_pci import virtfn_name


@pytest.mark.parametrize(
    ("pf", "offset", "stride", "n", "vf"),
    [
        ("0000:05:00.0", 2, 1, 0, "0000:05:00.2"),  # ConnectX-6: VFs from function .2
        ("0000:41:00.0", 4, 1, 3, "0000:41:00.7"),  # NVIDIA GPU VFs start at .4
        ("0000:41:00.0", 4, 1, 4, "0000:41:01.0"),  # routing ID carries into the device number
        ("0000:00:02.0", 1, 1, 2, "0000:00:02.3"),  # the QEMU NVMe of the real-kernel guest
        ("0000:3b:1f.7", 1, 1, 0, "0000:3c:00.0"),  # ... and into the bus number
        ("0001:80:00.1", 8, 2, 5, "0001:80:02.3"),  # stride 2, another domain: RID 0x8001 + 8 + 10 = 0x8013
        ("0000:05:00.0", 1, 1, 255, "0000:06:00.0"),
    ],
)
def test_vf_name_is_pf_routing_id_plus_offset_plus_n_strides(
    pf: str, offset: int, stride: int, n: int, vf: str
) -> None:
    assert virtfn_name(pf, offset, stride, n) == vf


def test_vf_past_the_last_bus_is_erange() -> None:
    with pytest.raises(OSError) as ei:
        virtfn_name("0000:ff:1f.0", 8, 1, 0)
    assert ei.value.errno == 34


def test_simulator_and_toolkit_agree_on_vf_addresses() -> None:
    pfs = ("0000:00:02.0", "0000:05:00.0", "0000:41:00.0", "0000:3b:1f.6", "000a:c0:10.3")
    for pf, offset, stride, n in itertools.product(pfs, (1, 2, 4, 8, 16), (1, 2, 4), range(0, 300, 7)):
        assert virtfn_name(pf, offset, stride, n) == pci.vf_address(pf, offset, stride, n), (pf, offset, stride, n)


def test_each_profiles_mig_mode_change_agrees_with_the_toolkits_table() -> None:
    """The simulator's own fact (a profile's GPU ``mig_mode_without_reset``: Hopper and newer change MIG mode
    without a reset) against the toolkit's MIG table (``mig_mode_without_reset`` per model, with its source):
    every built-in profile's MIG-capable GPU says it, and says what the table says for its model."""
    from pathlib import Path

    import yaml

    from vgpukit.nvml import table

    seen = 0
    for path in sorted((Path(__file__).resolve().parents[2] / "vgpukit" / "sim" / "profiles").glob("*.yaml")):
        for model in (yaml.safe_load(path.read_text()).get("models") or {}).values():
            gpu = model.get("gpu") or {}
            if gpu.get("mig_capable"):
                assert "mig_mode_without_reset" in gpu, path.name
                assert gpu["mig_mode_without_reset"] is table.model(gpu["model"]).without_reset, path.name
                seen += 1
    assert seen >= 4
