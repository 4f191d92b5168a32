"""One way to say where in a document a problem is, for every YAML document vgpukit reads (the host
config, the QoS config, an XID table, mig-parted's): ``FILE:LINE:COLUMN: what`` (docs/decisions.md,
"Errors name the value at fault"), never ``line N, column C`` or ``(line N)``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from vgpukit.errors import InvalidInput
from vgpukit.host import Host
from vgpukit.inputs import load_yaml
from vgpukit.qos.config import load_base


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a: [1, 2\n", "doc.yaml:2:1: not valid YAML"),
        ("a:\n  b: " + "[" * 40 + "]" * 40 + "\n", "doc.yaml:2:39: nested more than 32 levels deep"),
    ],
)
def test_the_yaml_reader_says_file_line_column(text: str, said: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        load_yaml(text, "doc.yaml")
    assert str(exc.value) == said


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("gpus:\n  gpu0:\n    tenants:\n      web: {share: 140, pids: [5]}\n", ":4:20: $.gpus.gpu0.tenants.web.share"),
        ("gpus: [broken\n", ":1:14: not valid YAML"),
    ],
)
def test_the_qos_config_says_it_as_the_host_config_does(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "etc/vgpukit/qos.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(InvalidInput) as exc:
        load_base(Host(tmp_path), path)
    assert str(exc.value).startswith("/etc/vgpukit/qos.yaml" + said)


def test_the_host_config_and_a_syntax_error_in_it(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "h", "hgx-a100")
    doc = tmp_path / "host.yaml"
    doc.write_text("version: vgpukit.host/v1\nconfigs:\n  a:\n    sriov: [{match: nic0, vfs: x}]\n")
    r = invoke(sim, "apply", "-f", str(doc), "-c", "a", "--dry-run")
    assert r.exit_code == 2 and r.stderr.startswith(f"vgpukit: error: {doc}:4:32: config a: $.configs.a.sriov[0].vfs")
    doc.write_text("version: vgpukit.host/v1\nconfigs: {a: [\n")
    r = invoke(sim, "apply", "-f", str(doc), "-c", "a", "--dry-run")
    assert r.exit_code == 2 and r.stderr == f"vgpukit: error: {doc}:3:1: not valid YAML\n"
