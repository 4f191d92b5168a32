"""Sampling fallback for tenants that cannot notify: demand inferred from CPU time.

Pure logic; the daemon feeds it readings. Only a tenant that is not frozen can show work, so a
frozen tenant keeps the demand it had (it was frozen because it was busy). A running tenant is busy
when it used at least ``busy_ratio`` of a core since the last reading, idle after ``idle_after``
consecutive readings below that. On a GPU host the same logic would take NVML per-process
utilisation instead of CPU time.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Track:
    last_cpu: int | None = None
    last_at: int = 0
    quiet: int = 0


@dataclass
class Sampler:
    busy_ratio: float = 0.05
    idle_after: int = 3
    tracks: dict[str, _Track] = field(default_factory=dict)

    def observe(self, name: str, cpu_ns: int, now: int, frozen: bool, busy: bool) -> bool | None:
        """Feed one reading; returns the new demand when it changes, else None."""
        tr = self.tracks.setdefault(name, _Track())
        prev, prev_at = tr.last_cpu, tr.last_at
        tr.last_cpu, tr.last_at = cpu_ns, now
        if frozen or prev is None or now <= prev_at:
            tr.quiet = 0
            return None
        ratio = (cpu_ns - prev) / (now - prev_at)
        if ratio >= self.busy_ratio:
            tr.quiet = 0
            return True if not busy else None
        tr.quiet += 1
        if busy and tr.quiet >= self.idle_after:
            return False
        return None

    def last_at(self, name: str) -> int:
        tr = self.tracks.get(name)
        return tr.last_at if tr else -1

    def forget(self, name: str) -> None:
        self.tracks.pop(name, None)
