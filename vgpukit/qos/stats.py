"""Achieved-share windows and latency samples: pure bookkeeping on caller-supplied times (ns)."""

from __future__ import annotations

from collections import deque

BUCKET_NS = 100_000_000  # 100 ms
KEEP = 102  # buckets kept: a full 10 s window plus the partial ones at both ends


class ShareWindows:
    """Device time granted per tenant in 100 ms buckets, for 1 s and 10 s achieved shares."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.buckets: dict[str, dict[int, int]] = {}

    def add(self, name: str, begin: int, end: int) -> None:
        if end <= begin:
            return
        b = self.buckets.setdefault(name, {})
        t = begin
        fresh = False
        while t < end:
            idx = t // BUCKET_NS
            stop = min(end, (idx + 1) * BUCKET_NS)
            if idx in b:
                b[idx] += stop - t
            else:
                b[idx] = stop - t
                fresh = True
            t = stop
        if fresh:  # prune only when a bucket was opened
            low = end // BUCKET_NS - KEEP
            for old in [i for i in b if i < low]:
                del b[old]

    def share(self, name: str, now: int, window_ns: int) -> float:
        """Fraction of the last ``window_ns`` (extended to a bucket boundary) the tenant held the device."""
        cur = now // BUCKET_NS
        first = max(0, now - window_ns) // BUCKET_NS
        since = max(first * BUCKET_NS, self.start)
        denom = now - since
        if denom <= 0:
            return 0.0
        b = self.buckets.get(name, {})
        used = sum(v for i, v in b.items() if first <= i <= cur)
        return min(1.0, used / denom)

    def drop(self, name: str) -> None:
        self.buckets.pop(name, None)


class Samples:
    """The last N latency samples (seconds) with percentiles."""

    def __init__(self, n: int = 2000) -> None:
        self.values: deque[float] = deque(maxlen=n)

    def add(self, value: float) -> None:
        self.values.append(value)

    def quantile(self, q: float) -> float | None:
        if not self.values:
            return None
        data = sorted(self.values)
        return data[min(len(data) - 1, int(q * len(data)))]

    def summary(self) -> dict[str, float | int | None]:
        return {
            "count": len(self.values),
            "p50_ms": _ms(self.quantile(0.5)),
            "p99_ms": _ms(self.quantile(0.99)),
            "max_ms": _ms(max(self.values) if self.values else None),
        }


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)
