"""A configuration document's declaration (vgpukit/declared.py) accepts exactly what its shipped schema does,
and refuses in one line naming the path of the value at fault, never quoting the document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from vgpukit.declared import convert
from vgpukit.errors import InvalidInput
from vgpukit.fleet.declaration import HostDoc
from vgpukit.inputs import where_in
from vgpukit.qos.document import QosDoc

SCHEMAS = Path(__file__).resolve().parents[2] / "vgpukit/data/schemas"
SECRET = "zz-not-to-be-quoted"
scalars = st.one_of(
    st.integers(-3, 5000),
    # a float with no fraction is an integer to JSON Schema; vgpukit refuses a float for an integer (as always)
    st.floats(-1, 4000, allow_nan=False).filter(lambda f: not f.is_integer()),
    st.booleans(),
    st.none(),
    st.sampled_from(["online", "offline", "fixed-share", "freeze", "4G", "a.slice", "gpu0", "", SECRET, "x\n"]),
)


def one_bad(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a good value, now and then any scalar."""
    return st.one_of(good, good, good, scalars)


tenant = st.fixed_dictionaries(
    {"share": one_bad(st.integers(1, 100))},
    optional={
        "class": one_bad(st.sampled_from(["online", "offline"])),
        "demand": one_bad(st.sampled_from(["auto", "notify", "sample"])),
        "pids": one_bad(st.lists(st.integers(2, 9), min_size=1, max_size=2)),
        "cgroup": one_bad(st.just("a.slice")),
        "memory": one_bad(st.sampled_from(["4G", 1024, "1Gi"])),
        "inflight": one_bad(st.integers(1, 1023)),
        "memory_burst": one_bad(st.just("1G")),
    },
)
memory = st.fixed_dictionaries(
    {},
    optional={
        "watermark": one_bad(st.sampled_from([0, "1G"])),
        "suspend": one_bad(st.sampled_from(["off", "freeze", "checkpoint"])),
        "restore_ms": one_bad(st.integers(0, 3_600_000)),
        "reclaim_ms": one_bad(st.integers(0, 3_600_000)),
    },
)
gpu = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "policy": one_bad(st.sampled_from(["best-effort", "fixed-share", "burst-share"])),
            "slice_ms": one_bad(st.integers(1, 1000)),
            "tenants": st.dictionaries(st.sampled_from(["web", "b", "web", "bad key"]), tenant, max_size=2),
            "memory": memory,
        },
    ),
)
qos_docs = st.one_of(
    scalars,
    st.fixed_dictionaries(
        {"gpus": st.dictionaries(st.sampled_from(["gpu0", "MIG-1", "gpu1", "x\n"]), gpu, max_size=2)},
        optional={"watchdog_s": one_bad(st.floats(0.1, 3600)), "sample_ms": one_bad(st.integers(1, 1000))},
    ),
    st.fixed_dictionaries({SECRET: scalars}),
)
# near-valid documents (one value or key at fault now and then), so both answers are common
sriov = st.fixed_dictionaries(
    {"device": one_bad(st.sampled_from(["nic0", "0000:05:00.0", "nic1"])), "vfs": one_bad(st.integers(0, 65535))},
    optional={"driver": one_bad(st.sampled_from(["default", "vfio-pci"])), "match": st.just("A100")},
)
mdev = st.fixed_dictionaries(
    {"parent": one_bad(st.sampled_from(["gpu0", "0000:05:00.0"])), "count": one_bad(st.integers(0, 4096))},
    optional={
        "type": one_bad(st.sampled_from(["nvidia-105", "mtty-1"])),
        "uuids": st.lists(one_bad(st.just("8fa7d3a4-0f7e-4a7c-9d2c-6b1f0e0c1a11")), max_size=2),
    },
)
rate = st.fixed_dictionaries(
    {"runs": one_bad(st.integers(0, 1000))}, optional={"hours": one_bad(st.floats(0.01, 8760))}
)
remediation = st.fixed_dictionaries(
    {},
    optional={
        "start": st.fixed_dictionaries({}, optional={"reboot": one_bad(st.sampled_from(["drain", "quarantine"]))}),
        "vms": one_bad(st.sampled_from(["migrate", "shutdown", "managedsave"])),
        "to": one_bad(st.sampled_from(["qemu+ssh://b/system", "qemu+ssh://c/system"])),
        "timeout": one_bad(st.floats(0, 86400)),
        "retries": one_bad(st.integers(0, 10)),
        "per-device": rate,
        "interval": one_bad(st.integers(1, 86400)),
    },
)
config = st.fixed_dictionaries(
    {},
    optional={
        "sriov": st.lists(sriov, max_size=2),
        "vfio": st.lists(
            st.fixed_dictionaries({"device": st.just("nvme0")}, optional={"force": one_bad(st.booleans())})
        ),
        "mdev": st.lists(mdev, max_size=1),
        "mig": one_bad(st.just("m")),
        "qos": one_bad(st.sampled_from([{"gpus": {}}, {}])),
        "remediation": remediation,
    },
)
host_docs = st.fixed_dictionaries(
    {"version": st.sampled_from(["vgpukit.host/v1", "vgpukit.host/v1", "v1", SECRET])},
    optional={
        "configs": st.dictionaries(st.sampled_from(["a", "b-1", "c", "bad name"]), config, max_size=2),
        "mig-configs": st.one_of(scalars, st.just({"m": []})),
    },
)


