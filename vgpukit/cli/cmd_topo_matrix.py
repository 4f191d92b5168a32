"""``vgpukit topo --matrix`` / ``--rdma``: the GPU and NIC relationship matrix, as ``nvidia-smi topo -m``.

GPUs are NVML's (``GPU<N>`` = NVML index N, as ``nvidia-smi -i N``), or without an NVIDIA driver the
PCI display controllers in bus order; NICs are the PCI functions with an RDMA device (``NIC<N>`` in
RDMA device order, named in the NIC legend by that device, ``mlx5_0``), as nvidia-smi lists them.
VFs are never part of it: the matrix costs the same on a host with 1024 VFs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import pci, topology
from ..partial import as_json, unread_gpu

if TYPE_CHECKING:
    from ..clikit.context import App
    from ..nvml import Nvml, NvmlGpu

# nvidia-smi's legend, word for word (driver r535 and later)
LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


def _nvml_gpus(app: App, devices: list[pci.PciDevice]) -> tuple[Nvml | None, list[NvmlGpu]]:
    """NVML and its GPUs, asked only when there is an NVIDIA GPU to ask about."""
    if not any(d.vendor == "10de" and d.kind == "gpu" for d in devices):
        return None, []
    nv = app.nvml
    return (nv, nv.gpus()) if nv is not None else (None, [])


def _natural(name: str) -> tuple[str, int]:
    """``mlx5_10`` after ``mlx5_9``: NIC<N> follows the RDMA device's number, as in nvidia-smi's legend."""
    stem = name.rstrip("0123456789")
    return stem, int(name[len(stem) :] or -1)


def matrix_doc(app: App, scan: pci.Scan, names: dict[str, str]) -> dict[str, Any]:
    devices = scan.physical()
    nv, nv_gpus = _nvml_gpus(app, devices)
    index = {g.bdf: g.index for g in nv_gpus if g.bdf}
    lost = [unread_gpu(names, g) for g in nv_gpus if g.lost]  # its PCIe relations only: no NVLink read
    gpus = [d for d in devices if d.kind == "gpu" and (not index or d.bdf in index)]
    if index:
        gpus.sort(key=lambda d: index[d.bdf])
    rdma = {d.bdf: r for d in devices if d.kind == "nic" and (r := pci.rdma_devices(app.host, d.bdf))}
    nics = sorted((d for d in devices if d.bdf in rdma), key=lambda d: _natural(rdma[d.bdf][0]))
    label = {d.bdf: f"GPU{index[d.bdf] if index else i}" for i, d in enumerate(gpus)}
    label.update({d.bdf: f"NIC{i}" for i, d in enumerate(nics)})
    facts = nv.gpu_links() if nv is not None and gpus else {}
    links = {d.bdf: list(facts[i].nvlinks) for d in gpus if (i := index.get(d.bdf)) is not None and i in facts}
    nvl = topology.nvlink_counts(links)
    cols = gpus + nics
    pcie = topology.matrix(cols, cols, devices)
    rel = [
        [f"NV{nvl[(a.bdf, b.bdf)]}" if (a.bdf, b.bdf) in nvl else pcie[i][j] for j, b in enumerate(cols)]
        for i, a in enumerate(cols)
    ]
    near = topology.gpudirect(gpus, nics, devices)
    return {
        "devices": [label[d.bdf] for d in cols],
        "matrix": {label[a.bdf]: {label[b.bdf]: rel[i][j] for j, b in enumerate(cols)} for i, a in enumerate(cols)},
        "pcie": {label[a.bdf]: {label[b.bdf]: pcie[i][j] for j, b in enumerate(cols)} for i, a in enumerate(cols)},
        "affinity": {label[d.bdf]: {"bdf": d.bdf, "cpus": d.local_cpulist, "numa_node": d.numa_node} for d in cols},
        "gpus": {
            label[d.bdf]: {
                "bdf": d.bdf,
                "alias": names.get(d.bdf),
                "nvml_index": index.get(d.bdf),
                "gpu_numa_id": facts[index[d.bdf]].numa_id if index.get(d.bdf) in facts else None,
                "nvlinks": [
                    {"link": k.link, "remote_bdf": k.remote_bdf, "remote_type": k.remote_type}
                    for k in links.get(d.bdf, [])
                ],
                "gpudirect_nics": [{"nic": label[n], "relation": r} for n, r in near[d.bdf]],
            }
            for d in gpus
        },
        "nics": {label[d.bdf]: {"bdf": d.bdf, "alias": names.get(d.bdf), "rdma": rdma[d.bdf][0]} for d in nics},
        "legend": LEGEND,
        "unreadable": as_json(lost),
    }


def smi_text(doc: dict[str, Any]) -> str:
    """The document as ``nvidia-smi topo -m`` prints it: tab-separated, ``X`` padded, legends below."""
    devs: list[str] = doc["devices"]
    nics = [d for d in devs if d in doc["nics"]]
    lines = ["\t" + "\t".join([*devs, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for row in devs:
        cells = [" X " if col == row else doc["matrix"][row][col] for col in devs]
        if row in doc["gpus"]:
            aff = doc["affinity"][row]
            numa = "N/A" if aff["numa_node"] is None else str(aff["numa_node"])
            gpu_numa = doc["gpus"][row]["gpu_numa_id"]
            cells += [aff["cpus"] or "N/A", numa, "", "N/A" if gpu_numa is None else str(gpu_numa)]
        lines.append("\t".join([row, *cells]))
    text = "\n".join(lines) + "\n\n" + LEGEND + "\n"
    if nics:
        text += "\nNIC Legend:\n\n" + "".join(f"  {n}: {doc['nics'][n]['rdma']}\n" for n in nics)
    return text


def rdma_rows(doc: dict[str, Any]) -> list[list[str]]:
    """One row per GPU: the NICs sharing a PCIe switch with it (GPUDirect RDMA without the CPU)."""
    rows = []
    for gpu, g in doc["gpus"].items():
        near = ", ".join(f"{n['nic']} ({doc['nics'][n['nic']]['rdma']}, {n['relation']})" for n in g["gpudirect_nics"])
        rows.append([gpu, g["bdf"], near or "none: RDMA traffic crosses the host bridge"])
    return rows
