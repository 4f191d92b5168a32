"""Every ``vgpukit.<kind>/v1`` document the CLI prints has a JSON Schema in the package, and the
documents the commands print on simulated hosts validate against it."""

from __future__ import annotations

import ast
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from tests.conftest import invoke

from . import json_scenarios

ROOT = Path(__file__).resolve().parents[2]
EMITTERS = {
    "emit",
    "emit_result",
    "json_doc",
    "run_plans",
    "report_plans",
    "_report",
    "report",
}  # each takes the kind as a string


def schema_files() -> dict[str, dict[str, Any]]:
    folder = resources.files("vgpukit.data").joinpath("schemas")
    return {f.name[:-5]: json.loads(f.read_text()) for f in folder.iterdir() if f.name.endswith(".json")}


def kinds_in_code() -> dict[str, str]:
    """kind -> where it is emitted: string literals given to the emitting functions."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "vgpukit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name not in EMITTERS:
                continue
            for arg in node.args[:2]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.setdefault(arg.value, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def validator(kind: str) -> Draft202012Validator:
    schemas = schema_files()
    registry: Registry[Any] = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas.values())
    return Draft202012Validator(schemas[kind], registry=registry)


def test_every_kind_emitted_has_a_schema_and_every_schema_a_kind() -> None:
    emitted = kinds_in_code()
    assert len(emitted) > 35  # the scan sees the commands
    files = set(schema_files()) - {"common", "host"}  # host: the input document (vgpukit apply -f)
    missing = sorted(f"{k} ({where})" for k, where in emitted.items() if k not in files)
    assert not missing, f"kinds without a schema in vgpukit/data/schemas: {missing}"
    assert sorted(files - set(emitted)) == [], "schemas of kinds no command emits"


@pytest.mark.parametrize("kind", sorted(schema_files()))
def test_schema_is_valid_draft_2020_12(kind: str) -> None:
    schema = schema_files()[kind]
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://vgpukit.dev/schemas/{kind}.json"
    if kind == "host":  # the input document: versioned by its "version" key
        assert "vgpukit.host/v1" in schema["properties"]["version"]["enum"]
    elif kind != "common":
        assert schema["properties"]["schema"] == {"const": f"vgpukit.{kind}/v1"}
        assert schema["additionalProperties"] is False


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each session's (command, document) pairs; sessions needing what is not installed are left out."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for session in (json_scenarios.host_session, json_scenarios.mdev_session, json_scenarios.qos_session):
        docs: list[tuple[str, dict[str, Any]]] = []
        session(json_scenarios.Session(invoke, docs), tmp_path_factory.mktemp(session.__name__))
        out[session.__name__] = docs
    try:
        import libvirt  # noqa: F401
    except ImportError:
        return out
    docs = []
    json_scenarios.libvirt_session(json_scenarios.Session(invoke, docs), tmp_path_factory.mktemp("libvirt"))
    out["libvirt_session"] = docs
    return out


@pytest.mark.parametrize("session", ["host_session", "mdev_session", "qos_session", "libvirt_session"])
def test_documents_match_their_schemas(documents: dict[str, Any], session: str) -> None:
    if session not in documents:
        pytest.skip("libvirt-python is not installed")
    bad = []
    for command, doc in documents[session]:
        kind = doc["schema"].removeprefix("vgpukit.").removesuffix("/v1")
        for err in validator(kind).iter_errors(doc):
            where = "/".join(str(p) for p in err.absolute_path)
            bad.append(f"vgpukit {command} --json: {where}: {err.message[:200]}")
    assert not bad, "\n".join(bad)


def test_the_sessions_print_every_kind(documents: dict[str, Any]) -> None:
    if "libvirt_session" not in documents:
        pytest.skip("libvirt-python is not installed")
    seen = {doc["schema"] for docs in documents.values() for _, doc in docs}
    assert sorted(f"vgpukit.{k}/v1" for k in kinds_in_code() if f"vgpukit.{k}/v1" not in seen) == []


def test_a_document_off_its_schema_fails() -> None:
    doc = {"schema": "vgpukit.sim-release/v1", "pid": 5}
    assert list(validator("sim-release").iter_errors(doc)) == []
    assert list(validator("sim-release").iter_errors({**doc, "extra": 1}))
    assert list(validator("sim-release").iter_errors({**doc, "pid": "5"}))
