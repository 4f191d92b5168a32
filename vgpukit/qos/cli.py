"""``vgpukit qos``: the daemon and its control commands."""

from __future__ import annotations

import functools
import logging
import sys
import time
from pathlib import Path
from typing import Any

import click

from ..clikit.context import App
from ..clikit.lazy import LazyGroup
from ..clikit.options import dry_run_option, json_option
from ..clikit.output import emit, emit_result, say, table
from ..clikit.params import NAME, AsciiFloat, AsciiInt, Size
from ..errors import InvalidInput, NotFound
from ..words import size
from . import control
from .mempolicy import MAX_MS, SUSPENDS
from .model import CLASSES, DEMANDS, MAX_INFLIGHT, MAX_INFLIGHT_MS, MAX_PID, POLICIES, Tenant


@click.group("qos", cls=LazyGroup)
def qos() -> None:
    """GPU time-slice QoS: policies, online/offline preemption, per-tenant status."""


@qos.command("daemon")
@click.option(
    "--config", "config_path", metavar="FILE", help="Config file (default: /etc/vgpukit/qos.yaml).", type=NAME
)
@click.option("--metrics-port", type=AsciiInt(1, 65535), metavar="PORT", help="Serve Prometheus metrics on this port.")
@click.option("--metrics-addr", default="", metavar="ADDR", help="Bind address for metrics (default: all).")
@click.pass_obj
def daemon_cmd(app: App, config_path: str | None, metrics_port: int | None, metrics_addr: str) -> None:
    """Run the scheduler in the foreground (systemd Type=notify; SIGHUP reloads the config)."""
    from .config import default_config_path
    from .daemon import Daemon
    from .metrics import Metrics

    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.DEBUG if app.debug else logging.INFO,
            stream=sys.stderr,
            format="vgpukit-qos: %(levelname)s: %(message)s",
        )
    host = app.host
    path = Path(config_path) if config_path else default_config_path(host)
    metrics = Metrics() if metrics_port is not None else None
    d = Daemon(host, path, observer=metrics)
    if metrics is not None:
        assert metrics_port is not None
        m = metrics

        def tick(dm: Daemon) -> None:
            now = dm.clock()
            m.update([rt.status(now) for rt in dm.gpus.values()], dm.counters())

        d.on_tick = tick
        server = m.bind(metrics_port, metrics_addr)  # refused before anything starts, READY=1 included

        def serve() -> None:
            server.serve_in_thread(d.stop)

        d.run(ready=serve)
    else:
        d.run()


@qos.command("set")
@click.argument("gpu", type=NAME)
@click.option("--policy", type=click.Choice(POLICIES), help="best-effort, fixed-share or burst-share.")
@click.option("--slice-ms", type=AsciiInt(1, 1000), help="Time slice in ms (default: 10).")
@click.option(
    "--memory-watermark",
    type=Size(lo=0),
    help="Memory QoS: device memory kept free for online tenants (0, the default: only refused allocations count).",
)
@click.option("--memory-suspend", type=click.Choice(SUSPENDS), help="Memory QoS: the last resort for offline tenants.")
@click.option(
    "--memory-restore-ms",
    type=AsciiInt(0, MAX_MS),
    metavar="MS",
    help="Memory QoS: quiet time before memory goes back.",
)
@click.option(
    "--memory-reclaim-ms",
    type=AsciiInt(0, MAX_MS),
    metavar="MS",
    help="Memory QoS: how long an online allocation waits for memory.",
)
@json_option
@dry_run_option
@click.pass_obj
def set_cmd(
    app: App,
    gpu: str,
    policy: str | None,
    slice_ms: int | None,
    memory_watermark: int | None,
    memory_suspend: str | None,
    memory_restore_ms: int | None,
    memory_reclaim_ms: int | None,
) -> None:
    """Set the policy, slice length and memory QoS of GPU (any key: gpu0, a PCI address, a MIG UUID)."""
    memory = {
        k: v
        for k, v in (
            ("watermark", memory_watermark),
            ("suspend", memory_suspend),
            ("restore_ms", memory_restore_ms),
            ("reclaim_ms", memory_reclaim_ms),
        )
        if v is not None
    }
    if policy is None and slice_ms is None and not memory:
        raise InvalidInput("give --policy, --slice-ms and/or a --memory-* setting")
    gpu = _check_key(app, gpu)
    req: dict[str, Any] = {"op": "set", "gpu": gpu, "policy": policy, "slice_ms": slice_ms, "dry_run": app.dry_run}
    if memory:
        req["memory"] = memory
    reply = control.request(app.host, req)
    emit_result(app, "qos-set", plan=reply["plan"], data={"gpu": gpu, "settings": reply.get("gpu")})


