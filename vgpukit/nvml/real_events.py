"""The real backend's health calls: an NVML event set over every GPU and the ECC counters.

Used by :class:`vgpukit.nvml.real.RealNvml` (``condition``, ``watch_events``); ``n`` is its mapped
pynvml module (NVML failures arrive as :class:`~vgpukit.nvml.errors.NvmlError` with the code).
"""

from __future__ import annotations

import time
from typing import Any

from ..logs import logger
from .errors import GPU_IS_LOST, NOT_SUPPORTED, TIMEOUT, NvmlError
from .model import GpuCondition, GpuTelemetry, NvmlEvent

NO_INSTANCE = 0xFFFFFFFF  # nvmlEventData_t.gpuInstanceId of an event not in a MIG slice
log = logger("vgpukit.nvml")

# nvmlEventType* bits (nvml.h) and the kind each becomes
EVENT_BITS = {0x1: "ecc-single", 0x2: "ecc-double", 0x8: "xid", 0x10: "clock", 0x80: "power-source"}
WANTED = sum(EVENT_BITS)
CORRECTED, UNCORRECTED, VOLATILE, AGGREGATE = 0, 1, 0, 1  # nvmlMemoryErrorType_t, nvmlEccCounterType_t
TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU


RECOVERY_ACTION_FIELD = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml.h)


def recovery_action(n: Any, gpu: int) -> int | None:
    """The driver's recovery action for the GPU (field 230: 0 none, 1 GPU reset, 2 node reboot, 3 drain
    P2P, 4 drain and reset, 5 recover the IMEX domain); None where the driver or library lacks it."""
    try:
        h = n.nvmlDeviceGetHandleByIndex(gpu)
        values = n.nvmlDeviceGetFieldValues(h, [RECOVERY_ACTION_FIELD])
    except (NvmlError, AttributeError):  # an older pynvml has no field values; a lost GPU answers none
        return None
    v = values[0] if values else None
    if v is None or int(getattr(v, "nvmlReturn", 1)) != 0:
        return None
    return int(v.value.uiVal)


def condition(n: Any, gpu: int) -> GpuCondition:
    try:
        h = n.nvmlDeviceGetHandleByIndex(gpu)
        n.nvmlDeviceGetUUID(h)  # a lost GPU answers GPU_IS_LOST here already
    except NvmlError as exc:
        if exc.code == GPU_IS_LOST:
            return GpuCondition(True, None, None)
        raise
    counts: list[int | None] = []
    for kind in (CORRECTED, UNCORRECTED):
        try:
            counts.append(int(n.nvmlDeviceGetTotalEccErrors(h, kind, VOLATILE)))
        except NvmlError as exc:
            if exc.code == GPU_IS_LOST:
                return GpuCondition(True, None, None)
            counts.append(None)  # no ECC on this board, or ECC off
    return GpuCondition(False, counts[0], counts[1])


def telemetry(n: Any, gpu: int) -> GpuTelemetry:
    """One GPU's monitoring values; a value the board does not report (NOT_SUPPORTED...) is None; a
    lost GPU raises (the health layer reports it)."""
    h = n.nvmlDeviceGetHandleByIndex(gpu)

    def ask(fn: Any, *args: Any) -> Any:
        try:
            return fn(h, *args)
        except NvmlError as exc:
            if exc.code == GPU_IS_LOST:
                raise
            return None

    util, mem, power = (
        ask(n.nvmlDeviceGetUtilizationRates),
        ask(n.nvmlDeviceGetMemoryInfo),
        ask(n.nvmlDeviceGetPowerUsage),
    )
    ecc = {
        (kind, counter): ask(n.nvmlDeviceGetTotalEccErrors, kind, counter)
        for kind in (CORRECTED, UNCORRECTED)
        for counter in (VOLATILE, AGGREGATE)
    }
    mib = 1 << 20
    return GpuTelemetry(
        util=None if util is None else int(util.gpu),
        mem_util=None if util is None else int(util.memory),
        fb_used_mib=None if mem is None else int(mem.used) // mib,
        fb_free_mib=None if mem is None else int(mem.free) // mib,
        power_w=None if power is None else int(power) / 1000,
        temp_c=ask(n.nvmlDeviceGetTemperature, TEMPERATURE_GPU),
        ecc_sbe_vol=ecc[CORRECTED, VOLATILE],
        ecc_dbe_vol=ecc[UNCORRECTED, VOLATILE],
        ecc_sbe_agg=ecc[CORRECTED, AGGREGATE],
        ecc_dbe_agg=ecc[UNCORRECTED, AGGREGATE],
    )


class RealEventWatcher:
    """nvmlEventSetCreate, nvmlDeviceRegisterEvents per GPU (the supported subset), nvmlEventSetWait_v2."""

    def __init__(self, n: Any, count: int) -> None:
        self.n = n
        self.count = count
        self.pending: list[NvmlEvent] = []  # failures found while registering, delivered by the first wait
        self.lost: set[int] = set()
        self.set = n.nvmlEventSetCreate()
        for gpu in range(count):
            try:
                h = n.nvmlDeviceGetHandleByIndex(gpu)
                mask = int(n.nvmlDeviceGetSupportedEventTypes(h)) & WANTED
                if mask:
                    n.nvmlDeviceRegisterEvents(h, mask, self.set)
            except NvmlError as exc:
                if exc.code == NOT_SUPPORTED:
                    continue
                self._failed(gpu, exc.code)

    def _failed(self, gpu: int, code: int) -> None:
        if code == GPU_IS_LOST:
            if gpu in self.lost:
                return
            self.lost.add(gpu)
            self.pending.append(NvmlEvent(gpu, "lost", 0, time.time()))
        else:
            self.pending.append(NvmlEvent(gpu, "error", code, time.time()))

    def wait(self, timeout: float) -> list[NvmlEvent]:
        if self.pending:
            out, self.pending = self.pending, []
            return out
        try:
            data = self.n.nvmlEventSetWait_v2(self.set, max(0, int(timeout * 1000)))
        except NvmlError as exc:
            if exc.code == TIMEOUT:
                return []
            if exc.code == GPU_IS_LOST:  # which one: ask each
                for gpu in range(self.count):
                    if condition(self.n, gpu).lost:
                        self._failed(gpu, GPU_IS_LOST)
            else:
                log.debug("nvmlEventSetWait_v2: %s", exc)
            out, self.pending = self.pending, []
            return out
        gpu = int(self.n.nvmlDeviceGetIndex(data.device))
        kind = EVENT_BITS.get(int(data.eventType), "error")
        gi = int(getattr(data, "gpuInstanceId", NO_INSTANCE))  # the MIG slice, where the driver names one
        return [NvmlEvent(gpu, kind, int(data.eventData), time.time(), gi=gi if gi != NO_INSTANCE else -1)]

    def close(self) -> None:
        try:
            self.n.nvmlEventSetFree(self.set)
        except NvmlError as exc:
            log.debug("nvmlEventSetFree: %s", exc)
