"""Every error about a host config names FILE:LINE:COLUMN of the value at fault and the config (apply
and diff alike); tests/fleet/test_error_places.py plants bad values at random places."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim

DOC = """\
version: vgpukit.host/v1
configs:
  absent:
    sriov:
      - device: nic9
        vfs: 2
  word:
    vfio:
      - device: foo
  noparent:
    mdev:
      - parent: gpu0
        type: nosuch
        count: 1
  share:
    qos:
      gpus:
        gpu0:
          tenants:
            t: {class: online, share: 500, pids: [1]}
  toomany:
    sriov:
      - device: nic0
        vfs: 5000
  nomig:
    mig: nosuch
  novgpu:
    vgpu:
      - device: gpu0
        type: A100-4C
        count: 1
  twice:
    vfio:
      - device: gpu0
      - device: gpu0
"""

# the line and column of the value at fault
LINES = {"absent": "5:17", "word": "9:17", "noparent": "12:17", "share": "20:39", "toomany": "24:14",
         "nomig": "26:10", "novgpu": "29:17", "twice": "35:17"}  # fmt: skip

# the document's types are checked as a whole, before any config is planned
TYPED = "version: vgpukit.host/v1\nconfigs:\n  ok: {}\n  typed:\n    sriov:\n      - device: nic0\n        vfs: x\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("hf")
    doc = base / "host.yaml"
    doc.write_text(DOC)
    (base / "typed.yaml").write_text(TYPED)
    return make_sim(base / "host", "hgx-a100"), doc


@pytest.mark.parametrize("command", ["apply", "diff"])
@pytest.mark.parametrize("config", sorted(LINES))
def test_every_error_names_file_line_and_config(setup: tuple[Path, Path], command: str, config: str) -> None:
    sim, doc = setup
    r = invoke(sim, command, "-f", str(doc), "-c", config)
    assert r.exit_code in (2, 3, 4, 5), r.stderr
    assert r.stderr.count("\n") == 1
    assert re.match(rf"vgpukit: error: {re.escape(str(doc))}:{LINES[config]}: config {config}: ", r.stderr), r.stderr


@pytest.mark.parametrize("command", ["apply", "diff"])
def test_a_type_error_names_the_config_it_is_in(setup: tuple[Path, Path], command: str) -> None:
    sim, doc = setup
    typed = doc.parent / "typed.yaml"
    r = invoke(sim, command, "-f", str(typed), "-c", "ok")
    assert r.exit_code == 2
    refused = "config typed: $.configs.typed.sriov[0].vfs: expected int, got str"
    assert r.stderr == f"vgpukit: error: {typed}:7:14: {refused}\n"
