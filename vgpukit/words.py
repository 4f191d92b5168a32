"""English for messages, in one place: a count with its noun, an article, a range of names or numbers.

``plural(1, "NIC")`` is ``1 NIC``, ``plural(4, "NIC")`` ``4 NICs``, ``plural(2, "NVMe controller")``
``2 NVMe controllers``; ``article("integer")`` is ``an integer``; ``span("nic", 0, 0)`` is ``nic0``
and ``span("nic", 0, 3)`` ``nic0..nic3``; ``slots(2, 1)`` is ``slot 2``, ``slots(2, 2)`` ``slots 2-3``;
``condense(lines)`` folds lines that differ only in their numbers and addresses into one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# what varies between lines of the same kind: PCI addresses, UUIDs, device aliases, whole numbers
# (a number inside a word names a kind of thing, as in 2g.10gb: it stays)
_VARYING = re.compile(
    r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\b(?:gpu|nic|nvme)\d+\b|\b\d+\b",
    re.IGNORECASE,
)


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``n`` and the noun in the number ``n`` takes (``nouns``: the plural when it is not noun + s)."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def bytes_text(n: int) -> str:
    """``n`` bytes in the largest binary unit that divides it (``1 PiB``, ``1536 MiB``, ``7 bytes``)."""
    for shift, unit in ((50, "PiB"), (40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return plural(n, "byte")


def article(word: str) -> str:
    """``word`` with a or an (by its first letter: right for the words vgpukit's messages use)."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def span(prefix: str, first: int, last: int, sep: str = "..") -> str:
    """``nic0`` or ``nic0..nic3``."""
    return f"{prefix}{first}" if first == last else f"{prefix}{first}{sep}{prefix}{last}"


def slots(start: int, size: int) -> str:
    """``slot 2`` or ``slots 2-3`` (MIG placement slots)."""
    return f"slot {start}" if size <= 1 else f"slots {start}-{start + size - 1}"


def size(n: int) -> str:
    """A byte count as a person reads it: ``0 B``, ``512 MiB``, ``1 GiB``, ``1.5 GiB`` (binary units, at
    most one decimal; exact byte counts stay in ``--json``)."""
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} B"


def condense(lines: Sequence[str]) -> list[str]:
    """Lines that differ only in numbers, PCI addresses and UUIDs folded into their first, in the order
    each kind first appears: ``bind VF 0 (0000:05:00.2) to vfio-pci, and 15 more like it``."""
    groups: dict[str, list[str]] = {}
    for text in lines:
        groups.setdefault(_VARYING.sub("#", text), []).append(text)
    return [g[0] if len(g) == 1 else f"{g[0]}, and {len(g) - 1} more like it" for g in groups.values()]
