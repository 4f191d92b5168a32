"""Every reader of the host door is contained: what it answers never depends on what lies outside the root.

The property (non-interference): plant a link (absolute, relative with ``..``, or a link to a link)
at any component of a path under the root, or put ``..`` in the path itself, so that following it
would leave the root. Ask every reader of :class:`vgpukit.host.Host` about that path twice, once
with the outside holding one thing (a secret file, a directory, a device node) and once another.
The two answers must be the same: a refusal (``OutsideRoot``) both times, or the same value. A reader
that follows a link out answers differently (the secret's bytes, "is a file", "is a directory").

``test_every_public_method_is_classified`` keeps the list complete: a new method of the door must be
named here as a reader (and is then under the property), a change, a location or neither.
"""

from __future__ import annotations

import inspect
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vgpukit.errors import VgpukitError
from vgpukit.host import Host
from vgpukit.host.contain import Containment
from vgpukit.host.file_places import FilePlaces
from vgpukit.host.kernel_paths import KernelPaths

# How each reader is asked (the path is its only variable argument).
READERS: dict[str, Callable[[Host, Path], Any]] = {
    "read": lambda h, p: h.read(p),
    "read_opt": lambda h, p: h.read_opt(p),
    "read_raw_opt": lambda h, p: h.read_raw_opt(p),
    "read_bytes_opt": lambda h, p: h.read_bytes_opt(p, 4096),
    "map_opt": lambda h, p: h.map_opt(p),
    "read_int": lambda h, p: h.read_int(p),
    "read_doc": lambda h, p: h.read_doc(p, "document", missing_ok=True),
    "listdir": lambda h, p: h.listdir(p),
    "files": lambda h, p: h.files(p),
    "readlink": lambda h, p: h.readlink(p),
    "link_name": lambda h, p: h.link_name(p),
    "char_device": lambda h, p: h.char_device(p),
    "is_block_device": lambda h, p: h.is_block_device(p),
    "exists": lambda h, p: h.exists(p),
    "is_dir": lambda h, p: h.is_dir(p),
    "is_file": lambda h, p: h.is_file(p),
    "resolve": lambda h, p: h.resolve(p),
    "real_directory": lambda h, p: h.real_directory(p),
    "device_path": lambda h, p: h.device_path(p),
    "socket_address": lambda h, p: h.socket_address(p),
    "check_inside": lambda h, p: h.check_inside(p),
    "contains": lambda h, p: h.contains(p),
    "sync_dir": lambda h, p: h.sync_dir(p),
}
CHANGES = {"write", "write_file", "remove", "mkdir"}  # refused outside: tests/fuzz/test_containment.py
LOCATIONS = {"path", "sys", "dev", "proc", "etc", "run", "config_dir", "state_dir", "display"}
# run_program: check_inside first (a reader above); place: a hint; through: the engine's own journal and
# lock writes, by callers that open O_NOFOLLOW in a directory resolved inside the root (engine/journal.py,
# engine/lock.py), and the gate every change above passes through
OTHERS = {"run_program", "place", "through"}


def test_every_public_method_is_classified() -> None:
    layout = {n for n in dir(KernelPaths) + dir(FilePlaces) if not n.startswith("_")} - set(dir(Containment))
    public = {n for n, v in inspect.getmembers(Host) if not n.startswith("_") and callable(v)} - layout
    named = set(READERS) | CHANGES | LOCATIONS | OTHERS
    assert public <= named, f"classify these host-door methods in this test: {sorted(public - named)}"
    assert not named - public - layout, f"no longer on the door: {sorted(named - public)}"


NAMES = ["a", "b", "f", "g"]  # the tree inside, and the same names outside
SECRET = b"root:$6$s3cr3t:19000:0:99999:7:::\n"


def _fill_inside(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "f").write_text("inside f\n")
    (root / "a" / "b" / "g").write_text("7\n")
    (root / "f").write_text("inside top\n")
    (root / "a" / "lnk").symlink_to("b")  # a link inside the root: followed as usual


def _fill_outside(out: Path, variant: int) -> None:
    """Two different worlds outside the root: whatever a contained reader answers, it is the same in both."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    if variant == 0:
        for d in ("", "a", "b", "a/b"):
            (out / d).mkdir(exist_ok=True)
            for n in ("f", "g"):
                (out / d / n).write_bytes(SECRET)
        os.symlink("f", out / "lnk")
    else:
        (out / "a").write_bytes(b"42\n")  # a file where the other world has a directory
        (out / "b").mkdir()
        (out / "b" / "g").mkdir()  # a directory where the other has a file
        os.mkfifo(out / "f")  # a FIFO: never opened for reading, never blocks
        os.symlink("/dev/null", out / "g")  # a device node


def _answer(reader: str, host: Host, path: Path) -> object:
    try:
        value = READERS[reader](host, path)
    except VgpukitError as exc:
        return ("refused", type(exc).__name__)
    if isinstance(value, mmap.mmap):
        data = value[:]
        value.close()
        return ("mapped", data)
    if reader == "files":
        with value as d:
            return ("files", sorted(d.names), [d.read(n) for n in sorted(d.names)])
    if isinstance(value, Path):
        return ("path", str(value))
    return ("value", value)


@pytest.fixture(scope="module")
def world() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="vgpukit-door-") as tmp:
        yield Path(tmp)


def _link_target(kind: str, root: Path, out: Path, depth: int, sub: str) -> str:
    if kind == "absolute":
        return str(out / sub) if sub else str(out)
    if kind == "relative":  # climbs out of the root with ..
        return "../" * (depth + 1) + out.name + (f"/{sub}" if sub else "")
    return str(root / "hop")  # a link to a link that leads out


@pytest.mark.parametrize("reader", sorted(READERS))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3),
    plant_at=st.integers(min_value=0, max_value=2),
    kind=st.sampled_from(["absolute", "relative", "via-link", "dotdot-in-path"]),
    sub=st.sampled_from(["", "a", "b"]),
)
def test_no_reader_answers_from_outside_the_root(
    world: Path, reader: str, parts: list[str], plant_at: int, kind: str, sub: str
) -> None:
    root, out = world / "root", world / "outside"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    _fill_inside(root)
    plant_at = min(plant_at, len(parts) - 1)
    if kind == "dotdot-in-path":  # no link at all: the path itself climbs out
        path = Path(str(root / "a") + "/../../" + out.name + "/" + "/".join(parts))
    else:
        link = root.joinpath(*parts[: plant_at + 1])
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        elif os.path.lexists(link):
            link.unlink()
        for i in range(1, plant_at + 1):  # the components before the link are directories of the root
            d = root.joinpath(*parts[:i])
            if os.path.lexists(d) and not d.is_dir():
                d.unlink()
            d.mkdir(exist_ok=True)
        target = _link_target(kind, root, out, plant_at, sub)
        if kind == "via-link":
            os.symlink(str(out / sub) if sub else str(out), root / "hop")
        os.symlink(target, link)
        path = root.joinpath(*parts)
    answers = []
    for variant in (0, 1):
        _fill_outside(out, variant)
        answers.append(_answer(reader, Host(root), path))  # a fresh door per command, as in the product
    assert answers[0] == answers[1], f"{reader}({path}) depends on what is outside the root: {answers}"
    assert SECRET.decode() not in repr(answers[0])
