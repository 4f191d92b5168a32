"""PCIe topology computed from device records (no I/O): the tree and the relationship matrix.

Port roles are read from the hierarchy: a bridge directly below a host bridge is a root port, a
bridge below a root port or a downstream port is a switch upstream port, and a bridge below an
upstream port is a downstream port. Relationships use ``nvidia-smi topo -m`` vocabulary:

* ``X``    the same device
* ``PIX``  through at most one PCIe switch
* ``PXB``  through several switches, without the host bridge
* ``PHB``  through one PCIe host bridge (same root complex)
* ``NODE`` across host bridges within one NUMA node
* ``SYS``  across NUMA nodes (the SMP interconnect)
* ``NV#``  a bonded set of # NVLinks (:func:`nvlink_counts`), shown instead of the PCIe path
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .pci import PciDevice

if TYPE_CHECKING:
    from .nvml.model import NvLink

RANK = {"X": 0, "PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}


def port_roles(devices: list[PciDevice]) -> dict[str, str]:
    """BDF -> root-port | switch-upstream | switch-downstream for every bridge."""
    by_bdf = {d.bdf: d for d in devices}
    roles: dict[str, str] = {}
    for d in devices:
        if d.kind != "bridge":
            continue
        if not d.parents:
            roles[d.bdf] = "root-port"
            continue
        parent_role = roles.get(d.parents[-1]) or _role_of(by_bdf, d.parents[-1], roles)
        roles[d.bdf] = "switch-downstream" if parent_role == "switch-upstream" else "switch-upstream"
    return roles


def _role_of(by_bdf: dict[str, PciDevice], bdf: str, roles: dict[str, str]) -> str:
    dev = by_bdf.get(bdf)
    if dev is None or not dev.parents:
        roles[bdf] = "root-port"
        return "root-port"
    parent = roles.get(dev.parents[-1]) or _role_of(by_bdf, dev.parents[-1], roles)
    roles[bdf] = "switch-downstream" if parent == "switch-upstream" else "switch-upstream"
    return roles[bdf]


def _switches(dev: PciDevice, roles: dict[str, str]) -> list[str]:
    return [p for p in dev.parents if roles.get(p) == "switch-upstream"]


def relation(a: PciDevice, b: PciDevice, roles: dict[str, str]) -> str:
    if a.bdf == b.bdf:
        return "X"
    if a.host_bridge != b.host_bridge:
        if a.numa_node is not None and a.numa_node == b.numa_node:
            return "NODE"
        return "SYS"
    sa, sb = _switches(a, roles), _switches(b, roles)
    common = 0
    while common < min(len(sa), len(sb)) and sa[common] == sb[common]:
        common += 1
    if common == 0:
        same_port = bool(a.parents and b.parents and a.parents[0] == b.parents[0])
        return "PIX" if same_port and not sa and not sb else "PHB"
    traversed = (len(sa) - common) + (len(sb) - common) + 1
    return "PIX" if traversed == 1 else "PXB"


class Node:
    """One node of the PCIe tree (a plain class: topo builds it on every run, and a dataclass costs
    start-up time to define)."""

    __slots__ = ("children", "device", "label", "role")

    def __init__(self, device: PciDevice | None, label: str, role: str | None = None) -> None:
        self.device = device
        self.label = label  # host bridge name for roots
        self.role = role
        self.children: list[Node] = []

    def to_dict(self, aliases: dict[str, str]) -> dict[str, Any]:
        if self.device is None:
            return {"host_bridge": self.label, "children": [c.to_dict(aliases) for c in self.children]}
        d = self.device.to_dict()
        d["alias"] = aliases.get(self.device.bdf)
        if self.role:
            d["role"] = self.role
        d["children"] = [c.to_dict(aliases) for c in self.children]
        return d


def build_tree(devices: list[PciDevice]) -> list[Node]:
    """Roots (one per host bridge) with devices nested under their parent bridge; VFs under their PF."""
    roles = port_roles(devices)
    roots: dict[str, Node] = {}
    nodes: dict[str, Node] = {}
    for d in devices:
        nodes[d.bdf] = Node(d, d.bdf, roles.get(d.bdf))
    for d in devices:
        if d.host_bridge not in roots:
            roots[d.host_bridge] = Node(None, d.host_bridge)
        holder = nodes.get(d.physfn) if d.physfn else None
        if holder is None and d.parents:
            holder = nodes.get(d.parents[-1])
        (holder or roots[d.host_bridge]).children.append(nodes[d.bdf])
    return [roots[k] for k in sorted(roots)]


def matrix(rows: list[PciDevice], cols: list[PciDevice], all_devices: list[PciDevice]) -> list[list[str]]:
    roles = port_roles(all_devices)
    return [[relation(a, b, roles) for b in cols] for a in rows]


def nvlink_counts(links: dict[str, list[NvLink]]) -> dict[tuple[str, str], int]:
    """(GPU BDF, GPU BDF) -> number of NVLinks joining them, from each GPU's active links.

    A link whose remote end is the other GPU counts once. Through NVSwitches, two GPUs reach each
    other over every switch both are wired to, with as many links as the less-connected of the two
    has on that switch (an HGX A100: two links from every GPU to each of six switches = NV12).
    """
    per_switch: dict[str, dict[str, int]] = {}
    for gpu, gl in links.items():
        counts: dict[str, int] = {}
        for k in gl:
            if k.remote_type == "switch":
                counts[k.remote_bdf] = counts.get(k.remote_bdf, 0) + 1
        per_switch[gpu] = counts
    out: dict[tuple[str, str], int] = {}
    for a in links:
        for b in links:
            if a == b:
                continue
            direct = sum(1 for k in links[a] if k.remote_type == "gpu" and k.remote_bdf == b)
            sa, sb = per_switch[a], per_switch[b]
            switched = sum(min(n, sb[s]) for s, n in sa.items() if s in sb)
            if direct + switched:
                out[(a, b)] = direct + switched
    return out


def gpudirect(
    gpus: list[PciDevice], nics: list[PciDevice], all_devices: list[PciDevice]
) -> dict[str, list[tuple[str, str]]]:
    """GPU BDF -> [(NIC BDF, PIX|PXB)], nearest first: the NICs behind a PCIe switch shared with the GPU,
    where GPUDirect RDMA moves data peer to peer without crossing the CPU's host bridge."""
    roles = port_roles(all_devices)
    out: dict[str, list[tuple[str, str]]] = {}
    for g in gpus:
        near = [(n.bdf, r) for n in nics if (r := relation(g, n, roles)) in ("PIX", "PXB")]
        out[g.bdf] = sorted(near, key=lambda item: RANK[item[1]])
    return out
