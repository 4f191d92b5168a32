"""Policy arithmetic on a fake clock: a simulated device runs whoever the scheduler grants."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from vgpukit.qos.policy import NS_PER_MS, Scheduler

MS = NS_PER_MS
S = 1000 * MS

Demand = Callable[[str, int], bool]  # (tenant, now) -> busy


def always(_name: str, _now: int) -> bool:
    return True


def run(
    sched: Scheduler,
    until: int,
    demand: Demand,
    start: int = 0,
    jitter_ms: float = 0.0,
    step: int = MS,
    seed: int = 1,
) -> dict[str, int]:
    """Advance the device from ``start`` to ``until``; returns ns each tenant actually ran.

    Demand is re-read every ``step`` (a notifying tenant); the daemon wakes late by up to
    ``jitter_ms`` at each timed decision, and the late time is real device time.
    """
    rng = random.Random(seed)
    got: dict[str, int] = {n: 0 for n in sched.tenants}
    now = start
    for name in sched.tenants:
        sched.set_busy(name, demand(name, now), now)
    d = sched.decide(now)
    while now < until:
        nxt = now + step
        if d.next_at is not None and d.next_at < nxt:
            nxt = d.next_at + int(rng.random() * jitter_ms * MS)
        nxt = min(max(nxt, now + 1), until)
        if d.granted is not None:
            got[d.granted] += nxt - now
        now = nxt
        for name in sched.tenants:
            sched.set_busy(name, demand(name, now), now)
        d = sched.decide(now)
        # invariant: exactly the busy tenants other than the granted one are frozen
        busy = {n for n, t in sched.tenants.items() if t.busy}
        assert d.frozen == busy - {d.granted}
        assert d.granted is None or d.granted in busy
    return got


def shares(got: dict[str, int], span: int) -> dict[str, float]:
    return {k: 100.0 * v / span for k, v in got.items()}


def make(policy: str, tenants: list[tuple[str, str, int]], slice_ms: int = 10) -> Scheduler:
    return Scheduler.create(policy, slice_ms, tenants, now=0)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_best_effort_equal(n: int) -> None:
    s = make("best-effort", [(f"t{i}", "offline", 10) for i in range(n)])
    got = shares(run(s, 10 * S, always, jitter_ms=2), 10 * S)
    for v in got.values():
        assert abs(v - 100 / n) < 0.5


@pytest.mark.parametrize(("a", "b"), [(30, 70), (67, 33), (10, 90)])
def test_fixed_share_both_busy(a: int, b: int) -> None:
    s = make("fixed-share", [("a", "offline", a), ("b", "offline", b)])
    got = shares(run(s, 10 * S, always, jitter_ms=3), 10 * S)
    assert abs(got["a"] - a) < 0.3
    assert abs(got["b"] - b) < 0.3


def test_fixed_share_never_exceeds_when_partner_idle() -> None:
    s = make("fixed-share", [("a", "offline", 30), ("b", "offline", 70)])
    got = shares(run(s, 10 * S, lambda n, t: n == "a", jitter_ms=3), 10 * S)
    assert 29.5 < got["a"] <= 30.2  # late wake-ups become debt, paid back
    assert got["b"] == 0


def test_fixed_share_below_100_leaves_device_idle() -> None:
    s = make("fixed-share", [("a", "offline", 20), ("b", "offline", 30)])
    got = shares(run(s, 10 * S, always), 10 * S)
    assert abs(got["a"] - 20) < 0.3 and abs(got["b"] - 30) < 0.3


def test_burst_share_lends_and_takes_back() -> None:
    s = make("burst-share", [("a", "offline", 30), ("b", "offline", 70)])
    # b idle for the first 5 s: a gets everything
    got = shares(run(s, 5 * S, lambda n, t: n == "a"), 5 * S)
    assert got["a"] > 99.9
    # b busy again: within 50 ms both are at 30/70 (no catch-up burst for either)
    got = run(s, 5 * S + 50 * MS, always, start=5 * S)
    assert got["b"] >= 30 * MS  # b gets >= 60% of the first 50 ms
    got = shares(run(s, 10 * S, always, start=5 * S + 50 * MS), 10 * S - 5 * S - 50 * MS)
    assert abs(got["a"] - 30) < 0.5 and abs(got["b"] - 70) < 0.5


def test_burst_share_idle_split_in_proportion_to_shares() -> None:
    # Huawei's example: 5/5/10 with the third idle -> 50/50/0
    s = make("burst-share", [("a", "offline", 5), ("b", "offline", 5), ("c", "offline", 10)])
    got = shares(run(s, 10 * S, lambda n, t: n != "c"), 10 * S)
    assert abs(got["a"] - 50) < 0.5 and abs(got["b"] - 50) < 0.5 and got["c"] == 0


def test_online_preempts_offline_immediately() -> None:
    s = make("best-effort", [("on", "online", 50), ("off", "offline", 50)])
    s.set_busy("off", True, 0)
    d = s.decide(0)
    assert d.granted == "off"
    s.set_busy("on", True, 3 * MS)  # mid-slice
    d = s.decide(3 * MS)
    assert d.granted == "on" and d.frozen == {"off"} and d.preempted == ("off",)
    assert s.tenants["off"].preemptions == 1
    s.set_busy("on", False, 5 * MS)
    d = s.decide(5 * MS)
    assert d.granted == "off" and not d.frozen


def test_offline_gets_what_online_leaves() -> None:
    s = make("best-effort", [("on", "online", 50), ("off", "offline", 50)])

    def demand(n: str, t: int) -> bool:  # online busy 2 ms of every 10 ms
        return n == "off" or (t % (10 * MS)) < 2 * MS

    got = shares(run(s, 5 * S, demand, step=MS // 2), 5 * S)
    assert abs(got["on"] - 20) < 1 and abs(got["off"] - 80) < 1


def test_fixed_share_within_online_class_and_offline_fills_rest() -> None:
    s = make(
        "fixed-share",
        [("on1", "online", 20), ("on2", "online", 40), ("off", "offline", 100)],
    )
    got = shares(run(s, 10 * S, always, jitter_ms=1), 10 * S)
    assert abs(got["on1"] - 20) < 0.5 and abs(got["on2"] - 40) < 0.5
    assert abs(got["off"] - 40) < 0.5  # what online leaves


def test_burst_share_among_online_tenants() -> None:
    s = make("burst-share", [("on1", "online", 25), ("on2", "online", 50), ("off", "offline", 10)])
    got = shares(run(s, 6 * S, always), 6 * S)
    assert abs(got["on1"] - 100 / 3) < 0.5 and abs(got["on2"] - 200 / 3) < 0.5 and got["off"] == 0


def test_configure_keeps_history_and_drops_removed() -> None:
    s = make("best-effort", [("a", "offline", 10), ("b", "offline", 10)])
    run(s, 1 * S, always)
    served = s.tenants["a"].served_ns
    s.configure("best-effort", 10, [("a", "offline", 10), ("c", "offline", 10)], 1 * S)
    assert set(s.tenants) == {"a", "c"} and s.tenants["a"].served_ns == served
    assert s.tenants["a"].busy and not s.tenants["c"].busy
    got = run(s, 3 * S, always, start=1 * S)
    assert abs(got["a"] - got["c"]) <= 10 * MS


def test_nothing_busy_means_no_timer_and_nothing_frozen() -> None:
    s = make("fixed-share", [("a", "offline", 10)])
    d = s.decide(0)
    assert d.granted is None and not d.frozen and d.next_at is None


def test_fixed_share_timer_wakes_when_credit_returns() -> None:
    s = make("fixed-share", [("a", "offline", 10)], slice_ms=10)
    s.set_busy("a", True, 0)
    d = s.decide(0)
    assert d.granted == "a" and d.next_at == 10 * MS
    d = s.decide(10 * MS)  # credit 10 + 1 - 10 = 1 ms > 0: one more slice
    assert d.granted == "a"
    d = s.decide(20 * MS)  # credit 1 + 1 - 10 = -8 ms: frozen until it is back
    assert d.granted is None and d.frozen == {"a"}
    assert d.next_at is not None and abs(d.next_at - (20 + 80) * MS) <= 1
