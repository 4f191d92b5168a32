"""What mig-parted's real clients run, as transcripts: the exact ``nvidia-mig-parted`` command lines of
NVIDIA's two scripts, in their order, with their branches on each exit code (docs/decisions.md,
"mig-parted's clients in the tests").

Source: https://github.com/NVIDIA/mig-parted at commit bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d
(Apache-2.0; not copied here: only the command lines and the conditions around them):

* ``deployments/container/reconfigure-mig.sh`` (``deployments/gpu-operator/`` before upstream renamed
  it): the GPU operator's mig-manager runs it with ``-n NODE -f CONFIG_FILE -c SELECTED_CONFIG -p
  NAMESPACE`` when the node's ``nvidia.com/mig.config`` label changes. Lines 439-584: its
  ``nvidia-mig-parted`` calls; around them it reads and sets node labels and waits for pods with
  ``kubectl`` (not replayed: they change no GPU), and with ``-r`` reboots when the mode does not take.
* ``deployments/systemd/service.sh``: ``nvidia-mig-manager.service`` runs it at boot with
  ``MIG_PARTED_SELECTED_CONFIG`` from the unit's override; its config falls back to the shipped
  ``config-default.yaml`` when ``generate-config`` fails; ``MIG_PARTED_CONFIG_FILE`` and
  ``MIG_PARTED_HOOKS_FILE`` default to ``config.yaml`` and ``hooks.yaml`` beside it.

``tests/mig/test_migparted_clients.py`` replays these against a simulated host through the
``nvidia-mig-parted`` shim; with ``VGPUKIT_MIG_PARTED_SRC`` set (a mig-parted checkout, or its git
directory), it also runs the scripts themselves, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

SOURCE_COMMIT = "bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d"
RECONFIGURE = "deployments/container/reconfigure-mig.sh"
SERVICE = "deployments/systemd/service.sh"

# run(argv after "nvidia-mig-parted", extra environment) -> exit code
Run = Callable[[list[str], dict[str, str]], int]


def reconfigure_mig(run: Run, config_file: str, selected: str, with_reboot: bool = False) -> str:
    """reconfigure-mig.sh's ``nvidia-mig-parted`` calls; the state it ends in: ``success``, ``failed``
    or ``rebooting`` (what it labels the node ``nvidia.com/mig.config.state`` with)."""
    f = ["-f", config_file, "-c", selected]
    if run(["assert", "--valid-config", *f], {}) != 0:  # line 439
        return "failed"
    if run(["assert", *f], {}) == 0:  # line 454: already applied
        return "success"
    run(["assert", "--mode-only", *f], {})  # line 472 (only decides about host services and reboots)
    run(["-d", "apply", "--mode-only", *f], {})  # line 567: its exit code is not looked at
    if run(["-d", "assert", "--mode-only", *f], {}) != 0 and with_reboot:  # line 568
        return "rebooting"
    if run(["-d", "apply", *f], {}) != 0:  # line 584
        return "failed"
    return "success"


def service(run: Run, currdir: Path, selected: str, env: dict[str, str] | None = None) -> int:
    """service.sh's ``nvidia-mig-parted`` calls (with ``currdir`` its directory, holding
    ``config-default.yaml`` and ``hooks.yaml``); its exit code. The GPU-reset and nvidia-module checks
    between the calls read the real machine's /sys and /proc: taken as "reset available", "module
    loaded"."""
    config = currdir / "config.yaml"
    if run(["generate-config", "-f", f"{config}.tmp"], {}) == 0:  # line 35
        raise AssertionError("vgpukit's drop-in does not generate configs: service.sh's fallback is expected")
    if not config.exists():  # lines 42-46: the shipped default
        config.write_bytes((currdir / "config-default.yaml").read_bytes())
    environ = {
        "MIG_PARTED_CONFIG_FILE": str(config),
        "MIG_PARTED_HOOKS_FILE": str(currdir / "hooks.yaml"),
        "MIG_PARTED_SELECTED_CONFIG": selected,
        **(env or {}),
    }
    if run(["assert", "--mode-only"], environ) != 0:  # line 64
        if run(["apply", "--mode-only", "--skip-reset"], environ) != 0:  # line 69
            return 1
        if run(["apply", "--mode-only"], environ) != 0:  # line 89: the GPU reset under the hood
            return 1
    if run(["apply"], environ) != 0:  # line 106
        return 1
    run(["export"], environ)  # line 112
    return 0
