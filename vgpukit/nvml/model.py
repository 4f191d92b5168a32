"""The facade's data types and its interface (what both backends return and implement)."""

from __future__ import annotations

from typing import Protocol

import msgspec


class NvmlGpu(msgspec.Struct, frozen=True):
    """A GPU as NVML enumerates it. ``lost``: NVML answers GPU_IS_LOST for it (it fell off the bus or
    stopped answering): then only ``index`` and what the driver still gave are known (``bdf``, ``uuid``,
    ``name``: "" where it did not say; the MIG mode as last known, off when unknown) and every other
    call on it fails; a whole-host read shows it marked (docs/health.md, "One bad device")."""

    index: int
    bdf: str  # canonical lower-case DDDD:BB:DD.F
    uuid: str  # GPU-...
    name: str
    mig_capable: bool
    mig_current: bool  # current MIG mode
    mig_pending: bool  # pending MIG mode (as NVML reports it: equals current when no change is pending)
    pci_device_id: int | None = None  # (device << 16) | vendor, as NVML's pciDeviceId (0x20B010DE)
    lost: bool = False

    @property
    def mode_change_pending(self) -> bool:
        return self.mig_current != self.mig_pending


class NvLink(msgspec.Struct, frozen=True):
    """One active NVLink of a GPU, as NVML reports it (nvmlDeviceGetNvLinkState = enabled,
    nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlDeviceGetNvLinkRemoteDeviceType)."""

    link: int  # the link's number on its GPU
    remote_bdf: str  # canonical lower-case DDDD:BB:DD.F of the other end (a GPU or an NVSwitch)
    remote_type: str  # "gpu" | "switch" | "ibmnpu" | "unknown"


class GpuLinks(msgspec.Struct, frozen=True):
    """What ``nvidia-smi topo -m`` asks NVML about one GPU."""

    nvlinks: tuple[NvLink, ...]  # active links in link order; () for a GPU without NVLink
    numa_id: int | None  # NUMA node of the GPU's own memory (nvmlDeviceGetNumaNodeId); None: none


class GiProfile(msgspec.Struct, frozen=True):
    """A GPU-instance profile as the device reports it (nvmlGpuInstanceProfileInfo_v2 + placements)."""

    id: int  # device profile id (create/placement calls take this)
    enum: int  # NVML_GPU_INSTANCE_PROFILE_* it was queried with
    name: str  # "3g.20gb"
    slices: int  # compute slices
    size: int  # memory slots a placement occupies
    memory_mib: int
    sms: int
    max_count: int
    starts: tuple[int, ...]  # possible placement starts
    media: bool = False  # "+me": uses the GPU's single media-engine set


class CiProfile(msgspec.Struct, frozen=True):
    enum: int  # NVML_COMPUTE_INSTANCE_PROFILE_* (also the nvidia-smi CI profile id)
    name: str  # "1c.3g.20gb" ("3g.20gb" for the full-size one)
    slices: int
    max_count: int
    starts: tuple[int, ...]
    full: bool  # the default compute instance of its GPU instance (uses all compute slices)


class ComputeInstance(msgspec.Struct, frozen=True):
    id: int
    gi_id: int
    profile: int  # CI profile enum
    slices: int
    start: int
    uuid: str  # MIG-...


class GpuInstance(msgspec.Struct, frozen=True):
    id: int
    profile_id: int
    start: int
    size: int
    compute_instances: tuple[ComputeInstance, ...] = ()


class NvmlProcess(msgspec.Struct, frozen=True):
    """A process or client holding a GPU (gi_id/ci_id set when it runs inside a MIG device)."""

    pid: int
    name: str
    gi_id: int | None = None
    ci_id: int | None = None

    def describe(self) -> str:
        where = f" in GI {self.gi_id}" if self.gi_id is not None else ""
        return f"{self.name} (pid {self.pid}){where}"


EVENT_KINDS = ("xid", "ecc-single", "ecc-double", "clock", "power-source", "lost", "error")


class NvmlEvent(msgspec.Struct, frozen=True):
    """One event of a GPU as an NVML event set delivers it, or a failure the watcher turned into one.

    ``kind``: ``xid`` (``data`` = the XID), ``ecc-single`` / ``ecc-double`` (ECC errors counted),
    ``clock``, ``power-source``, ``lost`` (the GPU stopped answering: NVML_ERROR_GPU_IS_LOST) or
    ``error`` (another NVML failure on this GPU; ``data`` = the NVML code). ``gi``: the GPU instance
    (MIG slice) the driver attributed it to (``nvmlEventData_t.gpuInstanceId``), -1 for none."""

    gpu: int  # NVML index
    kind: str
    data: int = 0
    time: float = 0.0  # seconds since the epoch, when the watcher saw it
    seq: int = 0  # the backend's order (the simulated driver: the line of the GPU's event file)
    gi: int = -1


