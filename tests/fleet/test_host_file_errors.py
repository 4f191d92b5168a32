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
            t: {class: online, share: 60, pids: [5]}
            u: {class: online, share: 60, pids: [6]}
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
LINES = {"absent": "5:17", "word": "9:17", "noparent": "12:17", "share": "21:39", "toomany": "25:14",
         "nomig": "27:10", "novgpu": "30:17", "twice": "36:17"}  # fmt: skip

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


QOS = """\
version: vgpukit.host/v1
configs:
  ok: {}
  typed:
    qos:
      gpus:
        gpu0:
          tenants:
            t: {class: online, share: 500, pids: [5]}
  ruled:
    qos:
      gpus:
        gpu0:
          tenants:
            web: {share: 5, cgroup: ../../escape}
"""


@pytest.mark.parametrize("command", ["apply", "diff"])
def test_a_qos_error_names_the_path_from_the_files_root(setup: tuple[Path, Path], command: str) -> None:
    """A ``qos:`` section is the host document's like any other: its type errors are the document's (whichever
    config is selected, as for sriov), and every refusal names the path from the file's root (it was
    ``config typed: qos: $.gpus.gpu0...``, relative to the section)."""
    sim, doc = setup
    bad = doc.parent / "qos.yaml"
    bad.write_text(QOS)
    for selected in ("ok", "typed"):
        r = invoke(sim, command, "-f", str(bad), "-c", selected)
        assert r.exit_code == 2, r.stderr
        refused = "config typed: $.configs.typed.qos.gpus.gpu0.tenants.t.share: expected int <= 100"
        assert r.stderr == f"vgpukit: error: {bad}:9:39: {refused}\n"
    bad.write_text(QOS.replace("share: 500", "share: 50"))
    r = invoke(sim, command, "-f", str(bad), "-c", "ruled")  # the QoS model's own rule, past the schema
    assert r.exit_code == 2, r.stderr
    refused = "config ruled: $.configs.ruled.qos.gpus.gpu0.tenants.web.cgroup: tenant web: invalid cgroup path"
    assert r.stderr == f"vgpukit: error: {bad}:15:37: {refused}\n"
