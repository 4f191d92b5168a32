"""NVML backend over nvidia-ml-py (module ``pynvml``), imported only when used."""

from __future__ import annotations

import logging
from typing import Any

from . import NvmlGpu

log = logging.getLogger("vgpukit.nvml")


def _bdf(pci: Any) -> str:
    bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
    # NVML reports "00000000:3B:00.0"; keep the last 4 domain digits
    dom, rest = bus_id.split(":", 1)
    return f"{int(dom, 16):04x}:{rest.lower()}"


class RealNvml:
    def __init__(self, pynvml: Any) -> None:
        self.n = pynvml

    @classmethod
    def try_open(cls) -> RealNvml | None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # no library, no driver: the host simply has no NVML
            log.debug("NVML unavailable: %s", exc)
            return None
        return cls(pynvml)

    def gpus(self) -> list[NvmlGpu]:
        n = self.n
        out = []
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            name = n.nvmlDeviceGetName(h)
            uuid = n.nvmlDeviceGetUUID(h)
            try:
                cur, pend = n.nvmlDeviceGetMigMode(h)
                capable = True
            except n.NVMLError:
                cur, pend, capable = 0, 0, False
            out.append(
                NvmlGpu(i, _bdf(n.nvmlDeviceGetPciInfo(h)), str(uuid), str(name), capable, bool(cur), bool(pend))
            )
        return out