def shipped(schema: str) -> Draft202012Validator:
    """The shipped schema's validator, its references to the other shipped schemas resolved (by ``$id``) from
    the files, as a validator given the schemas would (host.json refers to qos/config.json for ``qos:``)."""
    from referencing import Registry, Resource

    docs = [json.loads(p.read_text()) for p in sorted(SCHEMAS.rglob("*.json"))]
    registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs if "$id" in d)
    return Draft202012Validator(json.loads((SCHEMAS / schema).read_text()), registry=registry)


def agree(doc: Any, typ: Any, schema: str) -> None:
    valid = shipped(schema).is_valid(doc)
    try:
        convert(doc, typ, "f.yaml")
        ok = True
    except InvalidInput as err:
        ok, text = False, str(err)
        assert "\n" not in text and text.startswith("f.yaml: $") and len(text) < 300, text
        assert SECRET not in text, text
    assert ok == valid, doc


@given(qos_docs)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_the_qos_declaration_accepts_exactly_what_its_schema_does(doc: Any) -> None:
    agree(doc, QosDoc, "qos/config.json")


@given(host_docs)
@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_the_host_declaration_accepts_exactly_what_its_schema_does(doc: Any) -> None:
    agree(doc, HostDoc, "host.json")


def test_the_host_schema_checks_a_qos_section_by_the_qos_configs_schema() -> None:
    """host.json refers to qos/config.json for ``qos:`` (it said only ``object``): a bad QoS section is refused
    by the shipped schema, at its path from the root, as the declaration refuses it."""
    host = shipped("host.json")
    assert host.schema["$defs"]["Config"]["properties"]["qos"]["$ref"] == "qos/config.json"
    tenant = {"class": "online", "share": 40, "cgroup": "web.slice", "memory": "4G"}
    good = {"version": "vgpukit.host/v1", "configs": {"a": {"qos": {"gpus": {"gpu0": {"tenants": {"web": tenant}}}}}}}
    assert host.is_valid(good)
    for key, bad in (("share", 101), ("class", "both"), ("colour", "blue")):
        doc = json.loads(json.dumps(good))
        doc["configs"]["a"]["qos"]["gpus"]["gpu0"]["tenants"]["web"][key] = bad
        (error,) = host.iter_errors(doc)  # under qos (its gpus are a mapping or null: the schema's anyOf)
        assert list(error.absolute_path)[:3] == ["configs", "a", "qos"], error
        with pytest.raises(InvalidInput) as exc:
            convert(doc, HostDoc)
        assert str(exc.value).startswith("$.configs.a.qos.gpus.gpu0.tenants.web"), exc.value
    assert not host.is_valid({"version": "vgpukit.host/v1", "configs": {"a": {"qos": {"sample_ms": 0}}}})


