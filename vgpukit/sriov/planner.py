"""The SR-IOV and driver-binding planner: a typed request in, engine steps or a typed refusal out.

Every host rule of the area lives here, whichever door asks (``vgpukit sriov enable|disable``,
``bind``, ``unbind``, ``apply``'s ``sriov:`` and ``vfio:`` sections, hence the boot unit, the node
agent and the Ansible module); the front ends only build requests and render (docs/sriov.md,
"The rules"):

* **console**: the firmware's console display device (``boot_vga`` 1) or a BMC's VGA controller
  (``pci.kind_of``: kind ``display``) is not moved off its driver -- InUse (exit 4) unless forced;
* **vfio-pci takes normal endpoints only**: a function whose configuration-space header type is not
  0 (a PCI-to-PCI or CardBus bridge: the kernel's vfio-pci probe answers EINVAL) -- Unsupported
  (exit 5), never forced;
* **host-critical**: a bridge by class (``0x06xx``: host, ISA/LPC, PCI-to-PCI bridges...), even with
  a normal header, is not put on vfio-pci -- Unsupported (exit 5), never forced;
* **in use**: a device (or a VF destroyed by a count change) held by a process, carrying mdevs or a
  vGPU, or assigned to a libvirt domain (with a URI) is not moved -- InUse (exit 4) unless forced;
* **driver loaded**: the target driver must be there -- NotFound (exit 3);
* **health**: no VFs are carved out of a PF the health layer finds unusable, nor of a quarantined one,
  and no device (nor a VF of such a PF) is bound to a new driver (the one predicate,
  :class:`vgpukit.exclusion.Exclusions`, read in :class:`Facts`; a ``vfs-missing`` finding does not
  count: re-creating the VFs a PF reset took away is its repair) -- DeviceUnusable (exit 6), never
  forced; ``bind --restore`` and ``unbind`` (taking a device back) are not refused;
* counts and modes: bad input -- InvalidInput (exit 2).

Pure: it changes nothing, prints nothing and parses no argv. What it knows of the host it reads
through the facades, each fact once per command, in :class:`Facts`.
"""

from __future__ import annotations

import msgspec

from .. import naming, pci_kind
from ..engine import Step
from ..engine.files import PutFile
from ..errors import InUse, InvalidInput, Unsupported
from ..pci import PciDevice, vf_address
from . import binding
from .binding import DRIVER_MODES, VFIO, Remembered
from .facts import Facts
from .model import PfInfo, VfInfo
from .steps import BindDriver, RestoreDriver, SetNumVfs, UnbindDriver, set_autoprobe

FORCE_FLAG = "pass --force"  # how the area commands override a refusal that can be overridden


# ----------------------------------------------------------------------------- requests
class EnableRequest(msgspec.Struct, frozen=True):
    """Exactly ``count`` VFs on ``pf``, bound as ``driver`` says (``default``, ``vfio-pci``, ``none``).
    ``force_how``: how the door forces (None: it has no way to)."""

    pf: str
    count: int
    driver: str = "default"
    no_autoprobe: bool = False
    force: bool = False
    timeout: float = 10.0
    force_how: str | None = FORCE_FLAG


class DisableRequest(msgspec.Struct, frozen=True):
    pf: str
    force: bool = False
    force_how: str | None = FORCE_FLAG


class BindRequest(msgspec.Struct, frozen=True):
    """Move ``bdf`` to ``driver``, or (``restore``) back where vgpukit found it. ``name``: how the user
    named it (shown in refusals)."""

    bdf: str
    driver: str | None = None
    restore: bool = False
    force: bool = False
    name: str = ""
    force_how: str | None = FORCE_FLAG


class UnbindRequest(msgspec.Struct, frozen=True):
    bdf: str
    force: bool = False
    name: str = ""
    force_how: str | None = FORCE_FLAG


class VfioRequest(msgspec.Struct, frozen=True):
    """Every device of ``bdfs`` on vfio-pci (a host config's ``vfio:`` entry). ``match``: they were
    selected by this pattern, not named -- devices vfio-pci cannot or must not take (bridges,
    host-critical functions) are then left out, and refused only when nothing else matched."""

    bdfs: tuple[str, ...]
    match: str | None = None
    force: bool = False
    force_how: str | None = FORCE_FLAG


