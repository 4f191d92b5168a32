"""A module shaped like ``pynvml`` whose calls are answered by the simulated driver.

It lets the behaviour suite drive :class:`vgpukit.nvml.real.RealNvml` (ctypes arrays, count refs,
info structs, handle objects, NVMLError codes) without a GPU. Only the calls RealNvml makes exist.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml as _real

from vgpukit.nvml.errors import NvmlError
from vgpukit.sim.nvml import SimNvml
from vgpukit.sim.nvml_state import _locked

c_nvmlGpuInstancePlacement_t = _real.c_nvmlGpuInstancePlacement_t
c_nvmlComputeInstancePlacement_t = _real.c_nvmlComputeInstancePlacement_t
c_nvmlGpuInstance_t = ctypes.c_uint64  # handles are encoded integers here
c_nvmlComputeInstance_t = ctypes.c_uint64
NOT_FOUND, NOT_SUPPORTED = 6, 3
EVENT_BITS = {"ecc-single": 0x1, "ecc-double": 0x2, "xid": 0x8, "clock": 0x10, "power-source": 0x80}  # nvml.h


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class Shim:
    def __init__(self, sim_dir: Path, profiles_need_mig: bool = False) -> None:
        self.sim = SimNvml(sim_dir)
        self.profiles_need_mig = profiles_need_mig  # like drivers that answer profile queries only in MIG mode
        self.inits = self.shutdowns = 0  # NVML's init reference count, and how often it was shut down
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(self, name, self._wrap(getattr(self, name)))
        self.NVMLError = NVMLError
        self.c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t
        self.c_nvmlComputeInstancePlacement_t = c_nvmlComputeInstancePlacement_t
        self.c_nvmlGpuInstance_t = c_nvmlGpuInstance_t
        self.c_nvmlComputeInstance_t = c_nvmlComputeInstance_t

    @staticmethod
    def _wrap(fn: Any) -> Any:
        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except NvmlError as exc:
                raise NVMLError(exc.code) from exc

        return call

    # handles: device = ("dev", i); GI = i << 8 | gi; CI = i << 16 | gi << 8 | ci | 1 << 24; MIG = ("mig", i, gi, ci)
    @staticmethod
    def _gi(h: Any) -> tuple[int, int]:
        return int(h) >> 8, int(h) & 0xFF

    @staticmethod
    def _ci(h: Any) -> tuple[int, int, int]:
        v = int(h)
        return (v >> 16) & 0xFF, (v >> 8) & 0xFF, v & 0xFF

    @staticmethod
    def _fill(arr: Any, count_ref: Any, starts: list[int], size: int) -> None:
        for k, s in enumerate(starts):
            arr[k].start, arr[k].size = s, size
        count_ref._obj.value = len(starts)

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        if self.inits == 0:
            raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED
        self.inits -= 1
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.sim.gpus())

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        if i >= len(self.sim.gpus()):
            raise NVMLError(2)
        return ("dev", i)

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        g = self.sim.gpus()[h[1]]
        return SimpleNamespace(busId=("0000" + g.bdf.upper()).encode(), pciDeviceId=g.pci_device_id or 0)

    def _links(self, h: Any) -> list[dict[str, Any]]:
        """The simulated driver's raw link table (inactive links too), as the driver holds it."""
        with _locked(self.sim.sim_dir, write=False) as state:
            return list(state["gpus"][h[1]].get("nvlinks") or [])

    def _link(self, h: Any, link: int) -> dict[str, Any]:
        links = self._links(h)
        if not links:
            raise NVMLError(NOT_SUPPORTED)
        hit = [k for k in links if k["link"] == link]
        if not hit:
            raise NVMLError(2)  # INVALID_ARGUMENT: no such link on this GPU
        return hit[0]

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        return int(self._link(h, link)["active"])

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: Any, link: int) -> Any:
        return SimpleNamespace(busId=("0000" + self._link(h, link)["remote"].upper()).encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: Any, link: int) -> int:
        return {"gpu": 0, "ibmnpu": 1, "switch": 2}.get(self._link(h, link)["type"], 0xFF)

    def nvmlDeviceGetNumaNodeId(self, h: Any) -> int:
        node = self.sim.gpu_links()[h[1]].numa_id
        if node is None:
            raise NVMLError(NOT_SUPPORTED)
        return node

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        if h[0] == "dev":
            self._alive(h)
        if h[0] == "mig":
            gi = next(g for g in self.sim.gpu_instances(h[1]) if g.id == h[2])
            return next(c.uuid for c in gi.compute_instances if c.id == h[3])
        return self.sim.gpus()[h[1]].uuid

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        return self.sim.gpus()[h[1]].name.encode()

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        cur, pend = self.sim.mig_mode(h[1])
        return [int(cur), int(pend)]

    def nvmlDeviceSetMigMode(self, h: Any, mode: int) -> int:
        return 0 if self.sim.set_mig_mode(h[1], bool(mode)) else 16

    def _profile(self, i: int, enum: int) -> Any:
        if self.profiles_need_mig and not self.sim.mig_mode(i)[0]:
            raise NVMLError(NOT_SUPPORTED)
        p = next((p for p in self.sim.gi_profiles(i) if p.enum == enum), None)
        if p is None:
            raise NVMLError(NOT_SUPPORTED)
        return p

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, h: Any, enum: int, version: int = 2) -> Any:
        p = self._profile(h[1], enum)
        return SimpleNamespace(
            id=p.id,
            sliceCount=p.slices,
            instanceCount=p.max_count,
            multiprocessorCount=p.sms,
            memorySizeMB=p.memory_mib,
            name=f"MIG {p.name}".encode(),
        )

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, h: Any, pid: int, arr: Any, count: Any) -> None:
        p = next(p for p in self.sim.gi_profiles(h[1]) if p.id == pid)
        self._fill(arr, count, list(p.starts), p.size)

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, h: Any, pid: int) -> int:
        return self.sim.remaining_capacity(h[1], pid)

    def nvmlDeviceGetGpuInstances(self, h: Any, pid: int, arr: Any, count: Any) -> None:
        gis = [g for g in self.sim.gpu_instances(h[1]) if g.profile_id == pid]
        for k, g in enumerate(gis):
            arr[k] = h[1] << 8 | g.id
        count._obj.value = len(gis)

    def nvmlDeviceGetGpuInstanceById(self, h: Any, gi_id: int) -> int:
        if not any(g.id == gi_id for g in self.sim.gpu_instances(h[1])):
            raise NVMLError(NOT_FOUND)
        return h[1] << 8 | gi_id

    def nvmlDeviceCreateGpuInstance(self, h: Any, pid: int) -> int:
        return h[1] << 8 | self.sim.create_gpu_instance(h[1], pid).id

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, h: Any, pid: int, place: Any) -> int:
        return h[1] << 8 | self.sim.create_gpu_instance(h[1], pid, place._obj.start).id

    def nvmlGpuInstanceGetInfo(self, gih: Any) -> Any:
        i, gi_id = self._gi(gih)
        g = next(g for g in self.sim.gpu_instances(i) if g.id == gi_id)
        return SimpleNamespace(id=g.id, profileId=g.profile_id, placement=SimpleNamespace(start=g.start, size=g.size))

    def nvmlGpuInstanceDestroy(self, gih: Any) -> None:
        self.sim.destroy_gpu_instance(*self._gi(gih))

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, gih: Any, enum: int, eng: int, version: int = 2) -> Any:
        cp = next((c for c in self.sim.ci_profiles(*self._gi(gih)) if c.enum == enum), None)
        if cp is None:
            raise NVMLError(NOT_SUPPORTED)
        return SimpleNamespace(
            id=cp.enum, sliceCount=cp.slices, instanceCount=cp.max_count, name=f"MIG {cp.name}".encode()
        )

    def nvmlGpuInstanceGetComputeInstancePossiblePlacements(self, gih: Any, pid: int, arr: Any, count: Any) -> None:
        cp = next(c for c in self.sim.ci_profiles(*self._gi(gih)) if c.enum == pid)
        self._fill(arr, count, list(cp.starts), cp.slices)

    def _ci_handle(self, i: int, gi_id: int, ci_id: int) -> int:
        return 1 << 24 | i << 16 | gi_id << 8 | ci_id

    def nvmlGpuInstanceGetComputeInstances(self, gih: Any, pid: int, arr: Any, count: Any) -> None:
        i, gi_id = self._gi(gih)
        gi = next(g for g in self.sim.gpu_instances(i) if g.id == gi_id)
        cis = [c for c in gi.compute_instances if c.profile == pid]
        for k, c in enumerate(cis):
            arr[k] = self._ci_handle(i, gi_id, c.id)
        count._obj.value = len(cis)

    def nvmlGpuInstanceCreateComputeInstance(self, gih: Any, pid: int) -> int:
        i, gi_id = self._gi(gih)
        return self._ci_handle(i, gi_id, self.sim.create_compute_instance(i, gi_id, pid).id)

    def nvmlGpuInstanceCreateComputeInstanceWithPlacement(self, gih: Any, pid: int, place: Any) -> int:
        i, gi_id = self._gi(gih)
        return self._ci_handle(i, gi_id, self.sim.create_compute_instance(i, gi_id, pid, place._obj.start).id)

    def nvmlGpuInstanceGetComputeInstanceById(self, gih: Any, ci_id: int) -> int:
        i, gi_id = self._gi(gih)
        return self._ci_handle(i, gi_id, ci_id)

    def nvmlComputeInstanceGetInfo(self, cih: Any) -> Any:
        i, gi_id, ci_id = self._ci(cih)
        gi = next(g for g in self.sim.gpu_instances(i) if g.id == gi_id)
        c = next(c for c in gi.compute_instances if c.id == ci_id)
        return SimpleNamespace(id=c.id, profileId=c.profile, placement=SimpleNamespace(start=c.start, size=c.slices))

    def nvmlComputeInstanceDestroy(self, cih: Any) -> None:
        self.sim.destroy_compute_instance(*self._ci(cih))

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, index: int) -> Any:
        devs = [("mig", h[1], g.id, c.id) for g in self.sim.gpu_instances(h[1]) for c in g.compute_instances]
        if index >= len(devs):
            raise NVMLError(NOT_FOUND)
        return devs[index]

    def nvmlDeviceGetGpuInstanceId(self, mh: Any) -> int:
        return int(mh[2])

    def nvmlDeviceGetComputeInstanceId(self, mh: Any) -> int:
        return int(mh[3])

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        na = 0xFFFFFFFF
        return [
            SimpleNamespace(
                pid=p.pid,
                gpuInstanceId=na if p.gi_id is None else p.gi_id,
                computeInstanceId=na if p.ci_id is None else p.ci_id,
            )
            for p in self.sim.processes(h[1])
        ]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: Any) -> list[Any]:
        return []

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        for g in self.sim.gpus():
            for p in self.sim.processes(g.index):
                if p.pid == pid:
                    return p.name.encode()
        raise NVMLError(NOT_FOUND)

    # ------------------------------------------------------------------ events and health (vgpukit health)
    def _alive(self, h: Any) -> None:
        if self.sim.condition(h[1]).lost:
            raise NVMLError(15)  # NVML_ERROR_GPU_IS_LOST

    def nvmlDeviceGetTotalEccErrors(self, h: Any, error_type: int, counter: int) -> int:
        self._alive(h)
        if counter == 1:  # NVML_AGGREGATE_ECC
            t = self.sim.telemetry(h[1])
            return int((t.ecc_sbe_agg if error_type == 0 else t.ecc_dbe_agg) or 0)
        c = self.sim.condition(h[1])
        return int((c.ecc_corrected if error_type == 0 else c.ecc_uncorrected) or 0)

    # ------------------------------------------------------------------ monitoring (vgpukit exporter), NVML's units
    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        self._alive(h)
        t = self.sim.telemetry(h[1])
        return SimpleNamespace(gpu=t.util, memory=t.mem_util)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        self._alive(h)
        t = self.sim.telemetry(h[1])
        used, free = (t.fb_used_mib or 0) << 20, (t.fb_free_mib or 0) << 20
        return SimpleNamespace(total=used + free, used=used, free=free)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        self._alive(h)
        return round((self.sim.telemetry(h[1]).power_w or 0) * 1000)  # milliwatts

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        self._alive(h)
        return int(self.sim.telemetry(h[1]).temp_c or 0)

    def nvmlDeviceGetSupportedEventTypes(self, h: Any) -> int:
        self._alive(h)
        return 0x1 | 0x2 | 0x4 | 0x8 | 0x10  # no power-source change on these boards

    def nvmlEventSetCreate(self) -> Any:
        return SimpleNamespace(watcher=self.sim.watch_events(None), registered={}, queue=[])

    def nvmlDeviceRegisterEvents(self, h: Any, mask: int, event_set: Any) -> None:
        self._alive(h)
        event_set.registered[h[1]] = mask

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        if not event_set.queue:
            event_set.queue = event_set.watcher.wait(timeout_ms / 1000)
        while event_set.queue:
            e = event_set.queue.pop(0)
            if e.kind == "lost":
                raise NVMLError(15)
            bit = EVENT_BITS.get(e.kind, 0)
            if bit & event_set.registered.get(e.gpu, 0):
                return SimpleNamespace(device=("dev", e.gpu), eventType=bit, eventData=e.data)
        raise NVMLError(10)  # NVML_ERROR_TIMEOUT

    def nvmlDeviceGetIndex(self, h: Any) -> int:
        return int(h[1])

    def nvmlEventSetFree(self, event_set: Any) -> None:
        event_set.watcher.close()
