"""The boot unit that re-applies the selected MIG config (as mig-parted's nvidia-mig-manager.service).

Ordering, as nvidia-mig-manager.service has it: no default dependencies (it runs early), after the
driver's own clients that must exist first (``nvidia-persistenced``, ``nvidia-fabricmanager``) and
before ``nvidia-gpu-reset.target``, the target that GPU users (DCGM, nvsm, ...) order themselves
after. vgpukit adds ``Before=`` the services on this host that use GPUs (container engines, kubelet,
libvirt, vgpukit's own mdev restore and QoS daemon) and ``After=`` local filesystems and module
loading (the config and vgpukit itself live on disk; NVML needs the driver loaded).
"""

from __future__ import annotations

from ..errors import InvalidInput
from ..host import SYSTEMD_UNIT_DIR

UNIT = f"{SYSTEMD_UNIT_DIR}/vgpukit-mig.service"
TARGET = f"{SYSTEMD_UNIT_DIR}/nvidia-gpu-reset.target"
GPU_USERS = (
    "nvidia-dcgm.service",
    "nvsm.service",
    "dcgm-exporter.service",
    "kubelet.service",
    "containerd.service",
    "docker.service",
    "libvirtd.service",
    "vgpukit-mdev-restore.service",
    "vgpukit-qos.service",
)

TARGET_TEXT = """\
# Written by vgpukit mig service --install (as mig-parted installs it): GPU users that order
# themselves After= this target start once the MIG configuration is in place.
[Unit]
Description=NVIDIA GPU reset target (MIG configuration applied)
"""


def _value(text: str, what: str) -> str:
    if any(ch in text for ch in '"\\\n') or not text.isprintable():
        raise InvalidInput(f"{what}: quotes, backslashes and control characters cannot go into a unit file")
    return text.replace("%", "%%")


def unit_text(config_file: str, selected: str, hooks_file: str | None, command: list[str]) -> str:
    env = [f'Environment="VGPUKIT_MIG_CONFIG_FILE={_value(config_file, "the config file")}"']
    env.append(f'Environment="VGPUKIT_MIG_SELECTED_CONFIG={_value(selected, "the config name")}"')
    if hooks_file:
        env.append(f'Environment="VGPUKIT_MIG_HOOKS_FILE={_value(hooks_file, "the hooks file")}"')
    exe = " ".join(_value(c, "the vgpukit path") for c in command)
    return "\n".join(
        [
            "# Written by vgpukit mig service --install: re-applies the selected MIG config at boot.",
            "[Unit]",
            "Description=Apply the MIG configuration (vgpukit mig apply)",
            "DefaultDependencies=no",
            "After=local-fs.target systemd-modules-load.service",
            "After=nvidia-persistenced.service nvidia-fabricmanager.service",
            "Before=nvidia-gpu-reset.target " + " ".join(GPU_USERS),
            "",
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes",
            "TimeoutStartSec=480",
            *env,
            f"ExecStart={exe} mig apply",
            "# exit 6: an unusable GPU was left alone, every other GPU applied: the GPU users start",
            "SuccessExitStatus=6",
            "",
            "[Install]",
            "WantedBy=multi-user.target nvidia-gpu-reset.target",
            "",
        ]
    )
