"""A size written as text in a configuration document (a QoS ``memory: 4G``, a DRA ``limit: 2Gi``) is
refused as every other declared value is (vgpukit/declared.py): one line, ``$.PATH: expected ...``, at
the value's line and column, never quoting the number the user gave (docs/decisions.md, "Configuration
documents")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim
from vgpukit.errors import InvalidInput
from vgpukit.host import Host
from vgpukit.inputs import where_in
from vgpukit.k8s.dra.config import parameters
from vgpukit.qos.config import load_base
from vgpukit.qos.model import QosConfig, Tenant

FORM = "expected bytes with a binary unit: 4G = 4Gi = 4 GiB"
AMBIGUOUS = "expected a binary unit such as G or GiB (KB, MB, GB and TB are ambiguous: powers of 1000 or of 1024)"


@pytest.mark.parametrize(
    ("field", "text", "said"),
    [
        ("memory", "9999PiB", "expected a size <= 1 PiB"),
        ("memory", "0G", "expected a size >= 1 byte"),
        ("memory", "1.3", "expected a whole number of bytes"),
        ("memory", "4 of them", FORM),
        ("memory_burst", "4GB", AMBIGUOUS),
    ],
)
def test_a_qos_size_refused_is_a_path_and_what_was_expected(field: str, text: str, said: str) -> None:
    tenant = {"class": "offline", "share": 5, "pids": [5], "memory": "1G", field: text}
    with pytest.raises(InvalidInput) as exc:
        QosConfig.from_dict({"gpus": {"gpu0": {"tenants": {"web": tenant}}}})
    assert str(exc.value) == f"$.gpus.gpu0.tenants.web.{field}: {said}"
    assert where_in(exc.value) == ("gpus", "gpu0", "tenants", "web", field)
    with pytest.raises(InvalidInput) as exc:  # a tenant from the command line or the control socket
        Tenant.from_dict("web", tenant)
    assert str(exc.value) == f"tenant web: $.{field}: {said}"


def test_a_watermark_refused_names_its_path() -> None:
    with pytest.raises(InvalidInput) as exc:
        QosConfig.from_dict({"gpus": {"gpu0": {"memory": {"watermark": "2048P"}}}})
    assert str(exc.value) == "$.gpus.gpu0.memory.watermark: expected a size <= 1 PiB"


def test_the_qos_file_names_the_line_of_the_size(tmp_path: Path) -> None:
    path = tmp_path / "etc/vgpukit/qos.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("gpus:\n  gpu0:\n    tenants:\n      web: {share: 40, cgroup: web.slice, memory: 9999PiB}\n")
    with pytest.raises(InvalidInput) as exc:
        load_base(Host(tmp_path), path)
    assert str(exc.value) == ("/etc/vgpukit/qos.yaml:4:51: $.gpus.gpu0.tenants.web.memory: expected a size <= 1 PiB")


def test_a_host_config_size_refused_is_one_line_with_the_path(tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    doc = tmp_path / "host.yaml"
    doc.write_text(
        "version: vgpukit.host/v1\nconfigs:\n  a:\n    qos:\n      gpus:\n        gpu0:\n          tenants:\n"
        "            web: {share: 70, cgroup: /sys/fs/cgroup/web, memory: 9999PiB}\n"
    )
    r = invoke(sim, "apply", "-f", str(doc), "-c", "a", "--dry-run")
    assert r.exit_code == 2
    assert r.stderr == (
        f"vgpukit: error: {doc}:8:66: config a: $.configs.a.qos.gpus.gpu0.tenants.web.memory: "
        "expected a size <= 1 PiB\n"
    )


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        ({"kind": "MemoryCapConfig", "limit": "2Pi"}, "$.limit: expected a size <= 1 PiB"),
        ({"kind": "MemoryCapConfig", "limit": "1Gi", "burst": "1.5"}, "$.burst: expected a whole number of bytes"),
        ({"kind": "MemoryCapConfig", "limit": "0.0Ki"}, "$.limit: expected a size >= 1 byte"),
        (
            {"kind": "MpsConfig", "pinnedDeviceMemoryLimit": "2048Ti"},
            "$.pinnedDeviceMemoryLimit: expected a size <= 1 PiB",
        ),
    ],
)
def test_a_dra_quantity_refused_is_a_path_and_what_was_expected(doc: dict[str, str], said: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parameters({"apiVersion": "vgpukit.io/v1", **doc}, "config entry 1")
    assert str(exc.value) == f"config entry 1: {said}"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("qos", "tenant", "add", "gpu0", "web", "--class", "online", "--share", "10", "--memory", "9999PiB"),
         "'--memory': expected a size <= 1 PiB"),
        (("qos", "tenant", "add", "gpu0", "web", "--class", "online", "--share", "10", "--memory", "0"),
         "'--memory': expected a size >= 1 byte"),
        (("render", "domain", "--name", "vm", "--vcpus", "1", "--memory", "17T"),
         "'--memory': expected a size <= 16 TiB"),
        (("render", "domain", "--name", "vm", "--vcpus", "1", "--memory", "99999999"),
         "'--memory': expected a size <= 16 TiB"),  # plain digits are MiB there: the bound is said in bytes' units
    ],
)  # fmt: skip
def test_a_command_line_size_refused_says_what_the_files_say(tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    """One wording for a size out of bounds, wherever it is written (it was `must be at most 1125899906842624`)."""
    r = invoke(make_sim(tmp_path / "host", "hgx-a100"), *args)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"Invalid value for {said} (see: " in r.stderr and "1125899906842624" not in r.stderr
