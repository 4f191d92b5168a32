"""The ``vgpukit.io/gpu-share`` CDI class: a QoS tenant's capped, time-sliced share of a GPU.

One device per tenant of the QoS configuration (``/etc/vgpukit/qos.yaml`` plus the daemon's runtime
record, as the daemon applies them), named by the tenant. Its edits: the tenant's GPU or MIG device
(the nodes of the ``gpu`` / ``mig`` device its QoS GPU key names; the spec carries the same
driver user space), plus

* ``libvgpukit-cuda.so`` bind-mounted read-only at its host path and ``LD_PRELOAD`` set to it;
* the tenant identity: ``VGPUKIT_CUDA_TENANT``, ``VGPUKIT_QOS_TENANT``, ``VGPUKIT_QOS_GPU`` (the key);
* the tenant's directory ``/run/vgpukit/cuda/<tenant>`` (its ``config`` and the shared ``usage``
  region, read-write) as ``VGPUKIT_CUDA_DIR``, and the daemon's demand socket, where they exist.

A container is one tenant, so this class has no ``all`` device. See docs/cdi.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..cdi_settings import host_path
from ..cuda.region import tenant_dir
from ..errors import VgpukitError
from ..host import Host
from . import nvidia
from .nvidia import Edits

if TYPE_CHECKING:
    from ..cdi_settings import Settings
    from ..nvml import Nvml

RW_OPTIONS = ("rw", "nosuid", "nodev", "rbind", "rprivate")


def tenants(host: Host) -> list[tuple[str, str]]:
    """(GPU key, tenant name) of every tenant the QoS daemon applies (base config + runtime record)."""
    from ..qos.planner import running

    cfg, _ = running(host)
    return [(key, t.name) for key, gpu in sorted(cfg.gpus.items()) for t in gpu.tenants]


def tenant_edits(host: Host, settings: Settings, name: str, key: str | None) -> Edits:
    """A tenant's edits: the library preloaded and mounted, its identity (the QoS GPU ``key`` when it is
    one), its directory and the daemon's demand socket where they exist."""
    directory = tenant_dir(host, name)
    shown_dir = host.display(directory)
    env = [f"LD_PRELOAD={settings.cuda_library}", f"VGPUKIT_CUDA_TENANT={name}"]
    if key is not None:
        env += [f"VGPUKIT_QOS_TENANT={name}", f"VGPUKIT_QOS_GPU={key}"]
    mounts = [nvidia.mount(host, settings.cuda_library)]
    if host.is_dir(directory):
        env.append(f"VGPUKIT_CUDA_DIR={shown_dir}")
        mounts.append(nvidia.mount(host, shown_dir, RW_OPTIONS))
    demand = host.state_dir("qos", "demand.sock")
    if key is not None and host.exists(demand):
        mounts.append(nvidia.mount(host, host.display(demand), RW_OPTIONS))
    return Edits(env=tuple(env), mounts=tuple(mounts))


def collect_share(
    host: Host, nvml: Nvml | None, by_name: dict[str, Edits], settings: Settings, warnings: list[str]
) -> list[tuple[str, Edits]]:
    """(tenant, edits) per shareable tenant; ``by_name``: the edits of the gpu and mig devices by name."""
    from ..naming import GPU, MIG, resolve

    try:
        wanted = tenants(host)
    except VgpukitError as err:
        warnings.append(f"gpu-share: the QoS configuration cannot be read ({err.message}); no tenants")
        return []
    if not wanted:
        return []
    library = host_path(host, settings.cuda_library)
    if not host.is_file(library):
        warnings.append(f"gpu-share: {settings.cuda_library} is missing (see docs/cuda.md); no tenants")
        return []
    out: list[tuple[str, Edits]] = []
    seen: set[str] = set()
    for key, name in wanted:
        try:
            uuid = resolve(host, key, frozenset({GPU, MIG}), nvml=nvml).uuid
        except VgpukitError as err:
            warnings.append(f"gpu-share: tenant {name}: GPU key {key}: {err.message}; skipped")
            continue
        device = by_name.get(uuid or "")
        if device is None:
            warnings.append(f"gpu-share: tenant {name}: {key} is not a whole GPU or MIG device here; skipped")
            continue
        if name in seen:
            warnings.append(f"gpu-share: tenant name {name} is used on two GPUs; only the first is shared")
            continue
        seen.add(name)
        out.append((name, device + tenant_edits(host, settings, name, key)))
    return out