class GpuCondition(msgspec.Struct, frozen=True):
    """What NVML says of a GPU's health now."""

    lost: bool  # calls on it answer NVML_ERROR_GPU_IS_LOST
    ecc_corrected: int | None  # volatile ECC error counts since the last reset; None: no ECC / not supported
    ecc_uncorrected: int | None


class GpuTelemetry(msgspec.Struct, frozen=True):
    """What a GPU reports of itself now, for monitoring (None: the GPU does not report it).

    NVML calls: nvmlDeviceGetUtilizationRates (``util``, ``mem_util``: percent), nvmlDeviceGetMemoryInfo
    (``fb_used_mib``, ``fb_free_mib``), nvmlDeviceGetPowerUsage (``power_w``, from milliwatts),
    nvmlDeviceGetTemperature (``temp_c``), nvmlDeviceGetTotalEccErrors (volatile and aggregate counts)."""

    util: int | None = None
    mem_util: int | None = None
    fb_used_mib: int | None = None
    fb_free_mib: int | None = None
    power_w: float | None = None
    temp_c: int | None = None
    ecc_sbe_vol: int | None = None
    ecc_dbe_vol: int | None = None
    ecc_sbe_agg: int | None = None
    ecc_dbe_agg: int | None = None


class EventWatcher(Protocol):
    """An event set with every GPU's supported events registered (nvmlEventSetCreate + RegisterEvents)."""

    def wait(self, timeout: float) -> list[NvmlEvent]:
        """The events that came within ``timeout`` seconds (``[]``: none); never raises for a GPU."""
        ...

    def close(self) -> None: ...


class GpuIndex:
    """``index_of`` for a backend: the NVML index of a PCI address, from its own ``gpus()``, looked
    up once (NVML numbers its devices once, when initialised)."""

    _index: dict[str, int] | None = None

    def gpus(self) -> list[NvmlGpu]:
        raise NotImplementedError

    def index_of(self, bdf: str) -> int | None:
        if self._index is None:
            self._index = {g.bdf: g.index for g in self.gpus()}
        return self._index.get(bdf)


class Nvml(Protocol):
    def gpus(self) -> list[NvmlGpu]: ...

    def index_of(self, bdf: str) -> int | None:
        """The NVML index of the GPU at PCI address ``bdf`` (None: not an NVIDIA GPU NVML reports).
        NVML numbers its devices once, when initialised: the facade looks them up once."""
        ...

    def mig_mode(self, gpu: int) -> tuple[bool, bool]:
        """(current, pending); raises NvmlNotSupported on a GPU that is not MIG-capable."""
        ...

    def set_mig_mode(self, gpu: int, enabled: bool) -> bool:
        """Request a mode; True when it is in effect now, False when it waits for a GPU reset."""
        ...

    def reset_gpu(self, gpu: int) -> None: ...

    def gi_profiles(self, gpu: int) -> list[GiProfile]: ...

    def remaining_capacity(self, gpu: int, profile_id: int) -> int: ...

    def gpu_instances(self, gpu: int) -> list[GpuInstance]: ...

    def create_gpu_instance(self, gpu: int, profile_id: int, start: int | None = None) -> GpuInstance: ...

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None: ...

    def ci_profiles(self, gpu: int, gi_id: int) -> list[CiProfile]: ...

    def create_compute_instance(
        self, gpu: int, gi_id: int, profile: int, start: int | None = None
    ) -> ComputeInstance: ...

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None: ...

    def processes(self, gpu: int) -> list[NvmlProcess]: ...

    def gpu_links(self) -> dict[int, GpuLinks]:
        """Every GPU's NVLinks and memory NUMA node, by NVML index (one read of the simulated driver); a
        lost GPU is left out."""
        ...

    def condition(self, gpu: int) -> GpuCondition:
        """The GPU's health as NVML reports it now (lost, volatile ECC counts)."""
        ...

    def telemetry(self, gpu: int) -> GpuTelemetry:
        """Utilization, memory, power, temperature and ECC counts now (raises NvmlError: a lost GPU)."""
        ...

    def recovery_action(self, gpu: int) -> int | None:
        """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (field 230): 0 none, 1 GPU reset, 2 node reboot, 3 drain
        P2P, 4 drain and reset, 5 recover the IMEX domain; None where the driver does not report it."""
        ...

    def watch_events(self, since: dict[int, int] | None = None) -> EventWatcher:
        """An event watcher over every GPU. ``since`` (GPU index -> last ``seq`` seen) lets the simulated
        driver hand over events that came before; a real event set only sees events after it is created."""
        ...

    def close(self) -> None:
        """Release the library (nvmlShutdown); the facade is not used afterwards."""
        ...
