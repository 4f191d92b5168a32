"""A ``match:`` written as a vendor:device filter that is not one (``15b3:zzzz``) is a malformed filter:
exit 2 at its line (docs/fleet.md, "Exit codes"), not a filter that matches nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke


@pytest.mark.parametrize("bad", ["15b3:zzzz", "15b3:", "15b3:101"])
def test_a_malformed_vendor_device_filter_is_refused(sim_dir: Path, tmp_path: Path, bad: str) -> None:
    f = tmp_path / "h.yaml"
    f.write_text(f'version: vgpukit.host/v1\nconfigs:\n  a:\n    vfio:\n      - match: "{bad}"\n')
    for cmd in ("diff", "apply", "assert"):
        r = invoke(sim_dir, cmd, "-f", str(f))
        assert r.exit_code == 2 and f"{f}:5:" in r.stderr and "4 hex digits" in r.stderr, (cmd, r.stderr)


def test_a_well_formed_filter_and_a_model_name_are_taken(sim_dir: Path, tmp_path: Path) -> None:
    f = tmp_path / "h.yaml"
    for good in ("15b3:ffff", "A100"):
        f.write_text(f'version: vgpukit.host/v1\nconfigs:\n  a:\n    vfio:\n      - match: "{good}"\n')
        r = invoke(sim_dir, "diff", "-f", str(f))
        assert r.exit_code == 0, (good, r.stderr)
