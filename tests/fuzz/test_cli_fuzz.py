"""Every argument and option of every command, fuzzed with hostile values (docs/safety.md).

The command tree is walked from ``vgpukit.cli.main.cli``: a command added later is fuzzed without
touching this file. Values mix what a careless script or an attacker hands over (unicode digits,
huge and negative numbers, empty strings, control characters, 5000-character strings, ``../``
paths, device nodes) with plausible ones, so cases also get past parsing and into the commands.
"""

from __future__ import annotations

from typing import Any

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpukit.cli.main import cli, main
from vgpukit.clikit.params import AsciiFloat, AsciiInt

from .conftest import examples
from .harness import FuzzHost, check

HOSTILE = [
    "", " ", "٣", "١", "０", "¹", "٣٣", "18446744073709551616", "-1", "-0", "0", "1", "2", "1_000", "0x10",
    "1e309", "nan", "inf", "9" * 60, "\x1b[31mred", "a\nb", "a\x00b", "\u202egpu0", "\ufeffgpu0", "x" * 5000,
    "../", "../../etc/passwd", "/dev/zero", "/", ".", "..", "gpu0/../gpu1", "-", "--", "%s%n", "' OR 1=1",
]  # fmt: skip
NAMES = [
    "gpu0", "gpu1", "gpu7", "nic0", "nvme0", "0000:03:00.0", "03:00.0", "0000:04:00.0", "0000:05:00.0",
    "0000:05:00.2", "0000:05:00.3", "mtty", "mtty-1", "mtty-2", "nvidia-222", "nvidia-231", "vfio-pci",
    "mlx5_core", "1g.5gb", "3g.20gb", "1g.5gb=2", "1c.3g.20gb", "7g.40gb", "T4-4Q", "T4-1B", "vm1", "a",
    "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001", "GPU-00000000-0000-0000-0000-000000000000", "busy", "idle",
    "/etc/cdi/out.yaml", "/sys/fs/cgroup/x", "52:54:00:00:00:01", "10de", "auto", "efi", "bios",
]  # fmt: skip
PATHS = ["good.yaml", "missing.yaml", "/dev/zero", "/dev/null", "", ".", "..", "../../x", "a\nb", "x" * 5000]
GOOD_CONFIG = "version: v1\nmig-configs:\n  one:\n    - devices: all\n      mig-enabled: true\n"

# commands that serve forever: their parameters are fuzzed through click's parsing only
SERVE = {("qos", "daemon"), ("k8s", "device-plugin"), ("k8s", "node-agent"), ("exporter",)}
# commands that stream until interrupted with --watch: fuzzed with the stream bounded (--for 0)
WATCH = {("health",)}
# commands that document exit 1 (a difference found; no libvirt daemon to talk to)
EXIT_1 = {("mig", "assert"), ("assert",), ("mdev", "start"), ("attach",), ("detach",)}  # assert: 1 = differs


def leaf_commands() -> list[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(cli)
    out: list[tuple[tuple[str, ...], click.Command]] = []

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, (*path, name))
        else:
            out.append((path, cmd))

    walk(cli, ())
    return out


COMMANDS = leaf_commands()


def values(param: click.Parameter) -> st.SearchStrategy[str]:
    hostile = st.sampled_from(HOSTILE) | st.text(max_size=12)
    t: Any = param.type
    if isinstance(t, AsciiInt):
        lo = t.lo if t.lo is not None else -5
        hi = t.hi if t.hi is not None else lo + 100
        return st.integers(lo, min(hi, lo + 10_000)).map(str) | hostile
    if isinstance(t, AsciiFloat):
        return st.floats(t.lo or 0, t.hi or 100).map(lambda f: f"{f:.3f}") | hostile
    if isinstance(t, click.Choice):
        return st.sampled_from(list(t.choices)) | hostile
    if isinstance(t, click.Path):
        return st.sampled_from(PATHS)
    return st.sampled_from(NAMES) | hostile


@st.composite
def argv_for(draw: st.DrawFn, cmd: click.Command) -> list[str]:
    opts: list[str] = []
    args: list[str] = []
    for p in cmd.params:
        if isinstance(p, click.Option):
            if p.name == "help":
                continue
            flag = p.opts[-1] if p.opts else None
            if p.is_flag or p.count:
                if draw(st.booleans()):
                    opts.append(draw(st.sampled_from(p.opts + p.secondary_opts)))
                continue
            n = (
                draw(st.integers(0, 2 if p.multiple else 1))
                if not p.required
                else draw(st.integers(1, 2 if p.multiple else 1))
            )
            for _ in range(n):
                assert flag is not None
                opts += [flag, draw(values(p))]
        elif isinstance(p, click.Argument):
            if p.nargs == -1:
                n = draw(st.integers(1 if p.required else 0, 3))
            elif p.required:
                n = p.nargs
            else:
                n = draw(st.integers(0, 1)) * max(p.nargs, 1)
            args += [draw(values(p)) for _ in range(n)]
    return opts + (["--", *args] if args else [])


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_option_of_every_command(fuzz_host: FuzzHost, path: tuple[str, ...], cmd: click.Command) -> None:
    (fuzz_host.scratch / "good.yaml").write_text(GOOD_CONFIG)

    @settings(max_examples=examples(18))
    @given(argv=argv_for(cmd), json_=st.booleans(), dry=st.booleans())
    def case(argv: list[str], json_: bool, dry: bool) -> None:
        front = (["--json"] if json_ else []) + (["--dry-run"] if dry else [])
        if path in SERVE:
            parse_only(fuzz_host, [*path, *argv])
            return
        if path in WATCH and "--watch" in argv:
            argv = bounded(argv)
        fuzz_host.run([*front, *path, *argv], group="cli", allow_1=path in EXIT_1)

    case()


