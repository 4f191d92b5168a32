"""``GetPreferredAllocation``: the closest set of devices in the PCIe tree.

The distance of two devices is the ``nvidia-smi topo -m`` relationship of the PCI functions they
live on (:mod:`vgpukit.topology`): ``X`` (same function: two MIG slices of one GPU, two tenants of
one shared GPU) < ``PIX`` (one PCIe switch) < ``PXB`` < ``PHB`` (one root complex) < ``NODE`` (one
NUMA node) < ``SYS``. A set costs its worst pair, then the sum of its pairs; the answer is the
cheapest set found greedily from every possible seed (the devices that must be included, else each
available device), ties broken by device order, so the same request always gets the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..node.inventory import Device
from ..pci import PciDevice
from ..topology import RANK, port_roles, relation


class Distances:
    """Pairwise distances between devices, from their PCI functions (computed once per pair of functions)."""

    def __init__(self, devices: Sequence[Device], pci: dict[str, PciDevice]) -> None:
        # a VF sits where its PF sits: VFs of one PF are as close as two slices of one GPU
        self.bdf = {d.id: _function(pci, d.topo_bdf) for d in devices}
        self.pci = pci
        self.roles = port_roles(list(pci.values()))
        self._memo: dict[tuple[str, str], int] = {}

    def __call__(self, a: str, b: str) -> int:
        fa, fb = self.bdf.get(a, a), self.bdf.get(b, b)
        if fa == fb:
            return 0
        key = (fa, fb) if fa < fb else (fb, fa)
        if key not in self._memo:
            da, db = self.pci.get(fa), self.pci.get(fb)
            self._memo[key] = RANK["SYS"] if da is None or db is None else RANK[relation(da, db, self.roles)]
        return self._memo[key]


def _function(pci: dict[str, PciDevice], bdf: str) -> str:
    dev = pci.get(bdf)
    return dev.physfn if dev is not None and dev.physfn else bdf


def _cost(chosen: list[str], dist: Distances) -> tuple[int, int]:
    pairs = [dist(a, b) for i, a in enumerate(chosen) for b in chosen[i + 1 :]]
    return (max(pairs, default=0), sum(pairs))


def _grow(seed: list[str], pool: list[str], size: int, dist: Distances) -> list[str]:
    """Add, one at a time, the device whose worst (then summed) distance to the chosen ones is least."""
    chosen = list(seed)
    score = {d: [0, 0] for d in pool if d not in chosen}  # worst and summed distance to the chosen
    for c in chosen:
        for d, s in score.items():
            x = dist(d, c)
            s[0], s[1] = max(s[0], x), s[1] + x
    while len(chosen) < size and score:
        best = min(score, key=lambda d: (score[d][0], score[d][1]))  # ties: pool order (sorted IDs)
        chosen.append(best)
        del score[best]
        for d, s in score.items():
            x = dist(d, best)
            s[0], s[1] = max(s[0], x), s[1] + x
    return chosen


def preferred(available: Sequence[str], must: Sequence[str], size: int, dist: Distances) -> list[str]:
    """``size`` device IDs from ``available`` including ``must``, as close together as the tree allows."""
    pool = sorted(dict.fromkeys(available))
    must = [d for d in dict.fromkeys(must) if d in pool] if must else []
    if size <= len(must):
        return must[:size] if size > 0 else []
    first_on: dict[str, str] = {}  # seeds on one PCI function grow alike: one seed per function
    for d in pool:
        first_on.setdefault(dist.bdf.get(d, d), d)
    seeds = [must] if must else [[d] for d in first_on.values()]
    best: list[str] = []
    best_cost: tuple[int, int] | None = None
    for seed in seeds:
        chosen = _grow(seed, pool, size, dist)
        cost = _cost(chosen, dist)
        if best_cost is None or cost < best_cost:
            best, best_cost = chosen, cost
    return best
