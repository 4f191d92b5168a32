"""NVML backend over nvidia-ml-py (module ``pynvml``), imported only when used.

Every ``nvml*`` call goes through :class:`Mapped`, which translates ``NVMLError`` by return code
(``NVMLError.value``) into :mod:`vgpukit.nvml.errors`: no call can bypass the mapping. The backend
initialises NVML once and :meth:`RealNvml.close` shuts it down (the CLI closes it when a command ends).
"""

from __future__ import annotations

import ctypes
import importlib
import shutil
import subprocess
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from ..errors import HostIOError, Unsupported
from ..logs import logger
from . import real_events
from .errors import GPU_IS_LOST, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, UNKNOWN, NvmlError, nvml_error
from .model import (
    CiProfile,
    ComputeInstance,
    GiProfile,
    GpuCondition,
    GpuIndex,
    GpuInstance,
    GpuLinks,
    GpuTelemetry,
    NvLink,
    NvmlGpu,
    NvmlProcess,
)

log = logger("vgpukit.nvml")
T = TypeVar("T")
GI_PROFILE_COUNT = 0x12
CI_PROFILE_COUNT = 0x09
_NA = 0xFFFFFFFF
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS of the headers this was written against (Hopper: 18 links)
# nvmlIntNvLinkDeviceType_t
NVLINK_DEVICE_TYPES = {0x00: "gpu", 0x01: "ibmnpu", 0x02: "switch"}
_ABSENT = (NOT_SUPPORTED, INVALID_ARGUMENT, NOT_FOUND)  # no such link / no NVLink at all


def _bdf(pci: Any) -> str:
    bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
    # NVML reports "00000000:3B:00.0"; keep the last 4 domain digits
    dom, rest = bus_id.split(":", 1)
    return f"{int(dom, 16):04x}:{rest.lower()}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _name(value: Any) -> str:
    name = _text(value)
    return name[4:] if name.startswith("MIG ") else name


