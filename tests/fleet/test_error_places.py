"""Every error about a host config names the line (and column) of the value at fault (hypothesis).

A valid ``vgpukit.host/v1`` document for hgx-a100 (SR-IOV, vfio, MIG, QoS) is laid out at random (key
order, block or flow style, indentation, blank and comment lines), one bad value is planted at a
random place of it (checked by the schema, by an area's planner, by the QoS model or rules, by the
MIG reader or planner), and ``diff`` must refuse it in one line naming ``FILE:LINE[:COLUMN]`` of that
value, as PyYAML's composer places it.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import invoke, make_sim

BASE: dict[str, Any] = {
    "version": "vgpukit.host/v1",
    "configs": {
        "c": {
            "sriov": [{"device": "nic0", "vfs": 4, "driver": "vfio-pci"}, {"device": "nic1", "vfs": 2}],
            "vfio": [{"device": "nvme0"}],
            "mig": "m",
            "qos": {
                "gpus": {
                    "gpu0": {
                        "policy": "fixed-share",
                        "slice_ms": 10,
                        "tenants": {
                            "a": {"class": "online", "share": 40, "cgroup": "a.slice"},
                            "b": {"class": "online", "share": 30, "cgroup": "b.slice", "memory": "1G"},
                        },
                    }
                }
            },
        }
    },
    "mig-configs": {"m": [{"devices": [1], "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "1g.5gb": 2}}]},
}
C = ("configs", "c")
QOS = (*C, "qos", "gpus", "gpu0")
MIG = ("mig-configs", "m", 0)
LATER = ("the share of the tenant written last",)

# (path of the value, a bad value there, the path of the value the error is about when it is not the planted one)
PLANTS: list[tuple[tuple[Any, ...], Any, tuple[Any, ...] | None]] = [
    ((*C, "sriov", 0, "vfs"), 5000, None),  # the SR-IOV planner: more than the PF has
    ((*C, "sriov", 1, "vfs"), "x", None),  # the schema: not an integer
    ((*C, "sriov", 1, "vfs"), -1, None),
    ((*C, "sriov", 0, "device"), "nic9", None),  # the resolver: no such device
    ((*C, "sriov", 1, "device"), "foo", None),
    ((*C, "sriov", 0, "driver"), "bogus", None),  # the schema: not one of the drivers
    ((*C, "vfio", 0, "device"), "nic9", None),
    ((*C, "mig"), "nosuch", None),
    ((*QOS, "policy"), "fixed", None),  # the QoS model
    ((*QOS, "slice_ms"), 0, None),
    ((*QOS, "slice_ms"), 5000, None),
    ((*QOS, "tenants", "a", "share"), 160, None),
    ((*QOS, "tenants", "b", "share"), 0, None),
    ((*QOS, "tenants", "b", "share"), 61, LATER),  # the QoS rules: online shares over 100%: the later one
    ((*QOS, "tenants", "a", "share"), 71, LATER),
    ((*QOS, "tenants", "a", "class"), "both", None),
    ((*QOS, "tenants", "b", "memory"), "4GB", None),
    ((*QOS, "tenants", "b", "cgroup"), "../escape", None),
    ((*QOS, "tenants", "a", "bogus"), 1, None),  # an unknown key: its name
    ((*MIG, "mig-devices"), {"3g.20gb": 9}, None),  # the MIG planner: never fits
    ((*MIG, "mig-devices"), {"1g.5gb": 1, "5g.99gb": 1}, (*MIG, "mig-devices", "5g.99gb")),  # no such profile
    ((*MIG, "mig-enabled"), "yes", None),  # the MIG reader
]


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _place(text: str, path: tuple[Any, ...], key: bool) -> tuple[int, int]:
    """(line, column), 1-based, of the value at ``path`` (of its key with ``key``) as PyYAML composes it."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    for i, part in enumerate(path):
        if isinstance(node, yaml.MappingNode):
            k, v = next((k, v) for k, v in node.value if yaml.safe_load(yaml.serialize(k)) == part)
            node = k if key and i == len(path) - 1 else v
        else:
            node = node.value[part]
    return node.start_mark.line + 1, node.start_mark.column + 1


@st.composite
def layouts(draw: st.DrawFn, doc: dict[str, Any]) -> str:
    """``doc`` as YAML text laid out at random: key order, style, indentation, blank and comment lines."""

    def shuffle(node: Any) -> Any:
        if isinstance(node, dict):
            keys = draw(st.permutations(list(node)))
            return {k: shuffle(node[k]) for k in keys}
        if isinstance(node, list):
            return [shuffle(x) for x in node]
        return node

    flow = draw(st.sampled_from([False, None]))  # block, or flow for the innermost collections
    text = yaml.safe_dump(shuffle(doc), sort_keys=False, default_flow_style=flow, indent=draw(st.integers(2, 4)))
    lines = text.splitlines()
    out = []
    for line in lines:
        for _ in range(draw(st.integers(0, 2))):
            out.append(draw(st.sampled_from(["", "# a comment", "   # indented comment"])))
        out.append(line)
    return "\n".join(out) + "\n"


LOCATION = re.compile(r"^vgpukit: error: (?P<file>[^:]+):(?P<line>[0-9]+)(?::(?P<col>[0-9]+))?: ")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sim(tmp_path_factory.mktemp("places") / "host", "hgx-a100")


def test_the_valid_document_plans(host: Path, tmp_path: Path) -> None:
    doc = tmp_path / "host.yaml"
    doc.write_text(yaml.safe_dump(BASE, sort_keys=False))
    r = invoke(host, "diff", "-f", str(doc), "-c", "c")
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("plant", PLANTS, ids=[f"{'/'.join(map(str, p[0][-2:]))}={p[1]}" for p in PLANTS])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_error_names_the_place_of_the_bad_value(
    host: Path, tmp_path: Path, plant: tuple[tuple[Any, ...], Any, tuple[Any, ...] | None], data: st.DataObject
) -> None:
    path, bad, about = plant
    doc = copy.deepcopy(BASE)
    _set(doc, path, bad)
    text = data.draw(layouts(doc))
    f = tmp_path / "host.yaml"
    f.write_text(text)
    r = invoke(host, "diff", "-f", str(f), "-c", "c")
    assert r.exit_code in (2, 3, 4, 5) and r.stderr.count("\n") == 1, (r.exit_code, r.stderr, text)
    m = LOCATION.match(r.stderr)
    assert m is not None and m.group("file") == str(f), r.stderr
    unknown_key = path[-1] == "bogus"
    if about == LATER:  # the share that takes the class over 100% is the one written last
        line, col = max(_place(text, (*QOS, "tenants", t, "share"), key=False) for t in ("a", "b"))
    else:
        line, col = _place(text, about or path, key=unknown_key)
    got = (int(m.group("line")), int(m.group("col")) if m.group("col") else col)
    assert got == (line, col), (r.stderr, path, bad, "\n" + text)
