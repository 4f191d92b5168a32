"""A simulated ``nvidia-smi``: the forms vgpukit runs (and a person tries), acting on the simulated driver.

Installed as ``<sim>/usr/bin/nvidia-smi`` (:mod:`vgpukit.sim.driver_files`); the simulated host is
``VGPUKIT_ROOT`` (the host door sets it for every program it runs). The simulator's own facts, as
NVIDIA documents them for the real tool:

* ``-r`` / ``--gpu-reset`` ``-i ID``: refused while anything holds the GPU -- a client process, or
  persistence mode, which counts as one ("In use by another client") -- and on a GPU that is lost
  (fallen off the bus: a reset does not bring it back). A reset destroys the GPU's MIG instances
  (the MIG mode itself stays, a pending one takes effect), clears the volatile ECC counts and the
  recovery action, and takes the GPU's VFs away (as a driver reload does: ``sriov_numvfs`` still says
  how many were configured). The XID history stays (the driver does not forget it).
* ``-pm 0|1 -i ID``: persistence mode off / on. ``--query-gpu=persistence_mode,reset_count
  --format=csv,noheader``: one line per GPU. ``-q -i ID``: the GPU's state, ``-L``: the GPUs.

Exit codes are nvidia-smi's: 0 success, 2 invalid argument, 6 not found, 15 the GPU is lost,
255 another error (a reset refused).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

OK, INVALID, NOT_FOUND, LOST, OTHER = 0, 2, 6, 15, 255
IN_USE = (
    "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA application,"
    " graphics application such as an X server, or a monitoring application such as another instance of"
    " nvidia-smi). Please first kill all processes using these devices and all compute applications running"
    " in the system."
)


def _bus_id(bdf: str) -> str:
    return "0000" + bdf.upper() if len(bdf) == 12 else bdf.upper()


def _select(gpus: list[dict[str, Any]], ident: str | None) -> list[int]:
    if ident is None:
        return list(range(len(gpus)))
    text = ident.strip().lower()
    for i, g in enumerate(gpus):
        bdf = str(g["bdf"]).lower()
        if text in (str(i), bdf, "0000" + bdf, str(g["uuid"]).lower()):
            return [i]
    return []


def _reset(root: Path, index: int) -> tuple[int, str]:
    from ..nvml.errors import NvmlError
    from .nvml import SimNvml
    from .nvml_events import pf_reset
    from .nvml_state import _locked
    from .tree import SimTree

    with _locked(root, write=False) as state:
        g = state["gpus"][index]
        where, bdf = f"GPU {_bus_id(g['bdf'])}", str(g["bdf"])
        if g.get("lost"):
            return LOST, f"Unable to reset {where}: GPU is lost. Reboot the system to recover this GPU"
        busy = bool(g.get("persistence", True))
    try:
        if busy:
            raise NvmlError("persistence mode is on")
        SimNvml(root).reset_gpu(index)  # the MIG instances go, a pending MIG mode takes effect; clients refuse
    except NvmlError:
        return OTHER, f"The following GPUs could not be reset:\n  {where}: In use by another client\n\n{IN_USE}"
    with _locked(root, write=True) as state:
        g = state["gpus"][index]
        for key in ("ecc_corrected", "ecc_uncorrected", "recovery_action"):
            g.pop(key, None)
        g["resets"] = int(g.get("resets", 0)) + 1
    if (SimTree(root).device_dir(bdf) / "sriov_totalvfs").exists():
        pf_reset(root, bdf)  # its VFs go, as after a driver reload (a GPU without SR-IOV has none)
    return OK, f"GPU {_bus_id(bdf)} was successfully reset."


def _persistence(root: Path, indices: list[int], on: bool) -> str:
    from .nvml_state import _locked

    lines = []
    with _locked(root, write=True) as state:
        for i in indices:
            g = state["gpus"][i]
            g["persistence"] = on
            word = "Enabled" if on else "Disabled"
            lines.append(f"{word} persistence mode for GPU {_bus_id(g['bdf'])}.")
    return "\n".join(lines)


def _query(gpus: list[dict[str, Any]], indices: list[int], fields: list[str]) -> tuple[int, str]:
    known: dict[str, Callable[[dict[str, Any]], str]] = {
        "persistence_mode": lambda g: "Enabled" if g.get("persistence", True) else "Disabled",
        "reset_count": lambda g: str(int(g.get("resets", 0))),
        "pci.bus_id": lambda g: _bus_id(g["bdf"]),
        "uuid": lambda g: str(g["uuid"]),
        "index": lambda g: str(gpus.index(g)),
    }
    bad = [f for f in fields if f not in known]
    if bad:
        return INVALID, f'Field "{bad[0]}" is not a valid field to query.'
    return OK, "\n".join(", ".join(known[f](gpus[i]) for f in fields) for i in indices)


def _summary(g: dict[str, Any], i: int) -> str:
    lost = bool(g.get("lost"))
    return "\n".join(
        [
            f"GPU {_bus_id(g['bdf'])}",
            f"    Product Name                          : {g['name']}",
            f"    Minor Number                          : {i}",
            f"    GPU UUID                              : {g['uuid']}",
            f"    Persistence Mode                      : {'Enabled' if g.get('persistence', True) else 'Disabled'}",
            f"    MIG Mode Current                      : {'Enabled' if g.get('mig_current') else 'Disabled'}",
            f"    Volatile Uncorrected ECC              : {int(g.get('ecc_uncorrected', 0))}",
            f"    GPU Recovery Action                   : {int(g.get('recovery_action', 0))}",
            f"    GPU Reset Count                       : {int(g.get('resets', 0))}",
            f"    Lost                                  : {'Yes' if lost else 'No'}",
        ]
    )


def _args(argv: list[str]) -> dict[str, str | None]:
    """The options, in nvidia-smi's spellings (``-i N``, ``--id=N``, ``-pm 0``, ``--persistence-mode=0``)."""
    out: dict[str, str | None] = {}
    names = {"-i": "id", "--id": "id", "-pm": "pm", "--persistence-mode": "pm", "--query-gpu": "query"}
    names |= {"--format": "format"}
    flags = {"-r": "reset", "--gpu-reset": "reset", "-q": "q", "--query": "q", "-L": "list", "--list-gpus": "list"}
    it = iter(argv)
    for arg in it:
        key, eq, value = arg.partition("=")
        if key in names:
            out[names[key]] = value if eq else next(it, None)
        elif arg in flags:
            out[flags[arg]] = ""
        else:
            raise ValueError(arg)
    return out


