"""NVML return codes as vgpukit errors (each class also carries its exit code)."""

from __future__ import annotations

from ..errors import Busy, DeviceUnusable, InvalidInput, NoCapacity, NotFound, Unsupported, VgpukitError

SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
RESET_REQUIRED = 16
TIMEOUT = 10  # nvmlEventSetWait: no event within the timeout
GPU_IS_LOST = 15  # the GPU fell off the bus or stopped answering
IN_USE = 19
INSUFFICIENT_RESOURCES = 23
UNKNOWN = 999

CODE_NAMES: dict[int, str] = {
    INVALID_ARGUMENT: "INVALID_ARGUMENT",
    NOT_SUPPORTED: "NOT_SUPPORTED",
    NO_PERMISSION: "NO_PERMISSION",
    NOT_FOUND: "NOT_FOUND",
    RESET_REQUIRED: "RESET_REQUIRED",
    TIMEOUT: "TIMEOUT",
    GPU_IS_LOST: "GPU_IS_LOST",
    IN_USE: "IN_USE",
    INSUFFICIENT_RESOURCES: "INSUFFICIENT_RESOURCES",
    UNKNOWN: "UNKNOWN",
}
CODES_BY_NAME = {v: k for k, v in CODE_NAMES.items()}


class NvmlError(VgpukitError):
    """An NVML call failed; ``code`` is the NVML return code."""

    code = UNKNOWN

    def __init__(self, message: str, **kw: object) -> None:
        super().__init__(f"{message}: NVML {CODE_NAMES.get(self.code, str(self.code))}", **kw)  # type: ignore[arg-type]


class NvmlInvalidArgument(NvmlError, InvalidInput):
    code = INVALID_ARGUMENT


class NvmlNotSupported(NvmlError, Unsupported):
    code = NOT_SUPPORTED


class NvmlNotFound(NvmlError, NotFound):
    code = NOT_FOUND


class NvmlInUse(NvmlError, Busy):
    code = IN_USE


class NvmlInsufficientResources(NvmlError, NoCapacity):
    code = INSUFFICIENT_RESOURCES


class NvmlGpuLost(NvmlError, DeviceUnusable):
    """The GPU fell off the bus or stopped answering: the health layer's ``lost`` (exit 6, kind unusable)."""

    code = GPU_IS_LOST


class NvmlUnknown(NvmlError):
    code = UNKNOWN


class NvmlOther(NvmlError):
    """Any other code; ``code`` is set per instance."""

    def __init__(self, message: str, code: int, **kw: object) -> None:
        self.code = code
        super().__init__(message, **kw)


_BY_CODE: dict[int, type[NvmlError]] = {
    INVALID_ARGUMENT: NvmlInvalidArgument,
    NOT_SUPPORTED: NvmlNotSupported,
    NOT_FOUND: NvmlNotFound,
    IN_USE: NvmlInUse,
    INSUFFICIENT_RESOURCES: NvmlInsufficientResources,
    GPU_IS_LOST: NvmlGpuLost,
    UNKNOWN: NvmlUnknown,
}


def nvml_error(code: int, message: str, **kw: object) -> NvmlError:
    cls = _BY_CODE.get(code)
    if cls is None:
        return NvmlOther(message, code, **kw)
    return cls(message, **kw)
