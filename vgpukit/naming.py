"""How users name things on a host: one grammar, one resolver, one error shape.

The grammar (hex digits in any case; surrounding white space ignored):

=====================  =========================================================================
``gpuN nicN nvmeN``    the Nth physical GPU / NIC / NVMe controller (see :func:`aliases`)
``DDDD:BB:DD.F``       a PCI function by address; ``BB:DD.F`` means domain 0000
``<PF> vfN``           the PF's VF N (the kernel's ``virtfnN``), PF named as above: ``nic0 vf0``
                       (what ``sriov list`` and ``devices`` show), also ``nic0vf0``, ``nic0-vf0``
``GPU-<uuid>``         a GPU by its NVML UUID (needs the NVIDIA driver)
``MIG-<uuid>``         a MIG device (a compute instance) by its UUID (needs the NVIDIA driver)
``<uuid>``             an mdev instance (8-4-4-4-12 hex)
``N`` (digits)         a GPU by NVML index, only where a command takes a GPU (``mig``,
                       ``partition``), as ``nvidia-smi -i`` does; elsewhere digits are refused
                       with a pointer to ``gpuN`` (NVML order and bus order may differ)
``<name>``             an mdev parent by its ``mdev_bus`` name (``mtty``), only where a command
                       takes an mdev parent
=====================  =========================================================================

:func:`resolve` turns a name into a :class:`ResolvedName` (what kind of thing, its BDF, UUID, NVML
index...) for the kinds a command accepts. Unknown names all fail the same way: ``no <what>
<name> on this host[: detail]`` (NotFound, exit 3); names outside the grammar (or of a kind the
command does not take) are bad input (exit 2) naming the forms the command takes.

The resolver reads through the host door and an optional NVML facade, and takes a per-command
:class:`~vgpukit.pci.Scan` so that naming and listings read each device once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Union

import msgspec

from .errors import InvalidInput, NotFound
from .host import BDF_RE, SHORT_BDF_RE
from .pci import Scan, Sriov
from .words import plural, span

if TYPE_CHECKING:
    from .host import Host
    from .nvml import Nvml, NvmlGpu

# NVML, or how to open it (consulted only for names that need it: GPU-/MIG- UUIDs, NVML indices)
NvmlSource = Union["Nvml", Callable[[], "Nvml | None"], None]

# What a command accepts (sets of these)
PCI = "pci"  # any PCI function
GPU = "gpu"  # a GPU NVML reports (also by NVML index)
MDEV = "mdev"  # an active mdev instance
MIG = "mig"  # a MIG device
PARENT = "mdev-parent"  # an mdev parent (PCI or not)

_HEX_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
ALIAS_RE = re.compile(r"^(gpu|nic|nvme)([0-9]+)\Z", re.ASCII)
GPU_UUID_RE = re.compile(rf"^gpu-{_HEX_UUID}\Z", re.ASCII)
MIG_UUID_RE = re.compile(rf"^mig-({_HEX_UUID}|gpu-{_HEX_UUID}/[0-9]+/[0-9]+)\Z", re.ASCII)
MDEV_UUID_RE = re.compile(rf"^{_HEX_UUID}\Z", re.ASCII)
INDEX_RE = re.compile(r"^[0-9]{1,4}\Z", re.ASCII)
VF_RE = re.compile(r"^(?P<pf>\S.*?)(?:\s+|-|/)?vf(?P<n>[0-9]{1,5})\Z", re.ASCII)
PARENT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}\Z", re.ASCII)

FORMS = {  # how each kind can be named, for error messages
    PCI: "gpuN, nicN, nvmeN, a PCI address (0000:3b:00.0 or 3b:00.0), a VF as 'nic0 vf0' or a GPU UUID (GPU-...)",
    GPU: "gpuN, an NVML index, a PCI address or a GPU UUID (GPU-...)",
    MDEV: "an mdev UUID",
    MIG: "a MIG device UUID (MIG-...)",
    PARENT: "an mdev parent name (see: vgpukit mdev types)",
}


_FORM_WORDS = {  # a form, in words (a plain word, or invalid text, needs none: the forms taken follow)
    "alias": "a device alias",
    "bdf": "a PCI address",
    "gpu-uuid": "a GPU UUID",
    "mig-uuid": "a MIG device UUID",
    "mdev-uuid": "an mdev UUID",
    "vf": "a VF",
}


class ResolvedName(msgspec.Struct, frozen=True):
    """What a name resolved to."""

    name: str  # as the user typed it
    kind: str  # PCI | GPU | MDEV | MIG | PARENT
    bdf: str | None = None  # the PCI function (a GPU; the GPU of a MIG device; a PCI mdev parent)
    uuid: str | None = None  # GPU-/MIG- UUID, or the mdev UUID
    parent: str | None = None  # mdev parent name (kind PARENT)
    nvml_index: int | None = None  # GPU / MIG: NVML's index of the GPU

    @property
    def label(self) -> str:
        return self.bdf or self.uuid or self.parent or self.name


def form_of(text: str) -> str:
    """The grammar's name for ``text``'s form (syntax only, no I/O)."""
    t = text.strip()
    low = t.lower()
    if ALIAS_RE.match(low):
        return "alias"
    if BDF_RE.match(low) or SHORT_BDF_RE.match(low):
        return "bdf"
    if GPU_UUID_RE.match(low):
        return "gpu-uuid"
    if MIG_UUID_RE.match(low):
        return "mig-uuid"
    if MDEV_UUID_RE.match(low):
        return "mdev-uuid"
    if INDEX_RE.match(t):
        return "index"
    vf = VF_RE.match(low)
    if vf and form_of(vf.group("pf")) in ("alias", "bdf", "gpu-uuid"):
        return "vf"
    if PARENT_NAME_RE.match(t):
        return "word"
    return "invalid"


def needs_nvml(name: str) -> bool:
    """Whether resolving ``name`` (outside the ``mig`` commands) asks NVML: GPU and MIG UUIDs."""
    form = form_of(name)
    if form == "vf":
        return needs_nvml(_vf_parts(name)[0])
    return form in ("gpu-uuid", "mig-uuid")


def _vf_parts(text: str) -> tuple[str, int]:
    m = VF_RE.match(text.strip().lower())
    assert m is not None
    return m.group("pf"), int(m.group("n"))


def vf_index(pf: str, vf: str, sriov: Sriov) -> int:
    """The kernel's N of the PF's ``virtfnN`` link to ``vf``: from the routing IDs (the VF's is the PF's
    + offset + stride * N, PCIe SR-IOV 9.3.3.9), else its place among the VFs the PF lists."""
    if sriov.offset and sriov.stride:
        rid = [int(b[5:7], 16) << 8 | int(b[8:10], 16) << 3 | int(b[11], 16) for b in (pf, vf)]
        n, rest = divmod(rid[1] - rid[0] - sriov.offset, sriov.stride)
        if not rest and n >= 0:
            return n
    return sriov.vfs.index(vf)


def vf_names(scan: Scan, names: dict[str, str] | None = None) -> dict[str, str]:
    """VF address -> its name, ``nic0 vf0`` (the PF's alias, else its address, and the VF's N): what
    listings show for a VF, and what :func:`resolve` accepts."""
    names = aliases(scan) if names is None else names
    out: dict[str, str] = {}
    for d in scan.physical():
        if d.sriov is not None:
            for vf in d.sriov.vfs:
                out[vf] = f"{names.get(d.bdf, d.bdf)} vf{vf_index(d.bdf, vf, d.sriov)}"
    return out


def unknown(what: str, name: str, detail: str = "", hint: str = "see: vgpukit devices") -> NotFound:
    """The one shape of 'there is no such thing here'."""
    thing = f"{what} {name}" if what else name
    return NotFound(f"no {thing} on this host" + (f": {detail}" if detail else ""), value=name, hint=hint)


def unnamable(name: str, accept: frozenset[str], why: str = "") -> InvalidInput:
    """The one shape of 'that is not a name of anything this command takes'."""
    kinds = [k for k in (GPU, PCI, PARENT, MDEV, MIG) if k in accept and not (k == PCI and GPU in accept)]
    forms = "; or ".join(FORMS[k] for k in kinds)
    return InvalidInput(f"cannot name a device by {name!r}{why}: use {forms}", value=name)


def aliases(scan: Scan, *, light: bool = False) -> dict[str, str]:
    """BDF -> ``gpuN`` / ``nicN`` / ``nvmeN`` for every physical GPU, NIC and NVMe controller.

    The one place that decides what the aliases mean, from PCI facts only (vendor, class, bus
    address, ``boot_vga``), which do not change when a device changes driver:

    * ``gpuN``: NVIDIA display/3D controllers first, in PCI bus order -- the order NVML gives its
      indices, so ``gpuN`` is ``nvidia-smi -i N`` while every NVIDIA GPU is on the nvidia driver, and
      stays the same device when one moves to vfio-pci (which NVML then no longer counts); then the
      other GPUs in bus order. A console display device (kind ``display``: the boot VGA device, a
      BMC's VGA controller, see :func:`vgpukit.pci.kind_of`) is never a ``gpuN``.
    * ``nicN``, ``nvmeN``: physical functions of that kind in PCI bus order.

    VFs are never counted. ``light``: see :meth:`vgpukit.pci.Scan.kinds` (a command that shows
    aliases and reads no more of the devices).
    """
    counters: dict[str, int] = {}
    out = {}
    others: list[str] = []
    for bdf, vendor, kind in scan.kinds(light=light):
        if kind == "gpu" and vendor != "10de":  # not NVIDIA: after the GPUs NVML counts
            others.append(bdf)
        elif kind in ("gpu", "nic", "nvme"):
            n = counters.get(kind, 0)
            counters[kind] = n + 1
            out[bdf] = f"{kind}{n}"
    n = counters.get("gpu", 0)
    for i, bdf in enumerate(others):
        out[bdf] = f"gpu{n + i}"
    return out


def resolve(
    host: Host,
    name: str,
    accept: frozenset[str] = frozenset({PCI}),
    *,
    nvml: NvmlSource = None,
    scan: Scan | None = None,
) -> ResolvedName:
    """The thing ``name`` names on ``host``, of one of the ``accept`` ed kinds.

    NotFound (exit 3) when it is well-formed but absent; InvalidInput (exit 2) when it is not a name
    of an accepted kind.
    """
    scan = scan if scan is not None else Scan(host)
    text = name.strip()
    low = text.lower()
    form = form_of(text)
    if PARENT in accept and text in _parents(host):
        return ResolvedName(name, PARENT, bdf=text if BDF_RE.match(text) else None, parent=text)
    if form == "mdev-uuid" and MDEV in accept:
        if not host.exists(host.mdev_device(low)):
            raise unknown("mdev", low, hint="see: vgpukit mdev list")
        return ResolvedName(name, MDEV, uuid=low)
    if form == "mig-uuid" and MIG in accept:
        return _mig(name, text, nvml)
    if form == "index" and GPU in accept:
        gpus = _gpus(nvml, text)
        if int(text) >= len(gpus):
            reports = f"NVML reports {plural(len(gpus), 'GPU')}, {span('', 0, len(gpus) - 1)}"
            raise unknown("GPU with NVML index", text, reports)
        by_index = gpus[int(text)]
        return ResolvedName(name, GPU, bdf=by_index.bdf, uuid=by_index.uuid, nvml_index=by_index.index)
    if form in ("alias", "bdf", "gpu-uuid", "vf") and accept & {PCI, GPU, PARENT}:
        bdf, uuid = _vf(scan, name, text, nvml) if form == "vf" else _pci(scan, name, text, form, nvml)
        if GPU in accept:
            g = next((g for g in _gpus(nvml, text) if g.bdf == bdf), None)
            if g is None:
                raise unknown("GPU", text, f"NVML does not report {bdf}", hint="see: vgpukit mig status")
            return ResolvedName(name, GPU, bdf=bdf, uuid=g.uuid, nvml_index=g.index)
        if PCI not in accept:  # an mdev parent named like a device
            if bdf not in _parents(host):
                raise unknown("mdev parent", text, f"{bdf} is not one", hint="see: vgpukit mdev types")
            return ResolvedName(name, PARENT, bdf=bdf, parent=bdf)
        return ResolvedName(name, PCI, bdf=bdf, uuid=uuid)
    if form == "word" and PARENT in accept:
        raise unknown("mdev parent", text, hint="see: vgpukit mdev types")
    why = ""
    if form == "index":
        why = f" (a GPU is gpu{text}; NVML indices name GPUs only in the mig commands)"
    elif form in _FORM_WORDS:  # well-formed, but a kind of name this command does not take
        why = f" ({_FORM_WORDS[form]}, which this command does not take)"
    raise unnamable(name, accept, why)


def _parents(host: Host) -> list[str]:
    return host.listdir(host.mdev_parents())


def _open(nvml: NvmlSource, text: str) -> Nvml:
    nv = nvml() if callable(nvml) else nvml
    if nv is None:
        raise unknown("GPU", text, "no NVIDIA driver here (NVML is not available)", hint="see: vgpukit devices")
    return nv


def _gpus(nvml: NvmlSource, text: str) -> list[NvmlGpu]:
    return _open(nvml, text).gpus()


def _pci(scan: Scan, name: str, text: str, form: str, nvml: NvmlSource) -> tuple[str, str | None]:
    """(BDF, GPU UUID or None) of an existing PCI function named by alias, address or GPU UUID."""
    low = text.lower()
    if form == "bdf":
        bdf = low if BDF_RE.match(low) else "0000:" + low
        if not scan.exists(bdf):
            raise unknown("PCI device", bdf)
        return bdf, None
    if form == "alias":
        by_alias = {a: b for b, a in aliases(scan).items()}
        if low in by_alias:
            return by_alias[low], None
        kind = low.rstrip("0123456789")
        n = sum(1 for a in by_alias if a.rstrip("0123456789") == kind)
        what = {"gpu": "GPU", "nic": "NIC", "nvme": "NVMe controller"}[kind]
        has = f"it has {plural(n, what)} ({span(kind, 0, n - 1)})" if n else f"it has no {what}s"
        raise unknown("", low, has)
    for g in _gpus(nvml, text):
        if g.uuid.lower() == low:
            return g.bdf, g.uuid
    raise unknown("GPU with UUID", text, hint="see: vgpukit mig status")


def _vf(scan: Scan, name: str, text: str, nvml: NvmlSource) -> tuple[str, None]:
    """(BDF, None) of an existing VF named ``<PF> vfN``."""
    pf_text, n = _vf_parts(text)
    pf, _ = _pci(scan, name, pf_text, form_of(pf_text), nvml)
    sriov = scan.device(pf).sriov
    vfs = sriov.vfs if sriov is not None else ()
    for vf in vfs:
        if sriov is not None and vf_index(pf, vf, sriov) == n:
            return vf, None
    has = f"{pf_text} has {plural(len(vfs), 'VF')}" + (f" ({span('vf', 0, len(vfs) - 1)})" if vfs else "")
    raise unknown("VF", f"{pf_text} vf{n}", has if sriov is not None else f"{pf_text} has no SR-IOV")


def _mig(name: str, text: str, nvml: NvmlSource) -> ResolvedName:
    nv = _open(nvml, text)
    for g in nv.gpus():
        if not g.mig_current:
            continue
        for gi in nv.gpu_instances(g.index):
            for ci in gi.compute_instances:
                if ci.uuid.lower() == text.lower():
                    return ResolvedName(name, MIG, bdf=g.bdf, uuid=ci.uuid, nvml_index=g.index)
    raise unknown("MIG device", text, hint="see: vgpukit mig status")
