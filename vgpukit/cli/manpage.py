"""Generate ``vgpukit(1)`` from the commands' own help (roff, man(7) macros).

``python -m vgpukit.cli.manpage > docs/man/vgpukit.1``; a test keeps the shipped page current, and
another that :data:`ENVIRONMENT` names every variable the program reads. The wheel installs the page
as ``share/man/man1/vgpukit.1`` (pyproject's ``shared-data``); from a checkout:
``install -m 644 docs/man/vgpukit.1 /usr/local/share/man/man1/``.
"""

from __future__ import annotations

import sys

import click

# Every environment variable vgpukit reads, and what for (tests/core/test_cli_extras.py compares this with
# the code: a variable read without an entry here fails).
ENVIRONMENT: dict[str, str] = {
    "VGPUKIT_ROOT": "host root directory (as --root; an empty value is refused)",
    "VGPUKIT_SIM": "simulated host directory (as --sim; an empty value is refused)",
    "VGPUKIT_WAIT": "seconds a mutating command waits for the host lock (as --wait; default 30)",
    "VGPUKIT_LIBVIRT_URI": "libvirt connection URI (as --connect of attach, detach, render; --libvirt of sriov)",
    "VGPUKIT_HOST_FILE": "host config document of apply, diff, assert (as --file)",
    "VGPUKIT_HOST_CONFIG": "config name in the host config document (as --config)",
    "VGPUKIT_MIG_CONFIG_FILE, MIG_PARTED_CONFIG_FILE": "mig-parted config file of mig apply, assert, service (as -f)",
    "VGPUKIT_MIG_SELECTED_CONFIG, MIG_PARTED_SELECTED_CONFIG": "config name of mig apply, assert, service (as -c)",
    "VGPUKIT_MIG_MODE_CHANGE_ONLY, MIG_PARTED_MODE_CHANGE_ONLY": "change or check only the MIG mode (as --mode-only)",
    "VGPUKIT_MIG_HOOKS_FILE, MIG_PARTED_HOOKS_FILE": "mig-parted hooks file of mig apply and service (as -k)",
    "VGPUKIT_MIG_SKIP_RESET, MIG_PARTED_SKIP_RESET": "mig apply resets no GPU (as --skip-reset)",
    "VGPUKIT_MIG_STRICT": "mig apply, assert, service refuse what mig-parted accepts silently (as --strict)",
    "VGPUKIT_STRICT": "apply, diff, assert refuse what mig-parted accepts silently in mig-configs (as --strict)",
    "MIG_PARTED_CONFIG_LABEL": "config name written by mig export (as -l)",
    "NODE_NAME": "this node's name for the Kubernetes node agent (as --node) and the exporter's Hostname label",
    "VGPUKIT_RESYNC": "seconds between the long-running commands' safety-net looks at the GPUs' side, the whole "
    "host every 12th look (as --resync of k8s device-plugin, k8s dra-plugin, exporter, health --watch; default 300)",
    "NOTIFY_SOCKET, WATCHDOG_USEC": "set by systemd: the QoS daemon reports readiness and keeps the watchdog fed",
    "VGPUKIT_SIM_CRASH_AT_WRITE": "testing: a command on a sim host kills itself before its Nth control-file write",
    "CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY, CUDA_VISIBLE_DEVICES": "set by the DRA plugin for the MPS "
    "control daemon it starts per GPU or MIG slice (read by the simulated nvidia-cuda-mps-control)",
    "VGPUKIT_SIM_CRASH_AT_CHANGE": "testing: a command on a sim host kills itself before its Nth file change",
    "VGPUKIT_SIM_CRASH_AT_NVML_CALL": "testing: the simulated NVIDIA driver kills the command before its Nth change",
    "_VGPUKIT_COMPLETE": "set by the completion script of vgpukit completion",
}

