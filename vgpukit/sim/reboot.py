"""``vgpukit sim reboot``: the simulated host reboots (docs/simulator.md, "Reboot").

What a reboot clears and keeps is the simulator's own fact, as on a real host: the kernel's state is
built again from the profile (``/sys``: no VFs, no mdevs, every device on the driver the profile
gives it, ``driver_override`` empty; ``/proc``, ``/dev``, ``/run`` fresh; simulated holder processes
and NVML clients gone, injected faults cleared, a lost GPU back), then the profile's boot writes run,
as at ``sim init``. The disk stays: ``/etc`` (mdevctl's definitions, vgpukit's configs, systemd
units), ``/var``, ``/usr``, ``/lib``... And the GPUs' MIG mode stays (NVML keeps it across a reboot;
a pending mode is applied, as a reset applies it), while their GPU and compute instances are gone.
Nothing else runs at boot: starting the ``auto`` mdevs or applying a host config is what the boot
units do (``vgpukit mdev start --all``, ``vgpukit apply``), run by hand on a simulated host.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import Unsupported
from .build import builtin_profiles, init_sim
from .nvml import SimNvml
from .state import read_state, sim_meta_dir
from .tree import CHAR_DEVICES_MARK

DISK = ("etc", "var", "usr", "lib", "lib64", "opt", "home", "root", "srv", "boot")  # what a reboot keeps


def reboot(root: Path) -> dict[str, Any]:
    """Reboot the simulated host at ``root``; what it kept and cleared, for the front end."""
    meta = sim_meta_dir(root)
    info = read_state(root, meta / "sim.json")
    profile = str(info.get("profile")) if isinstance(info, dict) else ""
    if profile not in builtin_profiles():
        raise Unsupported(
            f"the simulated host was built from a profile file ({profile!r}): a reboot rebuilds it from its"
            " profile, which only a built-in one names",
            hint="sim init it again from the file",
        )
    before = SimNvml(root)
    try:
        mig = {g.bdf: g.mig_pending for g in before.gpus() if g.mig_capable}  # the mode each boots in
    finally:
        before.close()
    char = (meta / CHAR_DEVICES_MARK).exists()
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{root.name}.reboot-") as tmp:
        kept = [d for d in DISK if (root / d).is_dir()]
        for d in kept:  # the disk moves aside (one rename each), the rest is built again
            os.rename(root / d, Path(tmp) / d)
        try:
            init_sim(root, profile, force=True, char_devices=char)
        finally:
            for d in kept:
                if (root / d).exists():
                    shutil.rmtree(root / d)
                os.rename(Path(tmp) / d, root / d)
    after = SimNvml(root)
    try:
        for g in after.gpus():
            if mig.get(g.bdf):  # the simulated driver's own path: the mode set, applied by a reset
                after.set_mig_mode(g.index, True)
                after.reset_gpu(g.index)
    finally:
        after.close()
    return {"root": str(root), "profile": profile, "kept": [f"/{d}" for d in kept],
            "mig": sorted(b for b, on in mig.items() if on)}  # fmt: skip
