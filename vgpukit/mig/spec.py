"""What a user asks for: ``--mig 3g.20gb,1g.5gb=2`` and ``--ci 1c.3g.20gb=3``, as records.

A request is a list of :class:`WantGi`: one GPU-instance profile and the compute-instance slice
counts it should hold (default: one full-size compute instance, what ``nvidia-smi mig -cgi ... -C``
does). Names are checked against the GPU's own profiles; errors list the valid ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import msgspec

from ..errors import InvalidInput
from ..inputs import parse_int
from ..nvml import GiProfile
from ..nvml.table import ci_allowed_table, ci_enums

ITEM_RE = re.compile(r"^\s*(?P<name>[^=\s]+)\s*(?:=\s*(?P<count>\S+))?\s*\Z", re.ASCII)
MAX_COUNT = 64  # MIG devices of one profile on one GPU: 7 GIs x 7 CIs at most
CI_RE = re.compile(r"^(?P<c>[0-9]+)c\.(?P<gi>.+)\Z", re.ASCII)


class WantGi(msgspec.Struct, frozen=True):
    profile: GiProfile
    cis: tuple[int, ...]  # compute-instance slice counts, largest first
    strict: bool = True  # an existing GI matches only with exactly these CIs (else: any CIs of its own)

    @property
    def default_cis(self) -> bool:
        return self.cis == (self.profile.slices,)

    def describe(self) -> str:
        if self.default_cis:
            return self.profile.name
        parts = [f"{c}c" for c in self.cis]
        return f"{self.profile.name} [{'+'.join(parts)}]"


def ci_enum(slices: int) -> int:
    """NVML_COMPUTE_INSTANCE_PROFILE_* for a compute instance of ``slices`` compute slices."""
    return ci_enums()[slices]


def ci_allowed(gi: GiProfile) -> dict[int, int]:
    """slice count -> max count of compute instances a GPU instance of profile ``gi`` allows."""
    return dict(ci_allowed_table().get(gi.slices, {}))


def split_items(values: Iterable[str]) -> list[tuple[str, int]]:
    """``["3g.20gb,1g.5gb=2", "2g.10gb"]`` -> ``[("3g.20gb", 1), ("1g.5gb", 2), ("2g.10gb", 1)]``."""
    out = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            m = ITEM_RE.match(part)
            if m is None:
                raise InvalidInput(f"cannot parse {part!r}: use PROFILE or PROFILE=COUNT", value=part)
            count = parse_int(m.group("count") or "1", f"the count in {part.strip()!r}", lo=1, hi=MAX_COUNT)
            out.append((m.group("name").lower(), count))
    return out


def find_profile(profiles: Sequence[GiProfile], name: str, gpu_label: str) -> GiProfile:
    """A GPU-instance profile by name (``3g.20gb``) or id (``9``)."""
    for p in profiles:
        if p.name.lower() == name.lower() or (name.isascii() and name.isdigit() and int(name) == p.id):
            return p
    valid = ", ".join(p.name for p in sorted(profiles, key=lambda p: (p.slices, p.size, p.media)))
    raise InvalidInput(f"unknown MIG profile {name!r} for {gpu_label}", value=name, hint=f"valid: {valid}")


def ci_layout_fits(gi: GiProfile, cis: Sequence[int]) -> bool:
    """Whether compute instances of ``cis`` slices can all be placed in a GPU instance of ``gi``."""
    allowed = ci_allowed(gi)
    if any(c not in allowed or cis.count(c) > allowed[c] for c in set(cis)):
        return False

    def starts(c: int) -> range:
        return range(0, gi.slices - c + 1, 1 << (c - 1).bit_length())

    def rec(i: int, used: int) -> bool:
        if i == len(cis):
            return True
        c = cis[i]
        for s in starts(c):
            m = ((1 << c) - 1) << s
            if not used & m and rec(i + 1, used | m):
                return True
        return False

    return rec(0, 0)


def parse_request(profiles: Sequence[GiProfile], mig: Iterable[str], ci: Iterable[str], gpu_label: str) -> list[WantGi]:
    """The GPU instances a ``partition`` asks for (``--mig`` items, ``--ci`` subdivisions)."""
    gis: list[GiProfile] = []
    for name, count in split_items(mig):
        if CI_RE.match(name):
            raise InvalidInput(f"{name!r} is a compute-instance profile: give it with --ci", value=name)
        p = find_profile(profiles, name, gpu_label)
        if count > p.max_count:
            raise InvalidInput(f"{count} x {p.name} requested but {gpu_label} holds at most {p.max_count}", value=name)
        gis.extend([p] * count)
    subdiv: dict[int, list[int]] = {}
    for name, count in split_items(ci):
        m = CI_RE.match(name)
        if m is None:
            raise InvalidInput(f"bad compute-instance profile {name!r}: use <c>c.<gpu-instance profile>", value=name)
        p = find_profile(profiles, m.group("gi"), gpu_label)
        subdiv.setdefault(p.id, []).extend([int(m.group("c"))] * count)
    for pid, cis in subdiv.items():
        p = next(q for q in profiles if q.id == pid)
        if p not in gis:
            raise InvalidInput(f"--ci subdivides {p.name}, which --mig does not request", value=p.name)
        cis.sort(reverse=True)
        if not ci_layout_fits(p, cis):
            allowed = ", ".join(f"{c}c x{n}" for c, n in ci_allowed(p).items())
            got = "+".join(f"{c}c" for c in cis)
            raise InvalidInput(f"{got} does not fit in one {p.name} (allowed: {allowed})", value=p.name)
    return [WantGi(p, tuple(subdiv.get(p.id, [p.slices])), strict=p.id in subdiv) for p in gis]