@pytest.mark.parametrize(
    ("doc", "said", "at"),
    [
        (  # a mapping's key, which msgspec leaves out of its path, found again
            {"gpus": {"gpu0": {}, "gpu1": {"tenants": {"web": {"share": 101, "pids": [5]}}}}},
            "$.gpus.gpu1.tenants.web.share: expected int <= 100",
            ("gpus", "gpu1", "tenants", "web", "share"),
        ),
        (  # an enum: the values allowed, not the one refused
            {"gpus": {"g": {"policy": SECRET}}},
            "$.gpus.g.policy: expected one of best-effort, burst-share, fixed-share",
            ("gpus", "g", "policy"),
        ),
        (  # an unknown key: the keys allowed, placed at the key itself
            {"sample_ms": 5, SECRET: 1},
            "$: unknown field (allowed: gpus, watchdog_s, sample_ms)",
            (SECRET, "<key>"),
        ),
        (  # a value not of its form: the form as the declaration describes it, not the regex
            {"gpus": {"g": {"tenants": {"t": {"share": 1, "domain": SECRET + " x"}}}}},
            "$.gpus.g.tenants.t.domain: expected a GPU key, tenant or domain name: letters, digits, _ . : -",
            ("gpus", "g", "tenants", "t", "domain"),
        ),
        ({"gpus": {1: {}}}, "$.gpus: a key is not a name (text)", ("gpus",)),
        (
            {"gpus": {"x\n": {}}},
            "$.gpus: a key is not a name of the allowed form (a GPU key, tenant or domain name: letters, digits, "
            "_ . : -)",
            ("gpus",),
        ),
        ({"watchdog_s": True}, "$.watchdog_s: expected float, got bool", ("watchdog_s",)),
        ([], "$: expected object, got array", ()),
    ],
)
def test_a_refusal_names_the_path_and_notes_it_for_the_line(doc: Any, said: str, at: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidInput) as exc:
        convert(doc, QosDoc)
    assert str(exc.value) == said and where_in(exc.value) == at


def test_the_shipped_schemas_refuse_a_size_vgpukit_refuses() -> None:
    """A size written as text has its form in the shipped schema too: ``lots``, ``4GB`` and ``-5`` were valid
    to host.json and qos/config.json though vgpukit refuses them (trial 7)."""
    host = shipped("host.json")
    tenant: dict[str, Any] = {"class": "online", "share": 40, "cgroup": "web.slice"}
    for memory, valid in (
        ("4G", True),
        ("1.5GiB", True),
        ("512m", True),
        ("lots", False),
        ("4GB", False),
        ("-5", False),
    ):
        doc = {
            "version": "vgpukit.host/v1",
            "configs": {"a": {"qos": {"gpus": {"g": {"tenants": {"web": {**tenant, "memory": memory}}}}}}},
        }
        assert host.is_valid(doc) is valid, memory
        watermark = {"gpus": {"g": {"memory": {"watermark": memory}}}}
        assert shipped("qos/config.json").is_valid(watermark) is valid, memory


SIZE_TEXT = st.text(alphabet="0123456789.kKmMgGtTpPiIbBeE-x", max_size=12)


@settings(max_examples=400, deadline=None)
@given(text=SIZE_TEXT)
def test_the_size_pattern_takes_what_parse_size_takes(text: str) -> None:
    """The schemas' size pattern and vgpukit's size grammar (inputs.parse_size) agree on every text
    without spaces around it: its form (a pattern cannot say that ``0.1`` is not a whole number of
    bytes, nor check the bounds)."""
    import re

    from vgpukit.inputs import SIZE_PATTERN, parse_size

    try:
        parse_size(text, "size", lo=None, hi=None)
        taken = True
    except InvalidInput as exc:
        taken = "not a whole number of bytes" in str(exc)
    assert (re.search(SIZE_PATTERN, text) is not None) is taken, text


def test_the_docs_way_to_check_a_host_file_with_the_shipped_schemas_runs(tmp_path: Path) -> None:
    """docs/fleet.md's snippet (the schemas given to jsonschema by their ``$id``) finds a bad size under
    ``qos:``; the docs said only that host.json refers to qos/config.json (trial 7)."""
    import subprocess
    import sys

    text = (Path(__file__).resolve().parents[2] / "docs" / "fleet.md").read_text()
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "check.py").write_text(snippet)
    tenant = "{class: online, share: 40, cgroup: web.slice, memory: lots}"
    (tmp_path / "host.yaml").write_text(
        f"version: vgpukit.host/v1\nconfigs:\n  a:\n    qos: {{gpus: {{gpu0: {{tenants: {{web: {tenant}}}}}}}}}\n"
    )
    r = subprocess.run([sys.executable, "check.py", "host.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1, r.stderr  # a script can tell (trial 8: it exited 0)
    assert r.stdout.startswith("$.configs.a.qos.gpus.gpu0.tenants.web.memory 'lots' does not match"), r.stdout
    (tmp_path / "host.yaml").write_text((tmp_path / "host.yaml").read_text().replace("lots", "4G"))
    r = subprocess.run([sys.executable, "check.py", "host.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, ""), r.stdout + r.stderr
