from __future__ import annotations

from vgpukit.qos.sampler import Sampler
from vgpukit.qos.stats import BUCKET_NS, Samples, ShareWindows

MS = 1_000_000


def test_sampler_busy_then_idle_after_quiet_readings() -> None:
    s = Sampler(busy_ratio=0.05, idle_after=3)
    assert s.observe("a", 0, 0, frozen=False, busy=False) is None  # baseline
    assert s.observe("a", 8 * MS, 10 * MS, frozen=False, busy=False) is True
    assert s.observe("a", 8 * MS, 20 * MS, frozen=False, busy=True) is None
    assert s.observe("a", 8 * MS, 30 * MS, frozen=False, busy=True) is None
    assert s.observe("a", 8 * MS, 40 * MS, frozen=False, busy=True) is False


def test_sampler_frozen_keeps_demand() -> None:
    s = Sampler()
    s.observe("a", 0, 0, frozen=False, busy=True)
    for i in range(1, 10):  # frozen: no CPU time, but it must stay busy
        assert s.observe("a", 0, i * 10 * MS, frozen=True, busy=True) is None
    assert s.last_at("a") == 90 * MS


def test_share_windows() -> None:
    w = ShareWindows(start=0)
    w.add("a", 0, 3 * BUCKET_NS)  # busy the first 300 ms
    now = 10 * BUCKET_NS
    assert abs(w.share("a", now, 10 * BUCKET_NS) - 0.3) < 1e-9
    assert w.share("a", now, 5 * BUCKET_NS) == 0.0
    w.add("a", now, now + BUCKET_NS // 2)
    assert abs(w.share("a", now + BUCKET_NS // 2, 10 * BUCKET_NS) - 3.5 / 10.5) < 1e-9
    # old buckets are pruned
    w.add("a", 1000 * BUCKET_NS, 1000 * BUCKET_NS + 1)
    assert min(w.buckets["a"]) >= 1000 - 102


def test_samples_quantiles() -> None:
    s = Samples(n=100)
    for i in range(200):
        s.add(i / 1000)
    q = s.summary()
    assert q["count"] == 100 and q["p50_ms"] == 150.0 and q["max_ms"] == 199.0
