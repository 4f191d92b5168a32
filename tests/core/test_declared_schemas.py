"""The shipped JSON Schemas of the configuration documents are their declarations' (scripts/gen_schemas.py),
so a schema and the parser that checks the document cannot drift apart."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GEN = runpy.run_path(str(ROOT / "scripts/gen_schemas.py"))


@pytest.mark.parametrize("name", sorted(GEN["DECLARED"]))
def test_the_shipped_schema_is_the_one_its_declaration_generates(name: str) -> None:
    shipped = (ROOT / "vgpukit/data/schemas" / name).read_text()
    assert shipped == GEN["generated"]()[name], f"{name}: run python scripts/gen_schemas.py"


def test_the_check_names_a_file_that_drifted(tmp_path: Path) -> None:
    name = sorted(GEN["DECLARED"])[0]
    (tmp_path / name).parent.mkdir(parents=True)
    (tmp_path / name).write_text("{}\n")
    main = GEN["main"]
    main.__globals__["SCHEMAS"] = tmp_path
    try:
        assert main(["--check"]) == 1
        assert main([]) == 0 and main(["--check"]) == 0
    finally:
        main.__globals__["SCHEMAS"] = ROOT / "vgpukit/data/schemas"


def test_every_shipped_schema_is_named_where_it_lies_under_one_domain() -> None:
    """``$id`` is ``https://vgpukit.dev/schemas/`` and the file's path under vgpukit/data/schemas (one domain:
    the DRA sharing config's once said vgpukit.io, the API group of its ``apiVersion``, not a schema's home)."""
    import json

    base = ROOT / "vgpukit/data/schemas"
    named = {p.relative_to(base).as_posix(): json.loads(p.read_text()).get("$id") for p in sorted(base.rglob("*.json"))}
    assert named and {n: i for n, i in named.items() if i != f"https://vgpukit.dev/schemas/{n}"} == {}