Request = EnableRequest | DisableRequest | BindRequest | UnbindRequest | VfioRequest


# ----------------------------------------------------------------------------- the rules
def _label(bdf: str, name: str) -> str:
    """``gpu0 (0000:3b:00.0)`` for an alias; an address (short or long) is said once, in full."""
    return f"{name} ({bdf})" if name and name != bdf and naming.form_of(name) != "bdf" else bdf


def _hint(advice: str | None, force_how: str | None) -> str | None:
    parts = [p for p in (advice, force_how) if p]
    return ", or ".join(parts) or None


def is_console(dev: PciDevice) -> bool:
    """The console display: the firmware's boot VGA device, or a BMC's VGA controller."""
    return dev.boot_vga or dev.kind == "display"


def check_console(dev: PciDevice, what: str, force: bool, force_how: str | None) -> None:
    if force or not is_console(dev):
        return
    why = "boot_vga" if dev.boot_vga else "the BMC's VGA"
    raise InUse(
        f"{what}: it is the console display device ({why}); moving it takes the console away",
        device=dev.bdf,
        hint=f"{force_how} if the console is not needed" if force_how else None,
    )


def check_users(facts: Facts, bdf: str, what: str, force: bool, force_how: str | None) -> None:
    if force:
        return
    users = facts.users(bdf)
    if users:
        raise InUse(
            f"{what}: it is in use ({'; '.join(u.describe() for u in users)})",
            device=bdf,
            hint=_hint("stop its users first", force_how),
        )


def vfio_refusal(facts: Facts, dev: PciDevice, what: str) -> Unsupported | None:
    """Why vfio-pci must not take ``dev`` (never overridden), or None. The header type is the kernel's
    own rule (vfio-pci's probe answers EINVAL for anything but a normal endpoint); a bridge by class
    (0x06xx) is host-critical: the host's buses, its chipset (ISA/LPC) and PCIe ports hang on it."""
    header = facts.header_type(dev.bdf)
    if header is not None and header != pci_kind.HEADER_NORMAL:
        kind = {1: "a PCI-to-PCI bridge", 2: "a CardBus bridge"}.get(header, "not a normal endpoint")
        return Unsupported(
            f"{what} to {VFIO}: it is {kind} (header type {header}); {VFIO} takes only normal endpoints "
            "(header type 0) and the kernel refuses it",
            device=dev.bdf,
            hint="give the devices behind the bridge to vfio-pci instead",
        )
    if dev.class_code >> 16 == 0x06:
        return Unsupported(
            f"{what} to {VFIO}: it is a bridge (class 0x{dev.class_code >> 8:04x}), host-critical: "
            f"vgpukit never puts bridges on {VFIO}",
            device=dev.bdf,
            hint="give the devices behind the bridge to vfio-pci instead",
        )
    return None


def in_use_error(pf: PfInfo, vfs: list[VfInfo], what: str, force_how: str | None = FORCE_FLAG) -> InUse:
    first = vfs[0]
    detail = "; ".join(f"{v.bdf} {', '.join(u.describe() for u in v.users)}" for v in vfs[:4])
    more = f" (+{len(vfs) - 4} more)" if len(vfs) > 4 else ""
    return InUse(
        f"{what} would destroy VFs of {pf.bdf} that are in use: {detail}{more}",
        device=first.bdf,
        hint=_hint("stop the VMs / remove the mdevs first", force_how),
    )