@qos.group("tenant", cls=LazyGroup)
def tenant() -> None:
    """Add and remove tenants."""


@tenant.command("add")
@click.argument("gpu", type=NAME)
@click.argument("name", type=NAME)
@click.option("--class", "cls", type=click.Choice(CLASSES), required=True, help="online or offline.")
@click.option("--share", type=AsciiInt(1, 100), required=True, help="Share in percent (1-100).")
@click.option(
    "--cgroup", metavar="CGROUP", help="cgroup (v2 or v1 freezer): /sys/fs/cgroup/... or relative.", type=NAME
)
@click.option(
    "--pid", "pids", type=AsciiInt(2, MAX_PID), multiple=True, help="Process id (repeat, or several after one --pid)."
)
@click.option("--domain", metavar="NAME", help="libvirt domain (suspended/resumed).", type=NAME)
@click.option(
    "--demand",
    type=click.Choice(DEMANDS),
    default="auto",
    show_default=True,
    help="How busy/idle is known: auto (CPU time sampled until the tenant's first notification), notify, sample.",
)
@click.option("--memory", type=Size(), help="GPU memory cap per device for libvgpukit-cuda (e.g. 4GiB).")
@click.option(
    "--memory-burst", type=Size(), help="Offline tenants: unified memory beyond --memory, lent back under pressure."
)
@click.option("--inflight", type=AsciiInt(1, MAX_INFLIGHT), help="Launches outstanding per stream (CUDA library).")
@click.option("--inflight-ms", type=AsciiInt(1, MAX_INFLIGHT_MS), help="ms of queued work per stream (CUDA library).")
@click.argument("more_pids", nargs=-1, type=AsciiInt(2, MAX_PID))
@json_option
@dry_run_option
@click.pass_obj
def tenant_add(
    app: App,
    gpu: str,
    name: str,
    cls: str,
    share: int,
    cgroup: str | None,
    pids: tuple[int, ...],
    domain: str | None,
    demand: str,
    memory: int | None,
    memory_burst: int | None,
    inflight: int | None,
    inflight_ms: int | None,
    more_pids: tuple[int, ...],
) -> None:
    """Add tenant NAME to GPU: exactly one of --cgroup, --pid N..., --domain."""
    all_pids = (*pids, *more_pids)
    if more_pids and not pids:
        raise InvalidInput(f"unexpected arguments {list(more_pids)} (pids go after --pid)")
    given = [x for x in (cgroup, all_pids, domain) if x]
    if len(given) != 1:
        raise InvalidInput("give exactly one of --cgroup, --pid, --domain")
    kind = "cgroup" if cgroup else "pids" if all_pids else "domain"
    t = Tenant(
        name,
        cls,
        share,
        kind,
        cgroup=cgroup,
        pids=tuple(all_pids),
        domain=domain,
        demand=demand,
        memory=memory,
        inflight=inflight,
        inflight_ms=inflight_ms,
        memory_burst=memory_burst,
    ).validate()
    gpu = _check_key(app, gpu)  # the input first, then the host
    from .planner import refuse_quarantined

    refuse_quarantined(app.host, [gpu], lambda: app.nvml)  # the planner's quarantine rule, before the daemon is asked
    reply = control.request(
        app.host, {"op": "tenant-add", "gpu": gpu, "name": name, "tenant": t.to_dict(), "dry_run": app.dry_run}
    )
    plan = [*reply["plan"], *_refresh(app)]
    caps = (
        ("--memory", memory),
        ("--memory-burst", memory_burst),
        ("--inflight", inflight),
        ("--inflight-ms", inflight_ms),
    )
    asked = [o for o, v in caps if v]
    warnings = _cuda_warnings(app, name, asked)
    for w in warnings:
        sys.stderr.write(f"vgpukit: warning: {w}\n")
    data = {"gpu": gpu, "name": name, "tenant": reply["tenant"], "warnings": warnings}
    emit_result(app, "qos-tenant", plan=plan, data=data)


