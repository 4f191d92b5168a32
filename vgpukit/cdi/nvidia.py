"""What nvidia-ctk injects for an NVIDIA GPU or MIG device, found on the host as nvidia-ctk finds it.

nvidia-ctk (NVIDIA container toolkit, ``nvidia-ctk cdi generate``, ``pkg/nvcdi``) puts the driver's
user space into one spec-wide ``containerEdits`` and each device's nodes into the device:

* the driver version: from the linker cache, ``libcuda.so.<version>`` (else ``libnvidia-ml.so.``)
  that a cached ``libcuda.so.1`` resolves to;
* libraries: every ``*.so.<version>`` in the directories holding the driver's versioned libraries
  and their ``vdpau/`` subdirectories, plus ``libnvidia-nvvm70.so.*``, bind-mounted read-only at the
  same path (``ro, nosuid, nodev, rbind, rprivate``);
* binaries (``nvidia-smi``, ``nvidia-debugdump``, ``nvidia-persistenced``,
  ``nvidia-cuda-mps-control``/``-server``, ``nvidia-imex``/``-ctl``) from the standard ``PATH``
  directories, the GSP firmware ``/lib/firmware/nvidia/<version>/gsp*.bin`` and the IPC sockets
  of nvidia-persistenced, the fabric manager and MPS, where present;
* control nodes ``/dev/nvidia-modeset``, ``/dev/nvidia-uvm-tools``, ``/dev/nvidia-uvm``,
  ``/dev/nvidiactl`` (those present);
* ``createContainer`` hooks of ``nvidia-cdi-hook``: ``create-symlinks`` (``libcuda.so.1::<dir>/libcuda.so``
  ...), ``enable-cuda-compat``, ``update-ldcache --folder <dir>...`` (the ldconfig hook),
  ``disable-device-node-modification``, ``update-application-profile``; env
  ``NVIDIA_CTK_LIBCUDA_DIR`` and ``NVIDIA_VISIBLE_DEVICES=void``;
* per device: ``/dev/nvidia<minor>``, and for a MIG device the GPU-instance and compute-instance
  access nodes ``/dev/nvidia-caps/nvidia-cap<minor>``.

With a host root other than ``/`` (``--root``, a simulated host), every ``hostPath`` is the real path
under it and the container path the path the host sees, as nvidia-ctk's ``--driver-root`` does.
Differences from nvidia-ctk: docs/cdi.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec

from ..cdi_settings import DEFAULT_HOOK, host_path
from ..errors import OutsideRoot
from ..host import NVIDIA_IPC_PATHS, Host
from . import ldcache

MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")
IPC_OPTIONS = (*MOUNT_OPTIONS, "noexec")
CONTROL_NODES = ("nvidia-modeset", "nvidia-uvm-tools", "nvidia-uvm", "nvidiactl")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
IPC_PATHS = NVIDIA_IPC_PATHS
VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)+\Z", re.ASCII)
# libraries whose development link nvidia-ctk makes in the container (target::link)
DOT_SO_LINKS = {"libcuda.so": "libcuda.so.1", "libnvidia-opticalflow.so": "libnvidia-opticalflow.so.1"}


class Edits(msgspec.Struct, frozen=True):
    """CDI ``containerEdits``: env, device nodes, hooks, mounts (as nvidia-ctk orders them)."""

    env: tuple[str, ...] = ()
    nodes: tuple[dict[str, Any], ...] = ()
    hooks: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()

    def __add__(self, other: Edits) -> Edits:
        if not other:
            return self
        seen = {n["path"] for n in self.nodes}
        return Edits(
            self.env + tuple(e for e in other.env if e not in self.env),
            self.nodes + tuple(n for n in other.nodes if n["path"] not in seen),
            self.hooks + other.hooks,
            self.mounts + tuple(m for m in other.mounts if m not in self.mounts),
        )

    def __bool__(self) -> bool:
        return bool(self.env or self.nodes or self.hooks or self.mounts)

    def to_dict(self) -> dict[str, Any]:  # a reshape: nvidia-ctk's keys (deviceNodes), empty parts left out
        out: dict[str, Any] = {}
        parts = (("env", self.env), ("deviceNodes", self.nodes), ("hooks", self.hooks), ("mounts", self.mounts))
        for key, value in parts:
            if value:
                out[key] = [dict(v) if isinstance(v, dict) else v for v in value]
        return out


def node(host: Host, real: Path) -> dict[str, Any]:
    """A device node (``host.dev_node(...)``) as nvidia-ctk writes it: the path the host shows, and the real
    one when the root is not /."""
    shown = host.display(real)
    d: dict[str, Any] = {"path": shown}
    if str(real) != shown:
        d["hostPath"] = str(real)
    return d


def mount(host: Host, path: str, options: tuple[str, ...] = MOUNT_OPTIONS) -> dict[str, Any]:
    return {"hostPath": str(host_path(host, path)), "containerPath": path, "options": list(options)}


def hook(hook_path: str, *args: str) -> dict[str, Any]:
    return {
        "hookName": "createContainer",
        "path": hook_path,
        "args": [os.path.basename(hook_path), *args],
        "env": ["NVIDIA_CTK_DEBUG=false"],
    }


def _resolve(host: Host, path: str) -> str | None:
    """A cached path with its symlinks followed, as the host sees it; None if missing or outside."""
    try:
        real = host.resolve(host_path(host, path))
    except OutsideRoot:
        return None
    return host.display(real) if host.exists(real) else None


class Driver(msgspec.Struct, frozen=True):
    version: str
    lib_dirs: tuple[str, ...]  # directories of the versioned driver libraries (host view)
    libraries: tuple[str, ...]
    files: tuple[str, ...]  # firmware and binaries
    ipc: tuple[str, ...]


def find_driver(host: Host) -> Driver | None:
    """The NVIDIA driver's user space on this host, or None (no versioned libcuda/libnvidia-ml)."""
    cache = ldcache.entries(host)
    version = None
    for prefix in ("libcuda.so.", "libnvidia-ml.so."):
        for e in cache:
            if e.soname.startswith(prefix) and version is None:
                real = _resolve(host, e.path)
                name = os.path.basename(real) if real else ""
                if name.startswith(prefix) and VERSION_RE.match(name[len(prefix) :]):
                    version = name[len(prefix) :]
        if version:
            break
    if version is None:
        return None
    suffix = f".so.{version}"
    lib_dirs: list[str] = []
    for e in cache:
        real = _resolve(host, e.path)
        name = os.path.basename(real) if real else ""
        if real and name.startswith("lib") and name.endswith(suffix) and os.path.dirname(real) not in lib_dirs:
            lib_dirs.append(os.path.dirname(real))
    libraries: list[str] = []
    for d in [*lib_dirs, *(f"{d}/vdpau" for d in lib_dirs)]:
        for name in sorted(host.listdir(host_path(host, d))):
            if name.endswith(suffix) and f"{d}/{name}" not in libraries:
                libraries.append(f"{d}/{name}")
    for d in lib_dirs:
        nvvm70 = [n for n in host.listdir(host_path(host, d)) if n.startswith("libnvidia-nvvm70.so.")]
        libraries += [f"{d}/{n}" for n in nvvm70]
    firmware = f"/lib/firmware/nvidia/{version}"
    files = [f"{firmware}/{n}" for n in sorted(host.listdir(host_path(host, firmware))) if re.match(r"gsp.*\.bin\Z", n)]
    for binary in BINARIES:
        found = next((f"{d}/{binary}" for d in BIN_DIRS if host.is_file(host_path(host, f"{d}/{binary}"))), None)
        if found:
            files.append(found)
    ipc = tuple(p for p in IPC_PATHS if host.exists(host_path(host, p)))
    return Driver(version, tuple(lib_dirs), tuple(libraries), tuple(files), ipc)