# ----------------------------------------------------------------------------- SR-IOV
def plan_enable(facts: Facts, req: EnableRequest) -> list[Step]:
    pf = facts.pf(req.pf)
    label = _label(pf.bdf, naming.aliases(facts.scan).get(pf.bdf, ""))
    refused = facts.exclusions.check(pf.bdf, label)  # no VFs are carved out of an unusable or quarantined device
    if refused is not None:
        raise refused
    count, driver = req.count, req.driver
    if driver not in DRIVER_MODES:
        raise InvalidInput(f"--driver must be one of {', '.join(DRIVER_MODES)}", value=driver)
    if count < 1:
        raise InvalidInput("--vfs must be at least 1 (use 'vgpukit sriov disable' to remove all VFs)", value=count)
    if count > pf.total_vfs:
        raise InvalidInput(f"{pf.bdf} supports at most {pf.total_vfs} VFs, not {count}", device=pf.bdf, value=count)
    if req.timeout <= 0:
        raise InvalidInput("--timeout must be positive", value=req.timeout)
    if driver == VFIO:
        facts.require_driver(VFIO)
    steps: list[Step] = []
    recreate = pf.num_vfs != count or pf.missing > 0  # VFs configured but gone are re-created, any PF
    # While VFs are created, autoprobe decides whether the PF's VF driver grabs them: keep it off when
    # they must end up on vfio-pci or unbound, so no host driver ever touches them.
    want_autoprobe = pf.autoprobe and not req.no_autoprobe
    create_autoprobe = want_autoprobe and driver == "default"
    if recreate and pf.num_vfs:
        busy = [v for v in pf.vfs if v.in_use]
        if busy and not req.force:
            what = f"changing {pf.bdf} from {pf.num_vfs} to {count} VFs (through 0)"
            if pf.num_vfs == count:
                what = f"re-creating the {pf.missing} missing VFs of {pf.bdf} (through 0)"
            raise in_use_error(pf, busy, what, req.force_how)
        why = " (the kernel changes the count only through 0)"
        if pf.num_vfs == count:  # the kernel ignores writing the count it has: 0 first, then the count
            why = f" ({pf.missing} of them missing: re-created through 0, as the kernel requires)"
        steps.append(SetNumVfs(pf.bdf, 0, pf.total_vfs, req.timeout, why, was=pf.num_vfs))
    # each step carries what it starts from, as read here under the host lock (not read again)
    if recreate and create_autoprobe != pf.autoprobe:
        why = " while the VFs are created" if want_autoprobe else ""
        steps.append(set_autoprobe(facts.host, pf.bdf, create_autoprobe, why, was=pf.autoprobe))
    if recreate:
        steps.append(SetNumVfs(pf.bdf, count, pf.total_vfs, req.timeout, was=0))
        offset, stride = pf.offset or 1, pf.stride or 1
        expected = [vf_address(pf.bdf, offset, stride, n) for n in range(count)]
        if driver == VFIO:
            steps += [
                BindDriver(expected[n], VFIO, pf.autoprobe, f"VF {n} ({expected[n]})", pf.bdf) for n in range(count)
            ]
        if create_autoprobe != want_autoprobe:
            steps.append(set_autoprobe(facts.host, pf.bdf, want_autoprobe, " (as it was)", was=create_autoprobe))
        return steps
    # Same count: only the bindings (and a persistent autoprobe change) may differ.
    if req.no_autoprobe and pf.autoprobe:
        steps.append(set_autoprobe(facts.host, pf.bdf, False, was=True))
    if driver == VFIO:
        steps += [BindDriver(v.bdf, VFIO, False, f"VF {v.index} ({v.bdf})", pf.bdf) for v in pf.vfs if v.driver != VFIO]
        # an idempotent re-run repairs lost records of VFs it put on vfio-pci
        steps += [
            BindDriver(v.bdf, VFIO, True, f"VF {v.index} ({v.bdf}): remember its original driver")
            for v in pf.vfs
            if v.driver == VFIO and binding.remembered_lenient(facts.host, v.bdf) is None and pf.autoprobe
        ]
    elif driver == "none":
        busy = [v for v in pf.vfs if v.driver and v.in_use]
        if busy and not req.force:
            raise in_use_error(pf, busy, f"unbinding the VFs of {pf.bdf}", req.force_how)
        steps += [UnbindDriver(v.bdf, f"VF {v.index} ({v.bdf}) from {v.driver}") for v in pf.vfs if v.driver]
    return steps