def main(argv: list[str]) -> int:
    for var in [v for v in os.environ if v.startswith("VGPUKIT_SIM_CRASH_")]:
        del os.environ[var]  # the caller's kill points are the caller's, not this program's
    root = Path(os.environ.get("VGPUKIT_ROOT", "/"))
    from .nvml_state import _locked

    try:
        opts = _args(argv)
    except ValueError as exc:
        print(f"Invalid combination of input arguments: \"{exc}\". Please run 'nvidia-smi -h' for help.")
        return INVALID
    with _locked(root, write=False) as state:
        gpus = [dict(g) for g in state["gpus"]]
    indices = _select(gpus, opts.get("id"))
    if not indices:
        print("No devices were found" if opts.get("id") is None else f"Invalid device id: {opts.get('id')}")
        return NOT_FOUND
    if "reset" in opts:
        rc, out = OK, []
        for i in indices:
            code, text = _reset(root, i)
            rc = rc or code
            out.append(text)
        print("\n".join(out))
        return rc
    if "pm" in opts:
        if opts["pm"] not in ("0", "1"):
            print(f'Invalid value "{opts["pm"]}" for persistence mode.')
            return INVALID
        print(_persistence(root, indices, opts["pm"] == "1"))
        return OK
    if "query" in opts:
        code, text = _query(gpus, indices, [f.strip() for f in str(opts["query"] or "").split(",") if f.strip()])
        print(text)
        return code
    if "list" in opts:
        print("\n".join(f"GPU {i}: {gpus[i]['name']} (UUID: {gpus[i]['uuid']})" for i in indices))
        return OK
    print("\n\n".join(_summary(gpus[i], i) for i in indices))
    return LOST if any(gpus[i].get("lost") for i in indices) else OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
