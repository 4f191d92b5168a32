"""mig-parted's hooks file (``-k FILE``), parsed strictly and run as real processes.

::

    version: v1
    hooks:
      pre-apply-mode:
        - workdir: /etc/nvidia-mig-manager
          command: /bin/bash
          args: ["-c", "source hooks.sh; pre-apply-mode"]
          envs: {FOO: bar}

mig-parted runs ``apply-start`` first, ``pre-apply-mode`` before changing a MIG mode (only when
some mode differs), ``pre-apply-config`` before changing MIG devices (only when they differ), and
``apply-exit`` last, whatever happened, once ``apply-start`` succeeded. vgpukit also runs
``post-apply-mode`` / ``post-apply-config`` after a phase that changed something (mig-parted has no
such names). The hooks of one name run in order; the first that fails (exit status not 0, killed,
not found) stops the apply. A hook's environment is its ``envs`` overlaid with the apply's settings
(``MIG_PARTED_CONFIG_FILE``, ``MIG_PARTED_SELECTED_CONFIG``, ``MIG_PARTED_HOOKS_FILE``,
``MIG_PARTED_SKIP_RESET``, ``MIG_PARTED_MODE_CHANGE_ONLY`` and the same as ``VGPUKIT_MIG_*``), and
nothing else, as mig-parted does; the command is looked up on vgpukit's own PATH. Output is shown
(on stderr) only with --debug, as mig-parted shows it only with --debug.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from ..errors import VgpukitError
from ..inputs import load_yaml
from .config import _err, _mapping, _scalar

if TYPE_CHECKING:  # yaml is imported where a document is parsed: read-only commands never load it
    import yaml


class HookFailed(VgpukitError):
    """A hook failed: exit 1, as mig-parted exits for every failure."""

    kind = "hook-failed"


HOOK_NAMES = ("apply-start", "pre-apply-mode", "post-apply-mode", "pre-apply-config", "post-apply-config", "apply-exit")
HOOK_KEYS = ("command", "args", "envs", "workdir")
MAX_HOOKS_BYTES = 256 * 1024


class Hook(msgspec.Struct, frozen=True):
    line: int
    command: str
    args: tuple[str, ...] = ()
    envs: tuple[tuple[str, str], ...] = ()
    workdir: str = ""


@dataclass
class Hooks:
    source: str = ""
    by_name: dict[str, list[Hook]] = field(default_factory=dict)

    def run(self, name: str, env: dict[str, str], show_output: bool) -> None:
        """Run the hooks of ``name`` in order; HookFailed (exit 1) at the first that fails."""
        for h in self.by_name.get(name, []):
            _run_one(self.source, name, h, env, show_output)


def _run_one(source: str, name: str, h: Hook, env: dict[str, str], show_output: bool) -> None:
    where = f"the {name} hook at {source}:{h.line}"
    exe = h.command if "/" in h.command else shutil.which(h.command)
    if exe is None:
        raise HookFailed(f"{where}: command not found on PATH")
    out = sys.stderr if show_output else subprocess.DEVNULL
    try:
        rc = subprocess.run(
            [exe, *h.args],
            env={**dict(h.envs), **env},
            cwd=h.workdir or None,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            check=False,
        ).returncode
    except OSError as exc:
        raise HookFailed(f"{where}: cannot run it: {exc.strerror or exc}") from None
    if rc != 0:
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
        raise HookFailed(f"{where} {how}", hint="fix the hook or run apply without -k")


def _text(source: str, node: yaml.Node, what: str) -> str:
    import yaml

    value = _scalar(node)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or "\0" in str(value):
        raise _err(source, node, f"{what} must be a string")
    return str(node.value) if isinstance(node, yaml.ScalarNode) else str(value)


def parse(text: str, source: str = "hooks") -> Hooks:
    import yaml

    load_yaml(text, source, max_bytes=MAX_HOOKS_BYTES)
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return Hooks(source)
    top = _mapping(source, root, "the hooks file", ("version", "hooks"))
    if "version" in top and _scalar(top["version"]) != "v1":
        raise _err(source, top["version"], "version must be v1")
    hooks = Hooks(source)
    if "hooks" not in top or (_scalar(top["hooks"]) is None and isinstance(top["hooks"], yaml.ScalarNode)):
        return hooks
    for name, node in _mapping(source, top["hooks"], "hooks", HOOK_NAMES).items():
        if isinstance(node, yaml.ScalarNode) and _scalar(node) is None:
            continue
        if not isinstance(node, yaml.SequenceNode):
            raise _err(source, node, f"{name} must be a list of hooks")
        hooks.by_name[name] = [_hook(source, item) for item in node.value]
    return hooks


def _hook(source: str, node: yaml.Node) -> Hook:
    import yaml

    keys = _mapping(source, node, "a hook", HOOK_KEYS)
    if "command" not in keys:
        raise _err(source, node, "a hook lacks 'command'")
    command = _text(source, keys["command"], "command")
    if not command:
        raise _err(source, keys["command"], "command must not be empty")
    args: list[str] = []
    if "args" in keys and not (isinstance(keys["args"], yaml.ScalarNode) and _scalar(keys["args"]) is None):
        if not isinstance(keys["args"], yaml.SequenceNode):
            raise _err(source, keys["args"], "args must be a list of strings")
        args = [_text(source, a, "each arg") for a in keys["args"].value]
    envs: list[tuple[str, str]] = []
    if "envs" in keys and not (isinstance(keys["envs"], yaml.ScalarNode) and _scalar(keys["envs"]) is None):
        for k, v in _mapping(source, keys["envs"], "envs", None).items():
            if not k or "=" in k or "\0" in k:
                raise _err(source, v, "envs: a name must be non-empty without '='")
            envs.append((k, _text(source, v, f"envs.{k}")))
    workdir = _text(source, keys["workdir"], "workdir") if "workdir" in keys else ""
    return Hook(node.start_mark.line + 1, command, tuple(args), tuple(envs), workdir)


def environment(
    config_file: str, selected: str, hooks_file: str, skip_reset: bool, mode_only: bool, host: dict[str, str]
) -> dict[str, str]:
    """What mig-parted gives its hooks (its apply flags' variables), plus vgpukit's names for them
    and the simulated host or root the command acts on, so ``vgpukit`` in a hook acts on the same host."""
    env = {}
    values = {
        "CONFIG_FILE": config_file,
        "SELECTED_CONFIG": selected,
        "HOOKS_FILE": hooks_file,
        "SKIP_RESET": "true" if skip_reset else "false",
        "MODE_CHANGE_ONLY": "true" if mode_only else "false",
    }
    for key, value in values.items():
        env[f"MIG_PARTED_{key}"] = value
        env[f"VGPUKIT_MIG_{key}"] = value
    return {**env, **host}
