"""Every example in README.md and docs/**/*.md runs as written on a simulated host (CONTRIBUTING.md,
"Examples in the docs").

A fenced block is an example when the line before it is a marker::

    <!-- example: profile=hgx-a100 -->            a fresh hgx-a100 host for the commands without --sim
    <!-- example: /tmp/demo=hgx-a100 -->          the path /tmp/demo (in --sim, VGPUKIT_SIM) is one
    <!-- example: skip=synopsis -->               not runnable (a synopsis, a real host only): says why
    <!-- example: profile=hgx-a100 needs=libvirt --> runs where the module is installed (else skipped)
    <!-- example-file: host.yaml -->             (before any block) its content is the file host.yaml
                                                  in the directory of every example of that document

Commands are the lines starting with ``vgpukit`` (``sh`` blocks) or ``$ vgpukit`` / ``# vgpukit``
(``console`` blocks, the other lines being output); ``export VGPUKIT_SIM=DIR`` sets the host of the
commands after it, ``A && B`` runs both, ``> FILE`` writes the output to FILE (in the example's own
directory, where relative paths point), and a comment with ``exit N`` is the exit code expected
(else 0). A command followed by a ``vgpukit: error: ...`` line must fail and print that line (``...``
stands for any text: a path of the simulated host, an elided part). ``vgpukit sim init DIR --profile
P`` gives DIR a fresh copy of a P host built once per run.
Every block of README.md and docs/**/*.md with a ``vgpukit`` command line must carry a marker.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import invoke, make_sim

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!-- example: (.*) -->$")
FILE_MARKER = re.compile(r"^<!-- example-file: ([\w.-]+) -->$")
COMMAND = re.compile(r"^(?:\$ |# )?(vgpukit .*|export VGPUKIT_SIM=\S+)$")


@dataclass
class Example:
    where: str  # FILE:LINE of the fence
    attrs: dict[str, str]
    lines: list[tuple[str, str]] = field(default_factory=list)  # command line (prompt stripped), the error shown
    files: dict[str, str] = field(default_factory=dict)  # the document's example files: name -> content


def examples() -> tuple[list[Example], list[str]]:
    """The marked blocks, and the FILE:LINE of blocks with commands but no marker."""
    found: list[Example] = []
    unmarked: list[str] = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        files: dict[str, str] = {}  # shared by the document's examples (filled as it is read)
        i = 0
        while i < len(lines):
            if not lines[i].startswith("```"):
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            block = lines[i + 1 : end]
            body = [
                (m.group(1), block[k + 1] if k + 1 < len(block) and block[k + 1].startswith("vgpukit: error:") else "")
                for k, line in enumerate(block)
                if (m := COMMAND.match(line))
            ]
            marker = MARKER.match(lines[i - 1]) if i else None
            named = FILE_MARKER.match(lines[i - 1]) if i else None
            where = f"{doc.relative_to(ROOT)}:{i + 1}"
            if named:
                files[named.group(1)] = "\n".join(lines[i + 1 : end]) + "\n"
            elif marker:
                attrs = dict(a.split("=", 1) for a in marker.group(1).split())
                if "skip" not in attrs:
                    found.append(Example(where, attrs, body, files))
            elif any(b.startswith("vgpukit ") for b, _ in body):
                unmarked.append(where)
            i = end + 1
    return found, unmarked


ALL, UNMARKED = examples()


def test_every_example_is_marked() -> None:
    assert UNMARKED == [], "mark these blocks (CONTRIBUTING.md, Examples in the docs)"


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One host per profile, built once; each example gets copies."""
    base = tmp_path_factory.mktemp("profiles")
    wanted = {v for ex in ALL for k, v in ex.attrs.items() if k == "profile" or k.startswith("/")}
    wanted |= {"hgx-a100"}  # a block's default host when its marker names none
    wanted |= {m.group(1) for ex in ALL for line, _ in ex.lines for m in [re.search(r"--profile (\S+)", line)] if m}
    return {p: make_sim(base / p, p) for p in sorted(wanted)}


