"""Under a shim (``mig --mig-parted``, ``mdev --mdevctl``) an error's hint names the shim's own command,
not vgpukit's (trial 2: ``(see: vgpukit mig export --help)`` under nvidia-mig-parted)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import invoke, make_sim

UUID = "11111111-2222-3333-4444-555555555555"


def test_hints_name_the_shims_commands(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h")
    r = invoke(sim, "mig", "--mig-parted", "export", "-x")
    assert r.exit_code == 2 and r.stderr.endswith("(see: nvidia-mig-parted export --help)\n"), r.stderr
    r = invoke(sim, "mig", "export", "-x")
    assert r.exit_code == 2 and r.stderr.endswith("(see: vgpukit mig export --help)\n"), r.stderr
    r = invoke(sim, "mdev", "--mdevctl", "stop", "-u", UUID)
    assert r.exit_code != 0 and r.stderr.endswith("(see: mdevctl list)\n"), r.stderr
    r = invoke(sim, "mdev", "stop", UUID)
    assert r.exit_code != 0 and r.stderr.endswith("(see: vgpukit mdev list)\n"), r.stderr


def test_the_templates_say_where_the_package_installs_them() -> None:
    root = Path(__file__).resolve().parents[2] / "templates" / "bin"
    for name in ("nvidia-mig-parted", "mdevctl", "lsmdev"):
        text = (root / name).read_text()
        assert f"/usr/lib/vgpukit/bin/{name}" in text and "/usr/local" not in text, name
