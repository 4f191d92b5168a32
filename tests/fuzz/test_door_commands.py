"""The commands read nothing outside the root, whichever path they read is planted as a link out.

First every read-only command below runs once on a simulated host that carries a bit of everything
(VFs on vfio-pci, mdevs, a vGPU, MIG slices, CDI specs, QoS tenants' usage files, an ld.so.cache),
while an audit hook (``sys.addaudithook``: the interpreter's own ``open`` and ``os.listdir`` events,
raised for every ``open()``, ``os.open`` and listing) records every path it opens or lists under the
root: that is every path every reader of the host door takes for these commands. Then, for paths
drawn from that record, the path (or one of its last directories) is replaced by a link to an
identical copy outside the root, the command runs again, and no file or directory outside the root
may be opened for reading or listed (an ``O_PATH`` open, which only locates a file, is how the door
checks where a link leads, and is allowed). The command either answers as before or refuses with exit 2.

Paths opened relative to a directory descriptor (the door's per-directory reads) are not seen by the
hook by their full name; the directory itself was resolved inside the root before, and its files are
opened with ``O_NOFOLLOW``. The simulated NVML's own state (``.vgpukit-sim``) is the simulated
driver's, not read through the door: it is not planted (tests/fuzz/test_containment.py covers it).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vgpukit.cli.main import main

from .harness import PROFILE

COMMANDS: list[list[str]] = [
    ["topo"],
    ["topo", "--matrix"],
    ["devices", "--all"],
    ["sriov", "list"],
    ["mdev", "types"],
    ["mdev", "list"],
    ["mdev", "list", "--defined"],
    ["vgpu", "types"],
    ["vgpu", "list"],
    ["mig", "status"],
    ["health"],
    ["cdi", "list"],
    ["cdi", "generate", "--dry-run"],
    ["render", "hostdev", "gpu0"],
    ["k8s", "resources", "--json"],
    ["k8s", "labels"],
    ["exporter", "--once"],
    ["export"],
    ["qos", "status"],
]

_recording: list[tuple[str, int]] | None = None  # (path, flags) opened or listed while a command runs


def _hook(event: str, args: tuple[object, ...]) -> None:
    if _recording is None:
        return
    if event == "open" and isinstance(args[0], str | bytes):
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        _recording.append((os.fsdecode(args[0]), flags))
    elif event in ("os.listdir", "os.scandir") and isinstance(args[0], str | bytes):
        _recording.append((os.fsdecode(args[0]), 0))


sys.addaudithook(_hook)  # stays for the process; does nothing unless a test records


def run(root: Path, argv: list[str]) -> tuple[int, str, str, list[tuple[str, str]]]:
    """Run one command in-process; what it opened or listed, each with its real path at that moment."""
    global _recording
    seen: list[tuple[str, int]] = []
    out, err = io.StringIO(), io.StringIO()
    _recording = seen
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["--sim", str(root), *argv])
    finally:
        _recording = None
    where = [(p, _target(p, flags)) for p, flags in seen if os.path.isabs(p) and not flags & os.O_PATH]
    return rc, out.getvalue(), err.getvalue(), where


def _target(path: str, flags: int) -> str:
    """What an open of ``path`` reaches: with ``O_NOFOLLOW`` a final link is not followed (the open
    fails with ELOOP), so only its directory is resolved."""
    if flags & os.O_NOFOLLOW:
        return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    return os.path.realpath(path)


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[Path, dict[tuple[str, ...], list[str]]]]:
    """A host with a bit of everything, and per command the paths it read under the root."""
    with tempfile.TemporaryDirectory(prefix="vgpukit-doorcmd-") as tmp:
        root = Path(tmp) / "root"
        assert main(["sim", "init", str(root), "--profile", str(PROFILE)]) == 0
        for argv in (
            ["cdi", "enable"],
            ["sriov", "enable", "nic0", "--vfs", "2", "--driver", "vfio-pci"],
            ["partition", "gpu0", "--mig", "3g.20gb"],
            ["mdev", "create", "--type", "mtty-1", "--define"],
            ["vgpu", "create", "gpu1", "--type", "T4-4Q"],
        ):
            assert main(["--sim", str(root), *argv]) == 0, argv
        (root / "etc" / "ld.so.cache").write_bytes(b"glibc-ld.so.cache1.1" + bytes(64))
        real_root = os.path.realpath(root)
        reads: dict[tuple[str, ...], list[str]] = {}
        for argv in COMMANDS:
            rc, _, err, where = run(root, argv)
            assert rc in (0, 1, 3, 4), (argv, rc, err)
            inside = {p for p, real in where if real.startswith(real_root + "/") and os.path.lexists(p)}
            reads[tuple(argv)] = sorted(p for p in inside if "/.vgpukit-sim" not in p and not p.endswith("/lock"))
        yield root, reads


def test_the_commands_read_through_the_door(world: tuple[Path, dict[tuple[str, ...], list[str]]]) -> None:
    """The record is not empty: sysfs, /dev, /etc and /run are all read by some command."""
    root, reads = world
    everything = {p[len(str(root)) :].split("/")[1] for ps in reads.values() for p in ps}
    assert {"sys", "dev", "etc", "run"} <= everything, everything


def _plant_and_run(root: Path, argv: list[str], planted: Path, relative: bool) -> str | None:
    """Replace ``planted`` by a link to an identical copy outside the root (absolute, or relative
    climbing out with ``..``), run the command, put the host back; what went wrong, or None."""
    outside, stash = root.parent / "outside", root.parent / "stash"
    for d in (outside, stash):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
    copy = outside / planted.name
    if planted.is_dir() and not planted.is_symlink():
        shutil.copytree(planted, copy, symlinks=True)
    elif planted.is_symlink():
        os.symlink(os.readlink(planted), copy)
    else:
        shutil.copy2(planted, copy)
    os.rename(planted, stash / "orig")
    os.symlink(os.path.relpath(copy, planted.parent) if relative else copy, planted)
    try:
        rc, _, err, where = run(root, argv)
    finally:
        os.unlink(planted)
        os.rename(stash / "orig", planted)
    real_outside = os.path.realpath(outside)
    leaked = sorted({p for p, real in where if real == real_outside or real.startswith(real_outside + "/")})
    if leaked:
        return f"{argv} read outside the root through {planted}: {leaked[:3]}"
    if "Traceback" in err or "internal error" in err:
        return f"{argv} with {planted} planted: {err}"
    if rc == 2 and not any(w in err for w in ("outside the host root", "leads outside", "outside the simulated host")):
        return f"{argv} with {planted} planted: exit 2 for another reason: {err}"
    return None


def test_every_path_read_planted_as_a_link_out(world: tuple[Path, dict[tuple[str, ...], list[str]]]) -> None:
    """Every path every command read, in turn replaced by a link out of the root."""
    root, reads = world
    failures = [
        f
        for argv, paths in reads.items()
        for path in paths
        if (f := _plant_and_run(root, list(argv), Path(path), relative=False))
    ]
    assert not failures, "\n".join(failures[:10])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_directories_planted_as_links_out_with_dotdot(
    world: tuple[Path, dict[tuple[str, ...], list[str]]], data: st.DataObject
) -> None:
    """A directory on the way to a path read (one or two levels up, or the path), as a link out,
    absolute or relative with ``..``."""
    root, reads = world
    argv = list(data.draw(st.sampled_from(sorted(k for k, v in reads.items() if v)), label="command"))
    path = data.draw(st.sampled_from(reads[tuple(argv)]), label="path")
    rel = Path(path).relative_to(root).parts
    up = data.draw(st.integers(min_value=0, max_value=min(2, len(rel) - 1)), label="levels up")
    relative = data.draw(st.booleans(), label="relative link")
    failure = _plant_and_run(root, argv, root.joinpath(*rel[: len(rel) - up]), relative)
    assert failure is None, failure
