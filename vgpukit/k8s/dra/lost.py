"""What the plugin publishes of a GPU the health layer finds unusable, so that the pods using it see the
taint (``--unhealthy-effect NoExecute``: Kubernetes evicts them) rather than their devices vanishing.

* A GPU NVML still answers for (an uncorrected ECC error, a fatal AER error) offers what it offers when
  healthy, every device tainted: its part (:mod:`.partitions`: its counter set and the devices consuming
  it, the whole GPU on Hopper, the MIG slices it could hold and those claims made; its vGPUs made on
  demand) as the static devices are (:func:`.slices.taint`).
* A GPU it cannot read (lost: fell off the bus, XID 79) keeps the part last published for it (:class:`Kept`),
  every device tainted, until it answers again.
* After a restart nothing was published for a lost GPU: the devices claims hold on it are known from the
  claims' records (each prepared device with its PCI function, :mod:`.claims`) and the made records
  (:mod:`.ondemand`: the GPU of each MIG slice and vGPU made for a claim), and published as devices of their
  own, tainted (:func:`claimed_entries`): the name the scheduler allocated is what the eviction matches.

Where the cluster takes no taints (``--device-taints off``, or the API server drops them) an unusable
GPU's part is left out, as its static devices are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .devices import named_function
from .slices import taint

if TYPE_CHECKING:
    from ...engine.env import Env

Part = dict[str, Any]


def gpu_of(key: str) -> str | None:
    """The GPU a part belongs to: its counter set is named after the GPU's device (``gpu-0000-03-00-0``,
    ``gpu-0000-3b-00-0-vgpu``)."""
    return named_function(key)


def _tainted(part: Part, effect: str) -> Part:
    devices = [d if d.get("taints") else taint(d, effect) for d in part.get("devices") or []]
    return {**part, "devices": devices}


def mark(parts: dict[str, Part], sick: dict[str, str], tainted: bool, effect: str) -> dict[str, Part]:
    """The parts, each of an unusable GPU with every device tainted (``tainted``), or left out."""
    out: dict[str, Part] = {}
    for key, part in parts.items():
        if (gpu_of(key) or "") not in sick:
            out[key] = part
        elif tainted:
            out[key] = _tainted(part, effect)
    return out


@dataclass
class Kept:
    """The parts last published, by counter set name: a lost GPU's are published again from here."""

    parts: dict[str, Part] = field(default_factory=dict)

    def carry(self, parts: dict[str, Part], sick: dict[str, str], tainted: bool, effect: str) -> dict[str, Part]:
        """``parts`` with the last part of each unusable GPU that has none now (its GPU did not answer),
        every device tainted; remembered for the next time."""
        out = dict(parts)
        if tainted:
            for key, part in self.parts.items():
                if key not in out and (gpu_of(key) or "") in sick:
                    out[key] = _tainted(part, effect)
        self.parts = out
        return out


def _kind(name: str) -> str:
    base = name.removeprefix("shared-")
    kind = "mig" if "-mig-" in base else "vgpu" if "-vgpu-" in base else base.partition("-")[0]
    return ("shared-" if base != name else "") + kind


def claimed(env: Env) -> dict[str, dict[str, Any]]:
    """Every device a claim on this node holds (prepared or being prepared), by the name the scheduler
    allocated: ``function`` (the PCI function whose health is the device's, "" when unknown) and, for one
    made on demand, its made record's entry (``made``)."""
    from ...node.claimed import record_docs
    from .ondemand import all_made

    out: dict[str, dict[str, Any]] = {}
    for _uid, doc in record_docs(env.host):
        functions = {
            str(d.get("device")): str(d.get("function") or "")
            for d in doc.get("devices") or []
            if isinstance(d, dict) and isinstance(d.get("device"), str)
        }
        for r in doc.get("results") or []:
            name = r.get("device") if isinstance(r, dict) else None
            if isinstance(name, str) and name:
                base = name.removeprefix("shared-")
                fn = functions.get(name) or named_function(base) or ""
                out.setdefault(name, {"function": fn})
    for m in all_made(env):
        name = str(m.get("device", ""))
        if name:
            out[name] = {"function": str(m.get("gpu", "")), "made": m}
    return out


def claimed_entries(env: Env, published: set[str], sick: dict[str, str], effect: str) -> list[dict[str, Any]]:
    """A tainted device for each device a claim holds on an unusable function that is not published
    otherwise (a lost GPU's, after a restart): its name, kind, PCI function and, for one made on demand,
    what its made record says."""
    out: list[dict[str, Any]] = []
    for name, held in sorted(claimed(env).items()):
        fn = held["function"]
        if name in published or not fn or fn not in sick:
            continue
        kind = _kind(name)
        attrs: dict[str, Any] = {"kind": {"string": "mdev" if kind == "vgpu" else kind}}
        made = held.get("made") or {}
        if made.get("kind") == "vgpu":
            attrs["parentBusID"] = {"string": fn}
        elif made:  # a MIG slice made on demand: as its part published it
            attrs["pciBusID"] = {"string": fn}
            attrs["migProfile"] = {"string": str(made.get("profile", ""))}
            attrs["placementStart"] = {"int": int(made.get("start", 0))}
            attrs["placementSize"] = {"int": int(made.get("size", 0))}
        elif kind in ("gpu", "vf", "shared-gpu"):
            attrs["pciBusID"] = {"string": fn}
        if made:
            attrs["onDemand"] = {"bool": True}
        out.append(taint({"name": name, "attributes": attrs}, effect))
    return out