class Session:
    def __init__(self, ex: Example, templates: dict[str, Path], work: Path) -> None:
        self.work = work
        self.templates = templates
        self.hosts: dict[str, Path] = {}
        self.current: Path | None = None
        self.made = 0
        for key, profile in ex.attrs.items():
            if key == "profile":
                self.current = self.fresh(profile)
            elif key.startswith("/"):
                self.hosts[key] = self.fresh(profile)

    def fresh(self, profile: str) -> Path:
        self.made += 1
        dest = self.work / "hosts" / str(self.made)
        shutil.copytree(self.templates[profile], dest, symlinks=True)
        return dest

    def host(self, path: str) -> Path:
        if path not in self.hosts:
            raise AssertionError(f"the example names host {path}: declare it in the marker or sim init it")
        return self.hosts[path]

    def run(self, line: str, shown: str) -> None:
        if line.startswith("export VGPUKIT_SIM="):
            self.current = self.host(line.split("=", 1)[1])
            return
        command, _, comment = line.partition(" #")
        words = shlex.split(command)
        want = int(m.group(1)) if (m := re.search(r"\bexit (\d)\b", comment)) else None
        parts = [p for chunk in _split(words, "&&") for p in _split(chunk, ";")]
        for k, part in enumerate(parts):
            last = k == len(parts) - 1
            code = want if want is not None and last else -1 if shown and last else 0
            self.one(part, code, line, shown if last else "")

    def one(self, words: list[str], want: int, line: str, shown: str = "") -> None:
        """Run one command; ``want``: its exit code, -1 for any failure (the block shows an error);
        ``shown``: the error line the block shows, which the command must print (``...``: any text)."""
        assert words[0] == "vgpukit", line
        args = words[1:]
        out = None
        if ">" in args:
            k = args.index(">")
            args, out = args[:k], args[k + 1]
            assert not out.startswith("/"), f"{line}: writes outside the example's directory"
        if args[:2] == ["sim", "init"]:  # a fresh copy of the profile's host, built once per run
            profile = args[args.index("--profile") + 1] if "--profile" in args else "hgx-a100"
            assert args[2] not in self.hosts or "--force" in args, f"{line}: {args[2]} exists (--force)"
            self.hosts[args[2]] = self.fresh(profile)
            return
        sim = self.current
        if "--sim" in args:
            k = args.index("--sim")
            sim = self.host(args[k + 1])
            args = args[:k] + args[k + 2 :]
        res = invoke(sim, *args)
        ok = res.exit_code != 0 if want == -1 else res.exit_code == want
        assert ok, f"{line}\nexit {res.exit_code}, documented {'an error' if want == -1 else want}\n{res.stderr}"
        if shown:
            said = res.stderr.strip().splitlines()[-1:] or [""]
            pattern = ".*".join(re.escape(part) for part in shown.split("..."))
            assert re.fullmatch(pattern, said[0]), f"{line}\nthe docs show:\n{shown}\nit prints:\n{said[0]}"
        if out is not None:
            (self.work / out).write_text(res.stdout)


def _split(words: list[str], sep: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for w in words:
        if w == sep:
            parts.append([])
        else:
            parts[-1].append(w)
    return parts


@pytest.mark.parametrize("ex", ALL, ids=[ex.where for ex in ALL])
def test_example_runs_as_written(
    ex: Example, templates: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the example's directory is the process's cwd while it runs, so a background job's subprocess started
    # then (tests/ship: git clone) works in it: it stays until the session ends, not removed as this passes
    tmp_path = tmp_path_factory.mktemp("example")
    monkeypatch.delenv("VGPUKIT_SIM", raising=False)
    monkeypatch.delenv("VGPUKIT_ROOT", raising=False)
    if "needs" in ex.attrs:
        pytest.importorskip(ex.attrs["needs"])
    monkeypatch.chdir(tmp_path)
    for name, text in ex.files.items():
        (tmp_path / name).write_text(text)
    session = Session(ex, templates, tmp_path)
    for line, shown in ex.lines:
        session.run(line, shown)
