"""The pynvml backend: every NVML failure surfaces as a vgpukit error, and NVML is shut down when done."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Run
from vgpukit.errors import VgpukitError
from vgpukit.nvml.errors import NvmlError, NvmlUnknown
from vgpukit.nvml.real import RealNvml

from .mig_helpers import enable_now
from .sim_pynvml import NVMLError, Shim


def _exercise(n: RealNvml) -> None:
    """Every facade call, on a GPU with MIG on, one GPU instance and one compute instance."""
    gpus = n.gpus()
    n.mig_mode(0)
    profiles = n.gi_profiles(0)
    p = next(p for p in profiles if p.slices == 3)
    n.remaining_capacity(0, p.id)
    gi = n.create_gpu_instance(0, p.id, p.starts[0])
    gi2 = n.create_gpu_instance(0, p.id)
    cps = n.ci_profiles(0, gi.id)
    ci = n.create_compute_instance(0, gi.id, cps[0].enum)
    ci2 = n.create_compute_instance(0, gi.id, cps[0].enum, ci.start + cps[0].slices)
    n.gpu_instances(0)
    n.processes(0)
    n.destroy_compute_instance(0, gi.id, ci2.id)
    n.destroy_compute_instance(0, gi.id, ci.id)
    n.destroy_gpu_instance(0, gi2.id)
    n.destroy_gpu_instance(0, gi.id)
    n.set_mig_mode(0, True)
    n.gpu_links()
    assert gpus


def _nvml_functions(shim: Shim) -> list[str]:
    return sorted(name for name in dir(shim) if name.startswith("nvml") and name not in ("nvmlInit", "nvmlShutdown"))


def test_every_failing_nvml_call_is_a_vgpukit_error(sim_factory: Callable[..., Path]) -> None:
    sim = sim_factory(["A100-SXM4-40GB"])
    enable_now(sim, 0)
    state = sim / ".vgpukit-sim" / "nvml.json"  # one NVLink, so every NVLink call is made
    doc = json.loads(state.read_text())
    doc["gpus"][0]["nvlinks"] = [{"link": 0, "active": True, "remote": "0000:c4:00.0", "type": "switch"}]
    state.write_text(json.dumps(doc))
    names = _nvml_functions(Shim(sim))
    assert len(names) > 25
    raw: list[str] = []
    for name in names:
        shim = Shim(sim)

        def fail(*_args: Any) -> Any:
            raise NVMLError(999)

        setattr(shim, name, fail)
        try:
            _exercise(RealNvml(shim))
        except NVMLError:
            raw.append(name)
        except (VgpukitError, IndexError, StopIteration):  # mapped, or a swallowed failure left less to do
            pass
        for gi in Shim(sim).sim.gpu_instances(0):  # the next round starts from a clean GPU
            for c in gi.compute_instances:
                Shim(sim).sim.destroy_compute_instance(0, gi.id, c.id)
            Shim(sim).sim.destroy_gpu_instance(0, gi.id)
    assert raw == [], f"NVMLError escaped the facade's mapping from: {raw}"


def test_an_unknown_failure_keeps_its_code_and_names_the_call(sim_factory: Callable[..., Path]) -> None:
    shim = Shim(sim_factory(["A100-SXM4-40GB"]))

    def fail(*_args: Any) -> Any:
        raise NVMLError(999)

    shim.nvmlDeviceGetCount = fail  # type: ignore[method-assign]
    with pytest.raises(NvmlUnknown) as err:
        RealNvml(shim).gpus()
    assert err.value.code == 999 and "nvmlDeviceGetCount" in str(err.value)


def test_close_shuts_nvml_down_once(sim_factory: Callable[..., Path]) -> None:
    shim = Shim(sim_factory(["A100-SXM4-40GB"]))
    n = RealNvml.try_open(shim)
    assert n is not None and shim.inits == 1
    n.close()
    n.close()
    assert (shim.inits, shim.shutdowns) == (0, 1)


@pytest.mark.parametrize(
    "args", [("mig", "status", "--json"), ("mig", "profiles", "0"), ("mig", "destroy", "0", "--gi", "99")]
)
def test_the_cli_shuts_nvml_down_when_a_command_ends(
    sim_factory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, run_cli: Run, args: tuple[str, ...]
) -> None:
    """Through the real backend (the pynvml shim installed as ``pynvml``), success or failure."""
    sim = sim_factory(["A100-SXM4-40GB"])
    enable_now(sim, 0)
    shim = Shim(sim)
    monkeypatch.setitem(sys.modules, "pynvml", shim)
    result = run_cli(None, "--root", str(sim), *args)
    assert result.exit_code in (0, 3), result.stderr
    assert (shim.inits, shim.shutdowns) == (0, 1)


def test_nvml_error_is_a_vgpukit_error() -> None:
    assert issubclass(NvmlError, VgpukitError)
