"""Every link in the docs leads somewhere: a file of the repository (README.md, CONTRIBUTING.md,
CHANGELOG.md and docs/**/*.md link to each other, to code and to manifests), and, with ``#anchor``, a
heading of that document as GitHub names it. No link leaves the repository: what a reader needs from
elsewhere is written into the docs, its source named in the text."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"(?<!\\)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    return [(n, m.group(1)) for n, line in prose(path.read_text()) for m in LINK.finditer(line)]


def broken(path: Path) -> list[str]:
    bad = []
    for n, target in links(path):
        where = f"{path.relative_to(ROOT)}:{n}: {target}"
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            bad.append(f"{where}: leaves the repository")
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.is_relative_to(ROOT) or not dest.exists():
            bad.append(f"{where}: no such file in the repository")
        elif anchor and (dest.is_dir() or dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(f"{where}: no heading #{anchor} there")
    return bad


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_somewhere_in_the_repository(path: Path) -> None:
    assert broken(path) == []


def test_the_checker_sees_a_broken_link(tmp_path: Path) -> None:
    doc = ROOT / "docs" / "x-link-check.md"
    try:
        doc.write_text(
            "# A `b`: c, d\n\n[ok](#a-b-c-d) [ok](cli.md#global-options-anywhere-on-the-line) [bad](#nope)\n"
            "[bad](nope.md) [bad](https://example.org) `[not a link](nope.md)`\n\n```\n[nor this](nope.md)\n```\n"
        )
        assert [b.split(": ", 1)[1] for b in broken(doc)] == [
            "#nope: no heading #nope there",
            "nope.md: no such file in the repository",
            "https://example.org: leaves the repository",
        ]
    finally:
        doc.unlink()


def test_github_anchors() -> None:
    assert slug("`vgpukit render domain --name NAME`") == "vgpukit-render-domain---name-name"
    assert slug("What a change prints: a summary, every step with `-v`") == (
        "what-a-change-prints-a-summary-every-step-with--v"
    )
    assert slug("Config agent (`vgpukit k8s node-agent`)") == "config-agent-vgpukit-k8s-node-agent"


# The user guides say what to do; measurements live in docs/benchmarks.md, how things work inside in
# docs/design/ (and the contributor pages below). A measurement table in a guide is one whose header
# names a statistic or a measured quantity.
NOT_GUIDES = {"benchmarks.md", "engine.md", "decisions.md", "real-kernel-tests.md", "sysfs-abi.md", "safety.md"}
GUIDES = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in NOT_GUIDES]
MEASURED = re.compile(r"\b(p50|p90|p99|median|wall|syscalls|goal|measured|before|CPU (?:ms|s|seconds))\b", re.I)


def measurement_tables(path: Path) -> list[str]:
    lines = [line for _, line in prose(path.read_text())]
    return [
        f"{path.name}: {line.strip()}"
        for line, nxt in itertools.pairwise(lines)
        if line.lstrip().startswith("|") and re.match(r"^\s*\|[\s:|-]+\|\s*$", nxt) and MEASURED.search(line)
    ]


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_user_guides_hold_no_measurement_tables(path: Path) -> None:
    assert measurement_tables(path) == [], "move them to docs/benchmarks.md and link it"


def test_the_measurement_check_sees_a_table(tmp_path: Path) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text(
        "| case | median ms | p90 ms |\n| --- | --- | --- |\n| a | 1 | 2 |\n\n| option | what |\n| --- | --- |\n"
    )
    assert measurement_tables(doc) == ["guide.md: | case | median ms | p90 ms |"]
