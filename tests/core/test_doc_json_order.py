"""The docs list the fields of ``devices``, ``topo``, ``vgpu list`` and ``mdev list`` ``--json`` in the order
the commands print them (the docs follow the code: the JSON bytes are pinned by their own tests)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim

ROOT = Path(__file__).resolve().parents[2]
OPEN, CLOSE = "[{(", "]})"
FIELD = re.compile(r"[a-z_]+")


def documented(doc: str, start: str, stop: str = "\n\n") -> list[str]:
    """The backquoted field names at the top level of the text after ``start`` in ``doc`` (docs/DOC), up to
    ``stop`` or the bracket that closes what ``start`` opened; nested lists, objects and parentheses
    (a sub-document's fields, a value's note) are left out."""
    text = (ROOT / "docs" / doc).read_text()
    at = text.index(start) + len(start)
    end = text.find(stop, at)
    depth, names, i = 0, [], at
    while i < (end if end >= 0 else len(text)):
        ch = text[i]
        if ch in OPEN:
            depth += 1
        elif ch in CLOSE:
            depth -= 1
            if depth < 0:
                break
        elif ch == "`":
            close = text.index("`", i + 1)
            if depth == 0 and FIELD.fullmatch(text[i + 1 : close]):  # a field, not an option (`--defined`)
                names.append(text[i + 1 : close])
            i = close
        i += 1
    return names


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("order")
    t4 = make_sim(base / "t4", "t4-mdev")
    h100 = make_sim(base / "h100", "h100-vgpu")
    for sim, args in (
        (t4, ("vgpu", "create", "gpu0", "--type", "GRID T4-4Q")),
        (t4, ("mdev", "define", "-p", "gpu0", "-t", "nvidia-232")),
        (h100, ("vgpu", "create", "gpu0", "--type", "H100-20C")),
    ):
        assert invoke(sim, *args).exit_code == 0
    return {"t4": t4, "h100": h100}


def _json(sim: Path, *args: str) -> dict:  # type: ignore[type-arg]
    r = invoke(sim, *args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_a_device_as_documented(hosts: dict[str, Path]) -> None:
    fields = documented("cli.md", "DEVICE, in the order printed:", ". The document also")
    doc = _json(hosts["h100"], "devices", "--all")
    assert list(doc) == ["schema", "devices", "unreadable"]
    for dev in doc["devices"]:
        assert list(dev) == [f for f in fields if f not in ("role", "children")], dev["bdf"]
    topo = _json(hosts["h100"], "topo")
    node = topo["roots"][0]["children"][0]
    assert list(node) == fields


@pytest.mark.parametrize("host", ["t4", "h100"])
def test_a_vgpu_as_documented(hosts: dict[str, Path], host: str) -> None:
    fields = documented("vgpu.md", "| `vgpukit.vgpu-list/v1` | `vgpus`: [{", " |\n")
    doc = _json(hosts[host], "vgpu", "list")
    assert doc["vgpus"] and all(list(v) == fields for v in doc["vgpus"])


def test_an_mdev_as_documented(hosts: dict[str, Path]) -> None:
    row = "| `vgpukit.mdev-list/v1` | "
    doc = _json(hosts["t4"], "mdev", "list", "--defined")
    top = documented("mdev.md", row, " |\n")
    assert ["schema", *top] == list(doc)
    assert doc["instances"] and all(
        list(i) == documented("mdev.md", row + "`instances`: [{", " |\n") for i in doc["instances"]
    )
    assert doc["definitions"] and all(
        list(d) == documented("mdev.md", "with `--defined` also `definitions`: [{", " |\n") for d in doc["definitions"]
    )
