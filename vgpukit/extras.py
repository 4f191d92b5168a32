"""The optional dependencies (the extras of pyproject.toml) and the one refusal when one is missing.

A command that needs an extra imports its modules when it runs. A missing one is exit 5 naming the
extra to install (``pip install 'vgpukit[k8s]'``), as one line and, with ``--json``, a
``vgpukit.error/v1`` document: :func:`require` where a module is imported on purpose (libvirt), and
the CLI maps any other ``ModuleNotFoundError`` of these modules (the generated gRPC code imports
``grpc`` and ``google.protobuf`` at module level) with :func:`missing`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import Unsupported

# package -> (the distribution providing it, the extra, what else it needs)
MODULES: dict[str, tuple[str, str, str]] = {
    "libvirt": ("libvirt-python", "libvirt", "needs apt-get install libvirt-dev pkg-config"),
    "grpc": ("grpcio", "k8s", ""),
    "google.protobuf": ("protobuf", "k8s", ""),
    "google": ("protobuf", "k8s", ""),  # the namespace itself missing: no google.* at all
    "kubernetes": ("kubernetes", "k8s", ""),
}


def _package(module: str) -> str | None:
    """The entry of MODULES ``module`` belongs to (the longest that is it or a parent of it)."""
    found = [m for m in MODULES if module == m or module.startswith(m + ".")]
    return max(found, key=len) if found else None


def message(module: str) -> str:
    """``libvirt-python is not installed: pip install 'vgpukit[libvirt]' (needs ...)``."""
    dist, extra, note = MODULES[_package(module) or module]
    return f"{dist} is not installed: pip install 'vgpukit[{extra}]'" + (f" ({note})" if note else "")


def missing(exc: ImportError) -> Unsupported | None:
    """The refusal for a failed import of an extra's module; None when the module is no extra's."""
    package = _package(exc.name or "")
    return Unsupported(message(package)) if package else None


def require(module: str) -> ModuleType:
    """Import ``module`` (of an extra), or refuse naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise Unsupported(message(module)) from exc
