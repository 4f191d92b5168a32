"""Wheel build hook: compile libvgpukit-cuda.so (contrib/cuda) with the build machine's C compiler.

The library is shared data of the wheel: it installs at ``<prefix>/lib/vgpukit/libvgpukit-cuda.so``,
which is the documented path (``/usr/lib/vgpukit/``) when the prefix is ``/usr`` (the Debian package)
and ``$VIRTUAL_ENV/lib/vgpukit/`` in a virtual environment (docs/cuda.md). The wheel is therefore
platform-tagged (``py3-none-<platform>``): the Python code is pure, the library is not.
Editable installs (``pip install -e``, scripts/setup.sh) skip it: setup.sh builds ``build/`` itself.
``VGPUKIT_NO_CUDA=1`` builds a pure wheel without the library (a machine without a compiler).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

LIBRARY = "libvgpukit-cuda.so"


class CudaLibraryHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "vgpukit-cuda"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable" or os.environ.get("VGPUKIT_NO_CUDA") == "1":
            return
        source = Path(self.root) / "contrib" / "cuda"
        if shutil.which(os.environ.get("CC", "cc")) is None or shutil.which("make") is None:
            raise RuntimeError(
                "building the vgpukit wheel compiles libvgpukit-cuda.so: install a C compiler and make "
                "(Debian: apt-get install gcc make), or set VGPUKIT_NO_CUDA=1 for a wheel without it"
            )
        self._out = tempfile.mkdtemp(prefix="vgpukit-cuda-")
        subprocess.run(["make", "-s", "-C", str(source), f"O={self._out}"], check=True)
        built = os.path.join(self._out, LIBRARY)
        build_data["shared_data"][built] = f"lib/vgpukit/{LIBRARY}"
        build_data["pure_python"] = False
        build_data["tag"] = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        out = getattr(self, "_out", None)
        if out:
            shutil.rmtree(out, ignore_errors=True)