def _check_key(app: App, gpu: str) -> str:
    """The QoS planner's host rules for the GPU key (a device it names is a GPU of this host, not in MIG
    mode), as ``apply`` holds a host config's ``qos:`` to them; the key in its canonical form (every
    name of one GPU is one key: docs/qos.md, "GPU keys")."""
    from .planner_host import check_key_here

    return check_key_here(app.host, gpu, nvml=lambda: app.nvml)


def _key(app: App, gpu: str) -> str:
    """The canonical form of a key a command looks up (``tenant rm``, ``status``, ``notify``)."""
    from .planner_host import canonical_key

    return canonical_key(app.host, gpu, nvml=lambda: app.nvml)


def _by_key(app: App, gpu: str, req: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The daemon's answer to ``req`` about ``gpu`` by its canonical key, else (a key written before
    keys were canonical, a DRA claim's ``GPU-`` UUID key) by the key as given."""
    key = _key(app, gpu)
    try:
        return key, control.request(app.host, {**req, "gpu": key})
    except NotFound:
        if key == gpu:
            raise
        return gpu, control.request(app.host, {**req, "gpu": gpu})


def _cuda_warnings(app: App, name: str, given: list[str]) -> list[str]:
    """The QoS planner's CUDA library rule for this tenant (``given``: its caps, --memory...)."""
    from .planner import library, library_warnings

    return library_warnings(library(app.host), name, given)


@tenant.command("rm")
@click.argument("gpu", type=NAME)
@click.argument("name", type=NAME)
@json_option
@dry_run_option
@click.pass_obj
def tenant_rm(app: App, gpu: str, name: str) -> None:
    """Remove tenant NAME from GPU (it is thawed first)."""
    gpu, reply = _by_key(app, gpu, {"op": "tenant-rm", "name": name, "dry_run": app.dry_run})
    emit_result(app, "qos-tenant", plan=[*reply["plan"], *_refresh(app)], data={"gpu": gpu, "name": name})


def _refresh(app: App) -> list[str]:
    """Tenants change through the daemon, not the change engine: the gpu-share CDI spec is brought up
    to date here, the engine's way (under the host lock, journaled), when spec generation is enabled."""
    from ..engine import refresh

    return refresh(app.env)


DEMAND_SHOWN = {
    "sampled": "sample",
    "notified": "notify",
    "waiting": "notify:waiting",
    "auto-sampled": "auto:sampled",
    "auto-notified": "auto:notified",
}


def _size(n: int) -> str:
    """words.size without its space, for the memory column (``1GiB/8GiB+24GiB``)."""
    return size(n).replace(" ", "")


def _memory(t: dict[str, Any]) -> str:
    """used/cap of the CUDA library's region ('-' when the tenant has neither); with memory QoS the
    burst, and where the memory is: on the device, moved to the host, suspended."""
    used, cap, burst = t.get("memory_used"), t.get("memory"), t.get("memory_burst")
    if used is None and cap is None:
        return "-"
    text = f"{_size(used or 0)}/{_size(cap) if cap else 'no cap'}" + (f"+{_size(burst)}" if burst else "")
    if "memory_state" in t:
        text += f" dev {_size(t['memory_resident'])} host {_size(t['memory_evicted'])}"
        if t["memory_suspended"] or t["memory_state"] == "suspended":
            text += f" suspended {_size(t['memory_suspended'])}"
    return text


def _human_status(gpus: list[dict[str, Any]], daemon: dict[str, Any]) -> None:
    if not gpus and not (daemon.get("config") or {}).get("dropped"):
        say("no GPUs configured")
    for g in gpus:
        rows = [
            [
                t["name"],
                t["class"],
                f"{t['share']}%",
                t["state"],
                f"{t['achieved_1s']:.1f}%",
                f"{t['achieved_10s']:.1f}%",
                t["preemptions"],
                f"{t['frozen_s']:.1f}",
                DEMAND_SHOWN.get(t.get("demand_source", ""), t["demand"]),
                _memory(t),
                t["target"],
            ]
            for t in g["tenants"]
        ]
        lat = g["latency"]
        table(
            f"{g['gpu']}: {g['policy']}, slice {g['slice_ms']} ms",
            ["tenant", "class", "share", "state", "1s", "10s", "preempted", "frozen s", "demand", "memory", "target"],
            rows,
        )
        parts = [f"{k} p50/p99 {v['p50_ms']}/{v['p99_ms']} ms" for k, v in lat.items() if v.get("count")]
        if parts:
            say("  latency: " + "; ".join(parts))
        if g.get("memory"):
            m = g["memory"]
            ev = m.get("eviction") or {}
            say(
                f"  memory: watermark {size(m['watermark'])}, suspend {m['suspend']}, restore after"
                f" {m['restore_ms']} ms, reclaim up to {m['reclaim_ms']} ms; {m.get('rounds', 0)} eviction rounds"
                + (f" (p50/p99 {ev['p50_ms']}/{ev['p99_ms']} ms)" if ev.get("count") else "")
                + f", {m.get('suspensions', 0)} suspensions"
            )
        if any(t.get("demand_source") == "waiting" for t in g["tenants"]):
            say("  notify:waiting: no busy/idle notification received yet, so never scheduled (see --demand)")
    conf = daemon.get("config") or {}
    for d in conf.get("dropped") or []:
        say(f"not running: {d['gpu']}: tenant {d['tenant']} (dropped: {d['reason']})", "yellow")
    if conf.get("reload_error"):
        err = conf["reload_error"]
        say(f"config: last reload refused at {err['at']}, the previous configuration runs: {err['message']}")
    refused = {k: v for k, v in (daemon.get("demand_refused") or {}).items() if v}
    if refused:
        say("demand datagrams refused: " + ", ".join(f"{k} {v}" for k, v in refused.items()))


@qos.command("status")
@click.argument("gpu", required=False, type=NAME)
@click.option("--watch", is_flag=True, help="Refresh every --interval seconds until interrupted.")
@click.option(
    "--interval",
    type=AsciiFloat(0.1, 60),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between refreshes with --watch.",
)
@json_option
@click.pass_obj
def status_cmd(app: App, gpu: str | None, watch: bool, interval: float) -> None:
    """Per tenant: class, share, achieved share (1 s, 10 s), state, preemptions."""
    while True:
        if gpu:
            gpu, reply = _by_key(app, gpu, {"op": "status"})
        else:
            reply = control.request(app.host, {"op": "status", "gpu": None})
        gpus = reply["gpus"]
        if watch and not app.json and sys.stdout.isatty():
            click.clear()
        extra: dict[str, Any] = {k: reply[k] for k in ("config", "demand_refused") if k in reply}
        doc = {"daemon_pid": reply.get("pid"), "gpus": gpus, **extra}
        emit(app, "qos-status", doc, functools.partial(_human_status, gpus, extra))
        if not watch:
            return
        sys.stdout.flush()
        time.sleep(interval)


@qos.command("notify")
@click.argument("gpu", type=NAME)
@click.argument("name", type=NAME)
@click.argument("state", type=click.Choice(["busy", "idle"]))
@click.pass_obj
def notify_cmd(app: App, gpu: str, name: str, state: str) -> None:
    """Send one demand datagram for tenant NAME (what the C hook and the Python client do)."""
    from .demand import DemandClient

    client = DemandClient.for_host(app.host, _key(app, gpu), name)
    if not client.send(state == "busy"):
        raise InvalidInput(f"no QoS daemon listens on {app.host.display(client.path)}")