def common_edits(host: Host, driver: Driver | None, hook_path: str = DEFAULT_HOOK) -> Edits:
    """The spec-wide edits of an NVIDIA spec: control nodes always; the driver's user space when found."""
    nodes = tuple(node(host, host.dev_node(n)) for n in CONTROL_NODES if host.exists(host.dev_node(n)))
    if driver is None:
        return Edits(env=("NVIDIA_VISIBLE_DEVICES=void",), nodes=nodes)
    links = []
    for lib in driver.libraries:
        d, name = os.path.split(lib)
        for base, target in DOT_SO_LINKS.items():
            if name == f"{base}.{driver.version}":
                links += ["--link", f"{target}::{d}/{base}"]
        if name == f"libGLX_nvidia.so.{driver.version}":
            links += ["--link", f"{name}::{d}/libGLX_indirect.so.0"]
    folders: list[str] = []
    for lib in driver.libraries:
        if os.path.dirname(lib) not in folders:
            folders.append(os.path.dirname(lib))
    hooks = []
    if links:
        hooks.append(hook(hook_path, "create-symlinks", *links))
    hooks.append(hook(hook_path, "enable-cuda-compat", f"--host-driver-version={driver.version}"))
    hooks.append(hook(hook_path, "update-ldcache", *[a for f in folders for a in ("--folder", f)]))
    hooks.append(hook(hook_path, "disable-device-node-modification"))
    hooks.append(hook(hook_path, "update-application-profile"))
    mounts = [mount(host, p) for p in driver.libraries]
    mounts += [mount(host, p, IPC_OPTIONS) for p in driver.ipc]
    mounts += [mount(host, p) for p in driver.files]
    env = (f"NVIDIA_CTK_LIBCUDA_DIR={':'.join(driver.lib_dirs)}", "NVIDIA_VISIBLE_DEVICES=void")
    return Edits(env=env, nodes=nodes, hooks=tuple(hooks), mounts=tuple(mounts))


def gpu_edits(host: Host, minor: int) -> Edits:
    return Edits(nodes=(node(host, host.nvidia_gpu_node(minor)),))


def mig_edits(host: Host, minor: int, gi_cap_minor: int, ci_cap_minor: int) -> Edits:
    return Edits(
        nodes=(
            node(host, host.nvidia_gpu_node(minor)),
            node(host, host.nvidia_cap_node(gi_cap_minor)),
            node(host, host.nvidia_cap_node(ci_cap_minor)),
        )
    )