def bounded(argv: list[str]) -> list[str]:
    """``argv`` of a ``--watch`` command with its ``--for`` replaced by 0 (the stream ends at once)."""
    end = argv.index("--") if "--" in argv else len(argv)
    opts, rest = argv[:end], argv[end:]
    out: list[str] = []
    skip = False
    for word in opts:
        if skip:
            skip = False
        elif word == "--for":
            skip = True
        elif not word.startswith("--for="):
            out.append(word)
    return ["--for", "0", *out, *rest]


def parse_only(fuzz_host: FuzzHost, argv: list[str]) -> None:
    """Parse (and convert) the arguments of a serving command without running it."""
    from vgpukit.cli.main import _check_args

    fuzz_host.cases["cli"] = fuzz_host.cases.get("cli", 0) + 1
    try:
        _check_args(argv)
        with cli.make_context("vgpukit", ["--sim", str(fuzz_host.work), *argv], resilient_parsing=False) as ctx:
            sub: Any = ctx
            while isinstance(sub.command, click.Group) and (rest := [*sub._protected_args, *sub.args]):
                name, cmd, rest = sub.command.resolve_command(sub, rest)
                assert cmd is not None
                sub = cmd.make_context(name, rest, parent=sub)
    except click.UsageError:
        return
    except Exception as exc:  # InvalidInput from _check_args is the other accepted refusal
        from vgpukit.errors import InvalidInput

        assert isinstance(exc, InvalidInput), repr(exc)


@settings(max_examples=examples(40))
@given(
    opt=st.sampled_from(["--root", "--sim"]),
    value=st.sampled_from(["", " ", "missing-dir", "a\nb", "x" * 5000, "..", "../..", "."]) | st.text(max_size=8),
)
def test_global_root_and_sim(fuzz_host: FuzzHost, opt: str, value: str) -> None:
    """``--root``/``--sim`` with hostile values, on a read-only command (a relative path lands in
    the scratch directory; an empty one is refused, never taken as ``/``)."""
    if value.startswith("/"):
        value = "." + value
    res = fuzz_host.run([opt, value, "devices"], group="cli", sim=False)
    if not value.strip():
        assert res.rc == 2


@pytest.mark.parametrize("var", ["VGPUKIT_SIM", "VGPUKIT_ROOT"])
def test_empty_environment_variable_is_refused(fuzz_host: FuzzHost, var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(var, "")
    res = fuzz_host.run(["sriov", "enable", "nic0", "--vfs", "2"], group="cli", sim=False)
    assert res.rc == 2 and var in res.err


@pytest.mark.parametrize(
    "argv",
    [
        ["sriov", "enable", "nic0", "--vfs", "٣"],
        ["partition", "١", "--mig", "1g.5gb"],
        ["partition", "gpu0", "--mig", "3g.20gb", "--ci", "1c.3g.20gb=18446744073709551616"],
        ["qos", "daemon", "--metrics-port", "-1"],
        ["mdev", "create", "", "mtty-2"],
        ["partition", "", "--mig", "1g.5gb"],
        ["mdev", "types", ""],
        ["mig", "apply", "-f", "/dev/zero"],
        ["qos", "tenant", "add", "gpu0", "a\x1bb", "--class", "online", "--share", "10", "--pid", "5"],
        ["mdev", "create", "mtty", "mtty-2\n"],
    ],
    ids=lambda a: " ".join(a)[:50],
)
def test_known_bad_inputs_are_refused_with_exit_2(fuzz_host: FuzzHost, argv: list[str]) -> None:
    res = fuzz_host.run(argv, group="cli")
    check(res)
    assert res.rc == 2, res


def test_one_line_usage_errors(fuzz_host: FuzzHost) -> None:
    res = fuzz_host.run(["sriov", "enable", "nic0", "--bogus"], group="cli")
    assert res.rc == 2 and res.err.count("\n") == 1


def test_main_is_the_entry_point() -> None:
    assert callable(main)
