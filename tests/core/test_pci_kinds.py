"""The aliases' light read of each PCI function (``Scan.kinds``: vendor, class, boot_vga) says what the
whole record says, on every built-in profile, with VFs present, and whichever the command read first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_sim, sim_host
from vgpukit import naming
from vgpukit.pci import Scan
from vgpukit.sim.build import builtin_profiles


def _whole(scan: Scan) -> list[tuple[str, str, str]]:
    return [(d.bdf, d.vendor, d.kind) for d in scan.physical()]


@pytest.mark.parametrize("profile", sorted(builtin_profiles()))
def test_kinds_match_the_whole_records(tmp_path: Path, profile: str) -> None:
    h = sim_host(make_sim(tmp_path / "h", profile))
    for bdf in Scan(h).bdfs():  # VFs on every PF that can have them: a VF is never aliased
        if h.exists(h.pci_device(bdf, "sriov_totalvfs")) and h.read(h.pci_device(bdf, "sriov_numvfs")) == "0":
            total = int(h.read(h.pci_device(bdf, "sriov_totalvfs")))
            h.write(h.pci_device(bdf, "sriov_numvfs"), f"{min(total, 2)}\n")
    light = Scan(h)
    assert light.kinds(light=True) == _whole(Scan(h))
    whole = Scan(h)
    expected = _whole(whole)
    assert whole.kinds(light=True) == expected  # from the records already read
    assert Scan(h).kinds() == expected  # not light: the whole records
    assert naming.aliases(light, light=True) == naming.aliases(whole)
