"""A key written twice in one mapping (PyYAML keeps the last one silently) is refused in every
configuration document vgpukit reads, as the host config refused it: one line, ``FILE:LINE:COLUMN:``
at the second key, the mapping's ``$.path``, exit 2 (trial 6: the QoS config and the remediation policy
took the last value). A remediation policy file's other refusals say where too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from vgpukit.errors import InvalidInput
from vgpukit.host import Host
from vgpukit.qos.config import load_base


def test_the_qos_config_refuses_a_key_written_twice(tmp_path: Path) -> None:
    path = tmp_path / "etc/vgpukit/qos.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("gpus:\n  gpu0:\n    policy: fixed-share\n    policy: burst-share\n")
    with pytest.raises(InvalidInput) as exc:
        load_base(Host(tmp_path), path)
    assert str(exc.value) == "/etc/vgpukit/qos.yaml:4:5: $.gpus.gpu0: a key written twice"


def test_a_tenant_key_written_twice_is_refused_at_its_place(tmp_path: Path) -> None:
    path = tmp_path / "etc/vgpukit/qos.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("gpus:\n  gpu0:\n    tenants:\n      web: {share: 40, cgroup: web.slice, share: 90}\n")
    with pytest.raises(InvalidInput) as exc:
        load_base(Host(tmp_path), path)
    assert str(exc.value) == "/etc/vgpukit/qos.yaml:4:43: $.gpus.gpu0.tenants.web: a key written twice"


@pytest.mark.parametrize("text", ["?\n", "? \n: 1\n", "{? , ?}\n", "a: {? : 1}\n"])
def test_an_empty_key_is_a_key_not_a_traceback(tmp_path: Path, text: str) -> None:
    """An empty (null) mapping key (``?``) was read again by serializing it alone, which PyYAML cannot parse:
    the finder raised instead of answering (found by the XID table's any-text test)."""
    path = tmp_path / "etc/vgpukit/qos.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(InvalidInput) as exc:
        load_base(Host(tmp_path), path)
    assert str(exc.value).startswith("/etc/vgpukit/qos.yaml:") and "\n" not in str(exc.value)


@pytest.fixture
def sim(tmp_path: Path) -> Path:
    return make_sim(tmp_path / "h", "hgx-a100")


def _remediate(sim: Path, policy: Path) -> tuple[int, str]:
    r = invoke(sim, "remediate", "--auto", "--for", "0", "--policy", str(policy), "--dry-run")
    return r.exit_code, r.stderr


def test_the_remediation_policy_refuses_a_key_written_twice(sim: Path, tmp_path: Path) -> None:
    policy = tmp_path / "r.yaml"
    policy.write_text("retries: 3\nretries: 5\n")
    assert _remediate(sim, policy) == (2, f"vgpukit: error: {policy}:2:1: $: a key written twice\n")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("retries: '3'\n", "1:10: remediation: $.retries: expected int, got str"),
        ("start:\n  reset: quarantine\ncolour: blue\n", "3:1: remediation: $: unknown field"),
    ],
)
def test_a_remediation_policy_refusal_names_its_file_and_place(sim: Path, tmp_path: Path, text: str, said: str) -> None:
    policy = tmp_path / "r.yaml"
    policy.write_text(text)
    code, err = _remediate(sim, policy)
    assert code == 2
    assert err.startswith(f"vgpukit: error: {policy}:{said}"), err
    assert len(err.splitlines()) == 1 and "blue" not in err


def test_the_host_config_still_refuses_it_and_keeps_mig_parted_leniency(sim: Path, tmp_path: Path) -> None:
    doc = tmp_path / "host.yaml"
    doc.write_text("version: vgpukit.host/v1\nconfigs:\n  a:\n    sriov: []\n    sriov: []\n")
    r = invoke(sim, "diff", "-f", str(doc), "-c", "a")
    assert (r.exit_code, r.stderr) == (2, f"vgpukit: error: {doc}:5:5: config a: $.configs.a: a key written twice\n")


def test_a_date_is_read_as_the_text_it_is() -> None:
    """YAML reads ``2026-02-30`` as a timestamp and fails to build it: every file of vgpukit's lost the
    place of its error to "a value cannot be read" (trial 7), and ``cgroup: 2026-02-28`` was refused as a
    date where ``2026-02-30`` passed (trial 8). A date is the text it is written as."""
    from vgpukit.inputs import load_yaml

    doc = "cgroup: 2026-02-30\nwhen: 2026-02-28\nat: 2026-11-28 10:00:00\n"
    assert load_yaml(doc, "f.yaml") == {"cgroup": "2026-02-30", "when": "2026-02-28", "at": "2026-11-28 10:00:00"}


def test_a_date_key_is_its_text_to_the_key_finder_too() -> None:
    """The loader reads a date as its text, keys included; the key finder (and the places of values) read
    such a key as a date, so a date key written twice was taken."""
    from vgpukit.inputs import load_yaml_located

    with pytest.raises(InvalidInput) as exc:
        load_yaml_located("2026-11-28: 1\n2026-11-28: 2\n", "f.yaml", unique=True)
    assert str(exc.value) == "f.yaml:2:1: $: a key written twice"
    doc, places = load_yaml_located("d:\n  2026-11-28: x\n", "f.yaml")
    assert doc == {"d": {"2026-11-28": "x"}} and places.locate(("d", "2026-11-28")) == (2, 15)