EXAMPLES = [
    ("List the PCI devices and their capabilities", "vgpukit devices"),
    (
        "Try everything on a simulated host first",
        "vgpukit sim init /tmp/h --profile hgx-a100\nvgpukit --sim /tmp/h topo",
    ),
    ("Create 8 VFs on a NIC and hand them to vfio-pci", "vgpukit sriov enable nic0 --vfs 8 --driver vfio-pci"),
    (
        "Carve a GPU into MIG slices, showing the plan first",
        "vgpukit --dry-run partition gpu0 --mig 3g.20gb --mig 1g.5gb=2\n"
        "vgpukit partition gpu0 --mig 3g.20gb --mig 1g.5gb=2",
    ),
    (
        "Create two mediated devices of a type and keep them across reboots",
        "vgpukit mdev create 0000:3b:00.0 nvidia-222 --count 2 --define",
    ),
    ("Use vgpukit where scripts call mdevctl", 'mdevctl() { vgpukit mdev --mdevctl "$@"; }'),
    ("Make the host match a declarative config, as a script would", "vgpukit --json apply -f host.yaml"),
    ("Install shell completion for bash", "vgpukit completion bash > /etc/bash_completion.d/vgpukit"),
]
SEE_ALSO = ("mdevctl(8)", "lsmdev(8)", "nvidia-smi(1)", "virsh(1)", "lspci(8)", "systemd.unit(5)")


def _esc(text: str) -> str:
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in out.splitlines())


def _params(ctx: click.Context, cmd: click.Command) -> list[str]:
    lines: list[str] = []
    for p in cmd.get_params(ctx):
        rec = p.get_help_record(ctx) if isinstance(p, click.Option) else None
        if rec is None:
            continue
        lines += [".TP", f"\\fB{_esc(rec[0])}\\fR", _esc(rec[1]) or "\\&"]
    return lines


def _command(ctx: click.Context, path: str, cmd: click.Command, out: list[str]) -> None:
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    out += [".SS " + _esc(f"{path} {usage}".strip())]
    text = (cmd.help or cmd.short_help or "").strip()
    if text:
        out += [_esc(" ".join(para.split())) + "\n.PP" for para in text.split("\n\n")]
        out[-1] = out[-1].removesuffix("\n.PP")
    out += _params(ctx, cmd)
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                _command(click.Context(sub, info_name=name, parent=ctx), f"{path} {name}", sub, out)


def render() -> str:
    from importlib.metadata import version

    from .main import cli

    ctx = cli.make_context("vgpukit", [], resilient_parsing=True)  # with the group's context settings (-h)
    out = [
        f'.TH VGPUKIT 1 "" "vgpukit {version("vgpukit")}" "User Commands"',
        ".SH NAME",
        "vgpukit \\- carve GPUs and PCIe devices into VFs, mdevs, vGPUs and MIG slices",
        ".SH SYNOPSIS",
        "\\fBvgpukit\\fR [\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        _esc(" ".join((cli.help or "").split())),
        ".SH GLOBAL OPTIONS",
        *_params(ctx, cli),
        ".SH COMMANDS",
    ]
    assert isinstance(cli, click.Group)
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        if cmd is not None and not cmd.hidden:
            _command(click.Context(cmd, info_name=name, parent=ctx), f"vgpukit {name}", cmd, out)
    out += [
        ".SH EXIT STATUS",
        "0 success (also: nothing to do); 1 failed; 2 bad input or usage; 3 not found;",
        "4 busy, conflicting, no capacity, or the host lock is held; 5 unsupported;",
        "6 done except for the devices named (unusable: refused or left alone; or not read).",
        "vgpukit health reports a state instead: 0 healthy, 1 degraded, 4 unusable.",
        ".SH ENVIRONMENT",
        *(f".TP\n{_esc(name)}\n{_esc(what)}" for name, what in ENVIRONMENT.items()),
        ".SH FILES",
        ".TP\n/run/vgpukit/lock, /run/vgpukit/journal\nthe host lock and the intent journal",
        ".TP\n/run/vgpukit/bind/\noriginal drivers of devices vgpukit moved",
        ".TP\n/etc/mdevctl.d/\npersistent mdev definitions (mdevctl's format)",
        ".TP\n/etc/vgpukit/\nconfiguration (qos.yaml, template overrides)",
        ".SH EXAMPLES",
        *(f".PP\n{_esc(what)}:\n.PP\n.nf\n.RS\n{_esc(cmd)}\n.RE\n.fi" for what, cmd in EXAMPLES),
        ".SH SEE ALSO",
        ",\n".join("\\fB{}\\fR({}".format(*_esc(ref).split("(")) for ref in SEE_ALSO),
    ]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
