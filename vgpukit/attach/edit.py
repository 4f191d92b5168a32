"""``render domain --from FILE``: a user's own domain XML with DEVICEs and their NUMA placement added.

Offline: nothing is defined or started, no libvirt connection is opened. The file is read as a
document (size-capped, regular, no DTD), parsed into the XML model (:class:`DomainXML`, which keeps
everything it does not declare: disks, NICs, comments, ``qemu:`` elements) and written back by it.
Each device element comes from the same templates as ``render hostdev`` and ``render domain``; a
device the domain already has (same PCI address or mdev UUID) is left as it is, so running the
output through ``--from`` again changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Busy, Conflict, InvalidInput
from ..host import Host
from ..libvirt.domain import DomainXML, parse_device
from .devices import resolve
from .hostfacts import hugepage_warnings, placement_for
from .planner import check_iommu, check_not_console

if TYPE_CHECKING:
    from ..nvml import Nvml
    from .templates import TemplateSet

MAX_DOMAIN_XML_BYTES = 1024 * 1024


def add_devices(
    host: Host,
    tpl: TemplateSet,
    path: str,
    *,
    nvml: Nvml | None = None,
    devices: list[str],
    hugepages: bool = False,
    pin: bool = True,
) -> tuple[DomainXML, int | None, list[str]]:
    """The domain of FILE with DEVICEs added and placed; its NUMA node (None: left as it was); warnings."""
    text = host.read_doc(path, "domain XML", MAX_DOMAIN_XML_BYTES, user_file=True) or ""
    dom = DomainXML.parse(text, document=True)
    if not dom.name:
        raise InvalidInput(f"domain XML {path} has no <name>", path=path)
    vcpus = dom.vcpus
    if vcpus is None or vcpus < 1:
        raise InvalidInput(f"domain XML {path} has no <vcpu> count", path=path)
    targets = [resolve(host, d, nvml) for d in devices]
    placement, warnings = placement_for(host, [t.numa_node for t in targets], vcpus, pin=pin)
    have = dom.keyed()
    for t in targets:
        try:
            check_not_console(t)
            check_iommu(host, t)
        except (Busy, Conflict) as exc:  # as `render domain`: rendering is allowed, starting it would fail
            warnings.append(str(exc))
        element = parse_device(tpl.device(t.element()))
        if element.key() in have:
            warnings.append(f"{t.label} is already in domain {dom.name}: left as it is")
            continue
        dom.add_device(element)
        have[str(element.key())] = element
    if placement.numa_node is not None and placement.cpuset is not None:
        before = (dom.vcpu_cpuset, dom.numa_nodeset, dom.pins())
        dom.place(placement.cpuset, placement.numa_node, list(placement.pins))
        after = (dom.vcpu_cpuset, dom.numa_nodeset, dom.pins())
        if before != after and any(before):
            node = placement.numa_node
            warnings.append(f"domain {dom.name}'s vCPU and memory placement replaced by NUMA node {node}'s")
    if hugepages:
        dom.set_hugepages()
        memory = dom.memory_mib
        if memory is not None:
            warnings.extend(hugepage_warnings(host, placement.numa_node, memory))
    return dom, placement.numa_node, warnings
