"""What every CLI user expects: -V, shell completion, a man page that matches the commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vgpukit", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def test_short_version_flag() -> None:
    r = _run("-V")
    assert r.returncode == 0 and r.stdout.startswith("vgpukit, version ")


def test_completion_scripts_and_command_completion() -> None:
    for shell in ("bash", "zsh", "fish"):
        r = _run("completion", shell)
        assert r.returncode == 0 and "_VGPUKIT_COMPLETE" in r.stdout, shell
    r = _run(env={"_VGPUKIT_COMPLETE": "bash_complete", "COMP_WORDS": "vgpukit sri", "COMP_CWORD": "1"})
    assert "sriov" in r.stdout
    r = _run("completion", "tcsh")
    assert r.returncode == 2 and r.stderr.startswith("vgpukit: error: ") and r.stderr.count("\n") == 1


def test_shipped_man_page_is_generated_from_the_current_help() -> None:
    from vgpukit.cli.manpage import render

    shipped = (ROOT / "docs" / "man" / "vgpukit.1").read_text()
    assert shipped == render(), "regenerate: python -m vgpukit.cli.manpage > docs/man/vgpukit.1"
    assert ".SS vgpukit sriov enable" in shipped and "\\-\\-wait SECONDS" in shipped


def _complete(words: str, sim: Path | str) -> list[str]:
    """Click's bash completion protocol, as the script `vgpukit completion bash` installs runs it."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    env = {"_VGPUKIT_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword), "VGPUKIT_SIM": str(sim)}
    r = _run(env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return [line.split(",", 1)[1] for line in r.stdout.splitlines() if line]


def test_device_arguments_complete_the_hosts_names(tmp_path: Path) -> None:
    from tests.conftest import make_sim

    sim = make_sim(tmp_path / "hgx")
    assert _complete("vgpukit bind g", sim) == [f"gpu{i}" for i in range(8)]
    offered = _complete("vgpukit bind ", sim)
    assert offered[:13] == [*(f"gpu{i}" for i in range(8)), "nic0", "nic1", "nic2", "nic3", "nvme0"]
    assert "0000:11:00.0" in offered  # any PCI function by address, the console too
    assert _complete("vgpukit sriov enable 05", sim) == ["05:00.0"]  # the short form as typed
    gpus = _complete("vgpukit mig status ", sim)  # a GPU argument: GPUs only, never the BMC's VGA
    assert gpus[:8] == [f"gpu{i}" for i in range(8)] and "0000:03:00.0" in gpus and "0000:11:00.0" not in gpus
    assert "nic0" not in gpus
    guest = make_sim(tmp_path / "guest", "qemu-guest")
    assert _complete("vgpukit mdev types m", guest) == ["mtty"]  # an mdev parent
    assert _complete("vgpukit bind g", tmp_path / "nothing") == []  # silent when the host is not there
    assert _complete("vgpukit --sim " + str(sim) + " unbind nv", tmp_path / "nothing") == ["nvme0"]


def _installed_units(root: Path, argv: list[str], env: dict[str, str]) -> dict[str, str]:
    r = subprocess.run([*argv, "--root", str(root), "units", "install"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    units = root / "etc/systemd/system"
    return {
        p.name: next(ln for ln in p.read_text().splitlines() if ln.startswith("ExecStart="))
        for p in sorted(units.iterdir())
    }


def test_units_run_the_installed_entry_point(tmp_path: Path) -> None:
    """The ExecStart= lines name the vgpukit that installed them: a console script where it is
    installed, or this interpreter with -m vgpukit; never a hard-coded /usr/local/bin."""
    bindir = tmp_path / "opt" / "bin"
    bindir.mkdir(parents=True)
    script = bindir / "vgpukit"  # a console script as pip writes it, in an unusual place
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom vgpukit.cli.main import main\nsys.exit(main())\n")
    script.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    (tmp_path / "a").mkdir()
    execs = _installed_units(tmp_path / "a", [str(script)], env)
    assert set(execs) == {
        "vgpukit-mdev-restore.service",
        "vgpukit-mdev-start@.service",
        "vgpukit-qos.service",
        "vgpukit-exporter.service",
        "vgpukit-remediate.service",
    }
    assert execs["vgpukit-exporter.service"] == f"ExecStart={script} exporter --listen :9401"
    assert execs["vgpukit-remediate.service"] == f"ExecStart={script} remediate --auto"
    assert execs["vgpukit-mdev-restore.service"] == f"ExecStart={script} mdev start --all"
    assert execs["vgpukit-mdev-start@.service"] == f"ExecStart={script} mdev start --all --parent %I"
    assert execs["vgpukit-qos.service"] == f"ExecStart={script} qos daemon --config /etc/vgpukit/qos.yaml"
    assert (tmp_path / "a/etc/udev/rules.d/60-vgpukit-mdev.rules").is_file()
    (tmp_path / "b").mkdir()  # python -m vgpukit with no vgpukit on PATH: the interpreter runs the module
    execs = _installed_units(tmp_path / "b", [sys.executable, "-m", "vgpukit"], {**env, "PATH": str(tmp_path)})
    assert execs["vgpukit-qos.service"].startswith(f"ExecStart={os.path.abspath(sys.executable)} -m vgpukit qos ")
    r = _run("--root", str(tmp_path / "b"), "units", "install", "--exec", "/opt/my vgpukit")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "absolute path" in r.stderr


def _variables_read() -> set[str]:
    """Every environment variable the code reads: os.environ/getenv with a literal or a module constant,
    click's envvar= (walking the whole command tree), and the --root/--sim variables (context._given)."""
    import re

    import click

    from vgpukit.cli.main import cli

    found: set[str] = set()
    for path in (ROOT / "vgpukit").rglob("*.py"):
        text = path.read_text()
        consts = dict(re.findall(r'^([A-Z_]+) = "([A-Z_][A-Z0-9_]*)"$', text, re.M))
        consts.update(re.findall(r'^([A-Z_]+), [A-Z_]+ = "([A-Z_0-9]+)", "[A-Z_0-9]+"$', text, re.M))
        consts.update(re.findall(r'^[A-Z_]+, ([A-Z_]+) = "[A-Z_0-9]+", "([A-Z_0-9]+)"$', text, re.M))
        for arg in re.findall(r"(?:environ\.get|getenv|environ\[)\(?\s*([\"']?[A-Za-z_][A-Za-z0-9_]*)", text):
            if arg[0] in "\"'":
                found.add(arg[1:])
            elif arg in consts:
                found.add(consts[arg])
        found.update(re.findall(r'_given\([^)]*"([A-Z_]+)"\)', text))
        found.update(re.findall(r'envvar="([A-Z_][A-Z0-9_]*)"', text))

    def walk(cmd: click.Command, ctx: click.Context) -> None:
        for p in cmd.params:
            if isinstance(p, click.Option) and p.envvar:
                found.update([p.envvar] if isinstance(p.envvar, str) else p.envvar)
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None:
                    walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(cli, cli.make_context("vgpukit", [], resilient_parsing=True))  # with its settings (-h): click caches them
    found.discard("env")  # the parameter of context._given, whose callers are counted above
    return found


def test_man_page_environment_lists_every_variable_read() -> None:
    from vgpukit.cli.manpage import ENVIRONMENT

    documented = {name.strip() for names in ENVIRONMENT for name in names.split(",")}
    read = _variables_read()
    assert {"VGPUKIT_ROOT", "VGPUKIT_SIM", "VGPUKIT_WAIT", "MIG_PARTED_CONFIG_FILE", "NODE_NAME"} <= read
    assert read - documented == set(), "add these to vgpukit/cli/manpage.py ENVIRONMENT"
    assert documented - read - {"_VGPUKIT_COMPLETE"} == set(), "documented but never read"
    page = (ROOT / "docs" / "man" / "vgpukit.1").read_text()
    assert ".SH EXAMPLES" in page and ".SH SEE ALSO" in page and "VGPUKIT_SIM_CRASH_AT_WRITE" in page


def test_completion_knows_pfs_parents_types_uuids_profiles(tmp_path: Path) -> None:
    """Each argument completes what it takes, read from the host named earlier on the line (--sim) or
    by VGPUKIT_SIM; nothing when there is no such host."""
    from tests.conftest import invoke, make_sim

    hgx = make_sim(tmp_path / "hgx")
    assert _complete("vgpukit sriov enable ", hgx) == [
        "nic0", "nic1", "nic2", "nic3", "0000:05:00.0", "0000:25:00.0", "0000:85:00.0", "0000:a5:00.0"
    ]  # fmt: skip  # SR-IOV capable PFs only: no GPU, no NVMe, no VF
    profiles = ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb"]
    assert _complete("vgpukit partition gpu0 --mig ", hgx) == profiles
    assert _complete("vgpukit partition gpu0 --mig 3g.20gb,1g.1", hgx) == ["3g.20gb,1g.10gb"]
    t4 = make_sim(tmp_path / "t4", "t4-mdev")
    nowhere = tmp_path / "nothing"
    assert _complete(f"vgpukit --sim {t4} mdev create ", nowhere) == ["0000:3b:00.0", "0000:d8:00.0"]
    types = _complete(f"vgpukit --sim {t4} mdev create 0000:3b:00.0 ", nowhere)
    assert types[:2] == ["nvidia-222", "nvidia-223"] and len(types) == 10
    assert _complete("vgpukit mdev create gpu1 nvidia-23", t4) == ["nvidia-230", "nvidia-231", "nvidia-232",
                                                                   "nvidia-233", "nvidia-234"]  # fmt: skip
    r = invoke(t4, "--json", "mdev", "create", "0000:3b:00.0", "nvidia-222")
    assert r.exit_code == 0, r.stderr
    uid = r.stdout.split('"uuid": "', 1)[1][:36]
    assert _complete("vgpukit mdev remove ", t4) == [uid]
    assert _complete("vgpukit mdev stop ", t4) == [uid]
    assert _complete("vgpukit sim init x --profile ", nowhere) == [
        "h100-vgpu", "hgx-a100", "hgx-h100", "mixed-a100-t4", "qemu-guest", "t4-mdev"
    ]  # fmt: skip
    assert _complete("vgpukit sim init x --profile q", nowhere) == ["qemu-guest"]
    assert (
        _complete("vgpukit mdev create ", nowhere) == [] and _complete("vgpukit partition gpu0 --mig ", nowhere) == []
    )