def plan_disable(facts: Facts, req: DisableRequest) -> list[Step]:
    pf = facts.pf(req.pf)
    if pf.num_vfs == 0:
        return []
    busy = [v for v in pf.vfs if v.in_use]
    if busy and not req.force:
        raise in_use_error(pf, busy, f"disabling SR-IOV on {pf.bdf}", req.force_how)
    return [SetNumVfs(pf.bdf, 0, pf.total_vfs, was=pf.num_vfs)]


# ----------------------------------------------------------------------------- binding
def _move(facts: Facts, bdf: str, what: str, driver: str | None, force: bool, force_how: str | None) -> None:
    """Every rule for taking ``bdf`` off its driver (to ``driver``; None: to none or its original)."""
    dev = facts.device(bdf)
    if driver == VFIO:
        refusal = vfio_refusal(facts, dev, what)
        if refusal is not None:
            raise refusal
    check_console(dev, what, force, force_how)
    check_users(facts, bdf, what, force, force_how)


def plan_bind(facts: Facts, req: BindRequest) -> list[Step]:
    if bool(req.driver) == req.restore:
        raise InvalidInput("give exactly one of --driver NAME or --restore")
    bdf, host = req.bdf, facts.host
    what = f"cannot move {_label(bdf, req.name)}"
    cur = facts.driver(bdf)
    if req.driver:
        facts.require_driver(req.driver)
        if cur == req.driver:
            return []
        refused = facts.exclusions.check_carved(bdf, _label(bdf, req.name))  # nothing new for an unusable device
        if refused is not None:
            raise refused
        _move(facts, bdf, what, req.driver, req.force, req.force_how)
        return [BindDriver(bdf, req.driver, note=f"{bdf} (now on {cur or 'no driver'})")]
    known = binding.remembered(host, bdf)
    rec = known or Remembered(bdf, None, None, probe=True)
    if binding.satisfied(rec, cur, binding.current_override(host, bdf)):
        if known is None:
            return []
        return [PutFile(host.display(binding.record_path(host, bdf)), None, what="bind record")]
    _move(facts, bdf, what, rec.driver, req.force, req.force_how)
    return [RestoreDriver(bdf, rec.driver, rec.override, rec.probe)]


def plan_unbind(facts: Facts, req: UnbindRequest) -> list[Step]:
    cur = facts.driver(req.bdf)
    if not cur:
        return []
    _move(facts, req.bdf, f"cannot unbind {_label(req.bdf, req.name)}", None, req.force, req.force_how)
    return [UnbindDriver(req.bdf, f"{req.bdf} from {cur}")]


def plan_vfio(facts: Facts, req: VfioRequest) -> list[Step]:
    """The vfio-pci bindings of one ``vfio:`` entry (a device, or what a ``match`` selected)."""
    bdfs = list(req.bdfs)
    if req.match is not None:
        # a pattern that also selects the bridge a device sits behind (a BMC's, a switch's) means the
        # device: the bridge is no candidate. A pattern that selects only such functions is a mistake.
        refused = {b: r for b in bdfs if (r := vfio_refusal(facts, facts.device(b), f"cannot move {b}"))}
        if refused and len(refused) == len(bdfs):
            first = refused[bdfs[0]]
            raise Unsupported(
                f"match {req.match} selects no device vfio-pci can take: {first.message}",
                device=first.device,
                hint=first.hint,
            )
        bdfs = [b for b in bdfs if b not in refused]
    steps: list[Step] = []
    for bdf in bdfs:
        steps += plan_bind(facts, BindRequest(bdf, VFIO, force=req.force, force_how=req.force_how))
    return steps


def plan(facts: Facts, req: Request) -> list[Step]:
    """The steps that fulfil ``req`` on the host ``facts`` reads, or the typed refusal."""
    if isinstance(req, EnableRequest):
        return plan_enable(facts, req)
    if isinstance(req, DisableRequest):
        return plan_disable(facts, req)
    if isinstance(req, BindRequest):
        return plan_bind(facts, req)
    if isinstance(req, UnbindRequest):
        return plan_unbind(facts, req)
    return plan_vfio(facts, req)


__all__ = [
    "BindRequest",
    "DisableRequest",
    "EnableRequest",
    "Facts",
    "Request",
    "UnbindRequest",
    "VfioRequest",
    "plan",
]