class Mapped:
    """A pynvml-shaped module whose ``nvml*`` functions raise :class:`NvmlError` instead of NVMLError."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.module, name)
        if not (name.startswith("nvml") and callable(attr)):
            return attr  # ctypes structures and constants
        error = self.module.NVMLError

        def call(*args: Any) -> Any:
            try:
                return attr(*args)
            except error as exc:
                raise nvml_error(int(getattr(exc, "value", UNKNOWN)), name) from exc

        return call


class RealNvml(GpuIndex):
    def __init__(self, pynvml: Any) -> None:
        """``pynvml`` is the module (or a pynvml-shaped one), already initialised."""
        self.n = Mapped(pynvml)
        self._open = True

    @classmethod
    def try_open(cls, module: Any = None) -> RealNvml | None:
        try:
            if module is None:
                module = importlib.import_module("pynvml")
            module.nvmlInit()
        except Exception as exc:  # no library, no driver: the host simply has no NVML
            log.debug("NVML unavailable: %s", exc)
            return None
        return cls(module)

    def close(self) -> None:
        """nvmlShutdown, once (NVML counts nvmlInit calls; every init needs its shutdown)."""
        if not self._open:
            return
        self._open = False
        try:
            self.n.nvmlShutdown()
        except NvmlError as exc:
            log.debug("nvmlShutdown: %s", exc)

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn`` (a mapped nvml function), naming the failure after what we were doing."""
        try:
            return fn(*args)
        except NvmlError as exc:
            raise nvml_error(exc.code, what) from exc

    def condition(self, gpu: int) -> GpuCondition:
        return real_events.condition(self.n, gpu)

    def telemetry(self, gpu: int) -> GpuTelemetry:
        return real_events.telemetry(self.n, gpu)

    def recovery_action(self, gpu: int) -> int | None:
        return real_events.recovery_action(self.n, gpu)

    def watch_events(self, since: dict[int, int] | None = None) -> real_events.RealEventWatcher:
        return real_events.RealEventWatcher(self.n, int(self.n.nvmlDeviceGetCount()))

    def _h(self, gpu: int) -> Any:
        return self._call(f"GPU {gpu}", self.n.nvmlDeviceGetHandleByIndex, gpu)

    # ------------------------------------------------------------------ devices and mode
    def gpus(self) -> list[NvmlGpu]:
        n = self.n
        out = []
        for i in range(n.nvmlDeviceGetCount()):
            bdf = uuid = name = ""
            try:  # a lost GPU may answer GPU_IS_LOST from its handle on: it is listed with what it gave
                h = n.nvmlDeviceGetHandleByIndex(i)
                pci = n.nvmlDeviceGetPciInfo(h)
                bdf = _bdf(pci)
                uuid = _text(n.nvmlDeviceGetUUID(h))
                name = _text(n.nvmlDeviceGetName(h))
                cur, pend = n.nvmlDeviceGetMigMode(h)
                capable = True
            except NvmlError as exc:
                if exc.code == GPU_IS_LOST:
                    out.append(NvmlGpu(i, bdf, uuid, name, False, False, False, None, lost=True))
                    continue
                if not name:
                    raise
                cur, pend, capable = 0, 0, False  # the MIG mode call alone failed: not MIG-capable
            out.append(NvmlGpu(i, bdf, uuid, name, capable, bool(cur), bool(pend), int(pci.pciDeviceId)))
        return out

    def mig_mode(self, gpu: int) -> tuple[bool, bool]:
        cur, pend = self._call(f"MIG mode of GPU {gpu}", self.n.nvmlDeviceGetMigMode, self._h(gpu))
        return bool(cur), bool(pend)

    def set_mig_mode(self, gpu: int, enabled: bool) -> bool:
        status = self._call(f"setting MIG mode on GPU {gpu}", self.n.nvmlDeviceSetMigMode, self._h(gpu), int(enabled))
        return int(status) == 0

    def reset_gpu(self, gpu: int) -> None:
        # NVML has no reset call; nvidia-smi performs it through the driver
        smi = shutil.which("nvidia-smi")
        if smi is None:
            raise Unsupported("cannot reset the GPU: nvidia-smi not found", hint="reset it or reboot, then rerun")
        proc = subprocess.run([smi, "--gpu-reset", "-i", str(gpu)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise HostIOError(f"nvidia-smi --gpu-reset -i {gpu} failed: {(proc.stdout + proc.stderr).strip()}")

    # ------------------------------------------------------------------ GPU instances
    def _placements(self, h: Any, profile_id: int) -> tuple[int, ...]:
        n = self.n
        arr = (n.c_nvmlGpuInstancePlacement_t * 16)()
        count = ctypes.c_uint(16)
        self._call("placements", n.nvmlDeviceGetGpuInstancePossiblePlacements, h, profile_id, arr, ctypes.byref(count))
        return tuple(sorted(int(arr[i].start) for i in range(count.value)))

    def gi_profiles(self, gpu: int) -> list[GiProfile]:
        n, h = self.n, self._h(gpu)
        out = []
        for enum in range(GI_PROFILE_COUNT):
            try:
                info = n.nvmlDeviceGetGpuInstanceProfileInfoV(h, enum, 2)
            except NvmlError:
                continue  # NOT_SUPPORTED / INVALID_ARGUMENT: this GPU has no such profile
            starts = self._placements(h, int(info.id))
            size = _size_of(n, h, int(info.id))
            name = _name(info.name)
            out.append(
                GiProfile(
                    id=int(info.id),
                    enum=enum,
                    name=name,
                    slices=int(info.sliceCount),
                    size=size,
                    memory_mib=int(info.memorySizeMB),
                    sms=int(info.multiprocessorCount),
                    max_count=int(info.instanceCount),
                    starts=starts,
                    media="+me" in name,
                )
            )
        if not out:
            # some drivers answer profile queries only once MIG is on: plan from the shipped table
            from ..errors import NotFound
            from .table import model

            try:
                return list(model(None, _text(n.nvmlDeviceGetName(h))).profiles)
            except NotFound:
                return []
        return out

    def remaining_capacity(self, gpu: int, profile_id: int) -> int:
        return int(
            self._call("remaining capacity", self.n.nvmlDeviceGetGpuInstanceRemainingCapacity, self._h(gpu), profile_id)
        )

    def _gi_handles(self, h: Any) -> list[Any]:
        n = self.n
        out: list[Any] = []
        for p in self.gi_profiles_ids(h):
            arr = (n.c_nvmlGpuInstance_t * 8)()
            count = ctypes.c_uint(0)
            self._call("listing GPU instances", n.nvmlDeviceGetGpuInstances, h, p, arr, ctypes.byref(count))
            out.extend(arr[i] for i in range(count.value))
        return out

    def gi_profiles_ids(self, h: Any) -> list[int]:
        n, ids = self.n, []
        for enum in range(GI_PROFILE_COUNT):
            try:
                ids.append(int(n.nvmlDeviceGetGpuInstanceProfileInfoV(h, enum, 2).id))
            except NvmlError:
                continue
        return ids

    def _mig_uuids(self, h: Any) -> dict[tuple[int, int], str]:
        n, out = self.n, dict[tuple[int, int], str]()
        for i in range(int(n.nvmlDeviceGetMaxMigDeviceCount(h))):
            try:
                mh = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except NvmlError:
                continue
            key = (int(n.nvmlDeviceGetGpuInstanceId(mh)), int(n.nvmlDeviceGetComputeInstanceId(mh)))
            out[key] = _text(n.nvmlDeviceGetUUID(mh))
        return out

    def _gi_record(self, h: Any, gi: Any, uuids: dict[tuple[int, int], str]) -> GpuInstance:
        n = self.n
        info = n.nvmlGpuInstanceGetInfo(gi)
        cis = []
        for ci in self._ci_handles(gi):
            ci_info = n.nvmlComputeInstanceGetInfo(ci)
            cp = n.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, int(ci_info.profileId), 0, 2)
            cis.append(
                ComputeInstance(
                    int(ci_info.id),
                    int(info.id),
                    _ci_enum(n, gi, int(ci_info.profileId)),
                    int(cp.sliceCount),
                    int(ci_info.placement.start),
                    uuids.get((int(info.id), int(ci_info.id)), ""),
                )
            )
        return GpuInstance(
            int(info.id), int(info.profileId), int(info.placement.start), int(info.placement.size), tuple(cis)
        )

    def _ci_handles(self, gi: Any) -> list[Any]:
        n, out = self.n, list[Any]()
        for enum in range(CI_PROFILE_COUNT):
            try:
                cp = n.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, enum, 0, 2)
            except NvmlError:
                continue
            arr = (n.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(0)
            n.nvmlGpuInstanceGetComputeInstances(gi, int(cp.id), arr, ctypes.byref(count))
            out.extend(arr[i] for i in range(count.value))
        return out

    def gpu_instances(self, gpu: int) -> list[GpuInstance]:
        h = self._h(gpu)
        uuids = self._mig_uuids(h)
        return sorted((self._gi_record(h, gi, uuids) for gi in self._gi_handles(h)), key=lambda g: g.id)

    def _gi(self, gpu: int, gi_id: int) -> Any:
        return self._call(f"GPU instance {gi_id}", self.n.nvmlDeviceGetGpuInstanceById, self._h(gpu), gi_id)

    def create_gpu_instance(self, gpu: int, profile_id: int, start: int | None = None) -> GpuInstance:
        n, h = self.n, self._h(gpu)
        what = f"creating GPU instance profile {profile_id} on GPU {gpu}"
        if start is None:
            gi = self._call(what, n.nvmlDeviceCreateGpuInstance, h, profile_id)
        else:
            place = n.c_nvmlGpuInstancePlacement_t()
            place.start, place.size = start, _size_of(n, h, profile_id)
            gi = self._call(what, n.nvmlDeviceCreateGpuInstanceWithPlacement, h, profile_id, ctypes.byref(place))
        return self._gi_record(h, gi, {})

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        self._call(f"destroying GPU instance {gi_id}", self.n.nvmlGpuInstanceDestroy, self._gi(gpu, gi_id))

    # ------------------------------------------------------------------ compute instances
    def ci_profiles(self, gpu: int, gi_id: int) -> list[CiProfile]:
        n, gi = self.n, self._gi(gpu, gi_id)
        out = []
        for enum in range(CI_PROFILE_COUNT):
            try:
                cp = n.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, enum, 0, 2)
            except NvmlError:
                continue
            arr = (n.c_nvmlComputeInstancePlacement_t * 8)()
            count = ctypes.c_uint(8)
            n.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, int(cp.id), arr, ctypes.byref(count))
            name = _name(cp.name)
            out.append(
                CiProfile(
                    enum=enum,
                    name=name,
                    slices=int(cp.sliceCount),
                    max_count=int(cp.instanceCount),
                    starts=tuple(int(arr[i].start) for i in range(count.value)),
                    full=False,
                )
            )
        most = max((c.slices for c in out), default=0)
        return [msgspec.structs.replace(c, full=c.slices == most) for c in out]

    def create_compute_instance(self, gpu: int, gi_id: int, profile: int, start: int | None = None) -> ComputeInstance:
        n, gi = self.n, self._gi(gpu, gi_id)
        cp = self._call("CI profile", n.nvmlGpuInstanceGetComputeInstanceProfileInfoV, gi, profile, 0, 2)
        what = f"creating compute instance {profile} in GI {gi_id}"
        if start is None:
            ci = self._call(what, n.nvmlGpuInstanceCreateComputeInstance, gi, int(cp.id))
        else:
            place = n.c_nvmlComputeInstancePlacement_t()
            place.start, place.size = start, int(cp.sliceCount)
            ci = self._call(
                what, n.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, int(cp.id), ctypes.byref(place)
            )
        info = n.nvmlComputeInstanceGetInfo(ci)
        uuids = self._mig_uuids(self._h(gpu))
        return ComputeInstance(
            int(info.id),
            gi_id,
            profile,
            int(cp.sliceCount),
            int(info.placement.start),
            uuids.get((gi_id, int(info.id)), ""),
        )

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        n, gi = self.n, self._gi(gpu, gi_id)
        ci = self._call(f"compute instance {ci_id}", n.nvmlGpuInstanceGetComputeInstanceById, gi, ci_id)
        self._call(f"destroying compute instance {ci_id} of GI {gi_id}", n.nvmlComputeInstanceDestroy, ci)

    def processes(self, gpu: int) -> list[NvmlProcess]:
        n, h, out = self.n, self._h(gpu), list[NvmlProcess]()
        for getter in (n.nvmlDeviceGetComputeRunningProcesses, n.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                procs = getter(h)
            except NvmlError:
                continue
            for p in procs:
                try:
                    name = _text(n.nvmlSystemGetProcessName(p.pid))
                except NvmlError:
                    name = "?"
                gi = getattr(p, "gpuInstanceId", _NA)
                ci = getattr(p, "computeInstanceId", _NA)
                out.append(
                    NvmlProcess(int(p.pid), name, None if gi == _NA else int(gi), None if ci == _NA else int(ci))
                )
        return out

    # ------------------------------------------------------------------ NVLink and NUMA
    def gpu_links(self) -> dict[int, GpuLinks]:
        count = int(self._call("GPU count", self.n.nvmlDeviceGetCount))
        out = {}
        for i in range(count):
            try:
                out[i] = GpuLinks(tuple(self._nvlinks(i)), self._numa_id(i))
            except NvmlError as exc:
                if exc.code != GPU_IS_LOST:
                    raise
        return out  # a lost GPU is left out: it answers nothing

    def _nvlinks(self, gpu: int) -> list[NvLink]:
        n, h, out = self.n, self._h(gpu), list[NvLink]()
        gpu_bdfs: set[str] | None = None
        for link in range(int(getattr(n, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))):
            try:
                active = n.nvmlDeviceGetNvLinkState(h, link)
            except NvmlError as exc:
                if exc.code not in _ABSENT:
                    raise nvml_error(exc.code, f"NVLink {link} of GPU {gpu}") from exc
                if link == 0 and exc.code == NOT_SUPPORTED:
                    return []  # a GPU without NVLink
                continue
            if not active:
                continue
            remote = _bdf(self._call(f"NVLink {link} of GPU {gpu}", n.nvmlDeviceGetNvLinkRemotePciInfo, h, link))
            try:
                kind = NVLINK_DEVICE_TYPES.get(int(n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)), "unknown")
            except (NvmlError, AttributeError):
                # drivers before r450 have no remote type: a GPU's own address tells it is a GPU
                if gpu_bdfs is None:
                    gpu_bdfs = {g.bdf for g in self.gpus()}
                kind = "gpu" if remote in gpu_bdfs else "switch"
            out.append(NvLink(link, remote, kind))
        return out

    def _numa_id(self, gpu: int) -> int | None:
        h = self._h(gpu)
        try:
            node = int(self.n.nvmlDeviceGetNumaNodeId(h))
        except NvmlError as exc:
            if exc.code in _ABSENT:
                return None
            raise nvml_error(exc.code, f"NUMA node of GPU {gpu}") from exc
        except AttributeError:  # a pynvml without the call
            return None
        return node if node >= 0 else None


def _size_of(n: Any, h: Any, profile_id: int) -> int:
    arr = (n.c_nvmlGpuInstancePlacement_t * 16)()
    count = ctypes.c_uint(16)
    try:
        n.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, arr, ctypes.byref(count))
    except NvmlError as exc:
        raise nvml_error(exc.code, f"placements of profile {profile_id}") from exc
    return int(arr[0].size) if count.value else 0


def _ci_enum(n: Any, gi: Any, ci_profile_id: int) -> int:
    for enum in range(CI_PROFILE_COUNT):
        try:
            if int(n.nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, enum, 0, 2).id) == ci_profile_id:
                return enum
        except NvmlError:
            continue
    return ci_profile_id
