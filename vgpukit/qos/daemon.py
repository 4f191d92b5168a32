"""The QoS daemon: one poll loop driving every GPU's scheduler on the monotonic clock.

Wakes on: a demand datagram (preemption path: receive -> decide -> freeze, no polling), a control request,
a signal, a change of the config file's content (reloaded, as on SIGHUP), the next slice boundary of any
GPU, the sampling tick (only while some tenant's demand is sampled: ``sample``, or ``auto`` before its
first notification), and a 250 ms housekeeping tick (guardian heartbeat, systemd watchdog, liveness of
tenants, the refusal log's summary, metrics). A broken config file never stops a running daemon: a
reload is refused (one log line, ``qos status``, metrics) and the running configuration kept. At start
it is exit 2, before anything is frozen.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cuda import region as cuda_region
from ..errors import InvalidInput, NotFound, VgpukitError
from ..host import Host
from ..libvirt.connection import Session
from ..logs import logger
from ..stopping import Stop, readable
from ..words import plural
from . import demand as demand_proto
from . import planner
from .backends import Backend, backend_for
from .config import Overlay
from .config_watch import ConfigWatch
from .control import ControlServer, daemon_lock
from .memruntime import GpuMemory
from .model import POLICIES, QosConfig, Tenant, check_key
from .runtime import GpuRuntime, Observer
from .safety import Guardian, load_managed, save_managed, thaw_all
from .sampler import Sampler

log = logger("vgpukit.qos")
HOUSEKEEPING_NS = 250_000_000
LIVENESS_NS = 1_000_000_000


def sd_notify(message: str) -> None:
    """systemd's notify protocol (READY=1, WATCHDOG=1, STATUS=...); a no-op outside systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(message.encode(), addr)


class Daemon:
    def __init__(
        self,
        host: Host,
        config_path: Path,
        clock: Callable[[], int] = time.monotonic_ns,
        observer: Observer | None = None,
        libvirt: Session | None = None,
    ) -> None:
        self.host = host
        self.config_path = config_path
        self.clock = clock
        self.observer = observer
        self.libvirt = libvirt or Session()  # the one libvirt connection of domain tenants, opened on use
        self.base = planner.load(host, config_path)  # a broken config fails the start, before any freeze
        self.overlay = Overlay.load(host)
        self.cfg = QosConfig()
        self.sampling = False
        self.gpus: dict[str, GpuRuntime] = {}
        self.sampler = Sampler()
        self.stop = Stop()  # SIGTERM, SIGINT (the stop idiom: vgpukit/stopping.py)
        self.reload_requested = False
        self.config_watch: ConfigWatch | None = None  # the file listened to (from the start of the loop)
        self.reloads = 0
        self.reloads_refused = 0
        self.reload_error: dict[str, str] | None = None  # why the file's content is not what runs
        self.dropped: dict[tuple[str, str], str] = {}  # (GPU key, tenant) -> why it does not run
        self.refusals = demand_proto.Refusals(log)
        self.on_tick: Callable[[Daemon], None] | None = None  # metrics hook

    # ------------------------------------------------------------------ configuration
    def _backends(self, cfg: QosConfig) -> tuple[QosConfig, dict[str, dict[str, Backend]]]:
        """Resolve every tenant's backend; tenants whose target is gone are dropped, and forgotten from the
        runtime overlay (one added at run time with pids that all died would otherwise come back at every
        start, and could freeze whatever process reuses a pid)."""
        out: dict[str, dict[str, Backend]] = {}
        forgot = False
        for key, gpu in list(cfg.gpus.items()):
            out[key] = {}
            for t in gpu.tenants:
                try:
                    out[key][t.name] = backend_for(self.host, t, self.libvirt)
                except VgpukitError as err:
                    log.warning("%s: tenant %s dropped: %s", key, t.name, err)
                    self.dropped[(key, t.name)] = str(err).removeprefix(f"tenant {t.name}: ")  # said beside it
                    cfg = planner.change(cfg, planner.RemoveTenant(key, t.name)).config
                    if t.name in self.overlay.tenants.get(key, {}):
                        self.overlay.forget_tenant(key, t.name)
                        forgot = True
        if forgot:
            self.overlay.save(self.host)
        return cfg, out

    def apply_config(self, cfg: QosConfig) -> None:
        cfg, backends = self._backends(cfg)
        # persist every target that may be frozen before the first freeze of any of them; until the
        # removed tenants are thawed, they stay in the set too
        new = [b.target for bs in backends.values() for b in bs.values()]
        old = [b.target for rt in self.gpus.values() for b in rt.backends.values()]
        save_managed(self.host, old + new)
        previous, self.cfg = self.cfg, cfg
        self._sync_library(previous, cfg)
        for key in [k for k in self.gpus if k not in cfg.gpus]:
            self.gpus.pop(key).thaw_everything()
        for key, gpu in cfg.gpus.items():
            rt = self.gpus.get(key)
            if rt is None:
                rt = self.gpus[key] = GpuRuntime(gpu, backends[key], self.clock, self.observer)
                rt.memory = GpuMemory(key, self.host)
            else:
                self._drop(rt.reconfigure(gpu, backends[key]), key)
            if rt.memory is not None and key in self.gpus:
                rt.memory.recover(rt.spec, rt.hooks)
        if set(old) - set(new):
            save_managed(self.host, new)
        self._update_sampling()

    def _sync_library(self, old: QosConfig, new: QosConfig) -> None:
        """The CUDA library's per-tenant configs (memory cap, in-flight window) follow the tenants."""
        wanted: dict[str, dict[str, int | str]] = {
            t.name: {**g.library_config(t), "gpu": key}
            for key, g in new.gpus.items()
            for t in g.tenants
            if g.library_config(t)
        }
        had = {t.name for g in old.gpus.values() for t in g.tenants if g.library_config(t)}
        try:
            cuda_region.sync_configs(self.host, wanted, had)
        except VgpukitError as err:
            log.warning("CUDA library configs not written: %s", err)

    def _memory_used(self, tenant: str) -> int | None:
        """Bytes the tenant's processes hold on its busiest device (the library's shared region), if any."""
        try:
            usage = cuda_region.read_usage(self.host, tenant)
        except VgpukitError:
            return None
        return usage.peak_used if usage else None

    def _update_sampling(self) -> None:
        self.sampling = any(rt.sampled(t) for rt in self.gpus.values() for t in rt.spec.tenants)

    def effective(self) -> QosConfig:
        cfg, problems = planner.effective(self.base, self.overlay)
        for p in problems:
            log.warning("%s", p)
        return cfg

    def reload(self, asked: bool = True) -> str | None:
        """Re-read the config file; a broken one is refused (one log line) and the running config kept. Not
        ``asked`` (an inotify event, SIGHUP), the bytes refused last are not judged again (:class:`ConfigWatch`)."""
        watch = self.config_watch
        if watch is not None and not watch.judging(asked):
            return (self.reload_error or {}).get("message")
        try:
            base = planner.load(self.host, self.config_path)
        except VgpukitError as err:
            why = str(err)
        except Exception as exc:  # a parser bug must not stop a scheduler holding tenants frozen
            why = f"{self.host.display(self.config_path)}: cannot be read ({type(exc).__name__})"
        else:
            self.base = base
            self.dropped = {}  # the tenants are judged again
            self.apply_config(self.effective())
            self.reloads += 1
            self.reload_error = None
            if watch is not None:
                watch.verdict(refused=False)
            log.info("configuration reloaded: %s", plural(len(self.gpus), "GPU"))
            return None
        self.reloads_refused += 1
        if watch is not None:
            watch.verdict(refused=True)
        self.reload_error = {"message": why, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        log.error("configuration reload refused, keeping the running configuration: %s", why)
        return why

    def counters(self) -> dict[str, Any]:
        """Daemon-wide state for status and metrics: the config's reloads, refused demand datagrams."""
        return {
            "config": {
                "path": str(self.host.display(self.config_path)),
                "reloads": self.reloads,
                "reloads_refused": self.reloads_refused,
                "reload_error": self.reload_error,
                "loaded": self.base.to_dict(),  # the file as loaded last: apply/assert compare it (docs/qos.md)
                "dropped": [{"gpu": g, "tenant": t, "reason": why} for (g, t), why in sorted(self.dropped.items())],
            },
            "demand_refused": dict(self.refusals.total),
        }

    def _drop(self, vanished: list[str], key: str) -> None:
        """Tenants whose cgroup, processes or domain are gone leave the configuration."""
        if not vanished:
            return
        cfg = self.cfg
        for name in vanished:
            log.warning("%s: dropping vanished tenant %s", key, name)
            self.dropped[(key, name)] = "its cgroup, processes or domain went away while it ran"
            with contextlib.suppress(NotFound):
                cfg = planner.change(cfg, planner.RemoveTenant(key, name)).config
            if name in self.overlay.tenants.get(key, {}):
                self.overlay.forget_tenant(key, name)
            self.sampler.forget(f"{key}/{name}")
        self.overlay.save(self.host)
        self.apply_config(cfg)

    # ------------------------------------------------------------------ control requests
    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        dry = bool(req.get("dry_run"))
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "status":
            now = self.clock()
            key = req.get("gpu")
            if key is not None and key not in self.gpus:
                raise NotFound(f"no QoS settings for {key!r}")
            gpus = [self.gpus[k].status(now) for k in sorted(self.gpus) if key in (None, k)]
            for t in (t for g in gpus for t in g["tenants"]):
                t["memory_used"] = self._memory_used(t["name"])
            return {"ok": True, "pid": os.getpid(), "gpus": gpus, **self.counters()}
        if op == "reload":
            refused = self.reload()
            if refused is not None:
                raise InvalidInput(f"reload refused, the running configuration is kept: {refused}")
            return {"ok": True, "plan": ["reload the configuration"]}
        key = check_key(str(req.get("gpu", "")), "GPU key")
        if op == "set":
            return self._op_set(key, req, dry)
        if op == "tenant-add":
            return self._op_add(key, req, dry)
        if op == "tenant-rm":
            return self._op_rm(key, str(req.get("name", "")), dry)
        raise InvalidInput(f"unknown op {op!r}")

    def _op_set(self, key: str, req: dict[str, Any], dry: bool) -> dict[str, Any]:
        policy, slice_ms, memory = req.get("policy"), req.get("slice_ms"), req.get("memory")
        if policy is not None and policy not in POLICIES:
            raise InvalidInput(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        if memory is not None and not isinstance(memory, dict):
            raise InvalidInput("memory must be a mapping of memory QoS settings")
        done = planner.change(self.cfg, planner.SetPolicy(key, policy, slice_ms, memory))
        assert done.gpu is not None
        if done.plan and not dry:
            mem = None if done.gpu.memory.default else done.gpu.memory.to_dict()
            with self.overlay.saving(self.host):
                self.overlay.record_policy(key, done.gpu.policy, done.gpu.slice_ms, mem)
            self.apply_config(done.config)
        return {"ok": True, "plan": done.plan, "gpu": done.gpu.to_dict()}

    def _op_add(self, key: str, req: dict[str, Any], dry: bool) -> dict[str, Any]:
        name = check_key(str(req.get("name", "")), "tenant name")
        tenant = Tenant.from_dict(name, req.get("tenant"))
        done = planner.change(self.cfg, planner.AddTenant(key, tenant))
        if not done.plan:
            return {"ok": True, "plan": [], "tenant": tenant.to_dict()}
        backend_for(self.host, tenant, self.libvirt)  # its cgroup / processes / domain must exist
        if not dry:
            with self.overlay.saving(self.host):
                self.overlay.record_tenant(key, name, tenant)
            self.dropped.pop((key, name), None)
            self.apply_config(done.config)
        return {"ok": True, "plan": done.plan, "tenant": tenant.to_dict()}

    def _op_rm(self, key: str, name: str, dry: bool) -> dict[str, Any]:
        done = planner.change(self.cfg, planner.RemoveTenant(key, name))
        if not dry:
            with self.overlay.saving(self.host):
                self.overlay.record_tenant(key, name, None)
            self.apply_config(done.config)
        return {"ok": True, "plan": done.plan}

    # ------------------------------------------------------------------ demand
    def on_demand(self, data: bytes, pid: int, uid: int) -> None:
        now = self.clock()
        try:
            msg = demand_proto.decode(data, pid, uid)
        except (ValueError, VgpukitError):
            self.refusals.refuse("malformed", f"{len(data)} bytes from pid {pid} (uid {uid})", now)
            return
        rt = self.gpus.get(msg.gpu)
        if rt is None or msg.tenant not in rt.backends:
            self.refusals.refuse("unknown-tenant", f"{msg.gpu}/{msg.tenant} from pid {pid} (uid {uid})", now)
            return
        if uid != 0 and not rt.backends[msg.tenant].owns(pid):
            detail = f"{msg.gpu}/{msg.tenant} from pid {pid} (uid {uid}), not its process"
            self.refusals.refuse("not-owner", detail, now)
            return
        if msg.verb in ("need", "low", "moved"):
            self._memory(rt, msg)
            return
        switched = rt.sampled(rt.spec.tenant(msg.tenant))
        rt.notified(msg.tenant, now)
        if switched and not rt.sampled(rt.spec.tenant(msg.tenant)):  # auto: notifications from now on
            self.sampler.forget(f"{msg.gpu}/{msg.tenant}")
            self._update_sampling()
        self._drop(rt.demand(msg.tenant, msg.busy, now, msg.sent_ns), msg.gpu)

    def _memory(self, rt: GpuRuntime, msg: demand_proto.DemandMsg) -> None:
        """Memory QoS: an online tenant's pressure, or an offline tenant's processes done moving."""
        assert rt.memory is not None
        now = self.clock()
        if msg.verb == "moved":
            rt.memory.check(now, rt.hooks, rt.spec)
        elif rt.spec.tenant(msg.tenant).cls == "online":
            rt.memory.pressure(rt.spec, msg.verb, msg.value, msg.sent_ns, now, rt.hooks)

    def sample(self, now: int) -> None:
        for key, rt in list(self.gpus.items()):
            for t in rt.spec.tenants:
                if not rt.sampled(t) or t.name not in rt.backends:
                    continue
                sid = f"{key}/{t.name}"
                try:
                    cpu = rt.backends[t.name].cpu_ns()
                except VgpukitError:
                    continue  # the liveness check drops it
                frozen = t.name in rt.frozen or rt.thawed_at.get(t.name, -1) >= self.sampler.last_at(sid)
                busy = rt.sched.tenants[t.name].busy
                new = self.sampler.observe(sid, cpu, now, frozen, busy)
                if new is not None:
                    self._drop(rt.demand(t.name, new, now, None), key)

    def check_alive(self) -> None:
        for key, rt in list(self.gpus.items()):
            gone = []
            for name, b in rt.backends.items():
                try:
                    if not b.alive():
                        gone.append(name)
                except VgpukitError:
                    gone.append(name)
            self._drop(gone, key)

    # ------------------------------------------------------------------ the loop
    def run(self, ready: Callable[[], None] | None = None) -> None:
        with daemon_lock(self.host) as lock:  # a second daemon refuses before it touches anything
            self._run(ready, lock)

    def _run(self, ready: Callable[[], None] | None, lock: int) -> None:
        if thawed := thaw_all(self.host, load_managed(self.host)):  # a previous daemon may have died
            log.warning("thawed %d target(s) left by a previous daemon", len(thawed))
        guardian = Guardian.start(self.host, float(self.base.watchdog_s), drop=(lock,))
        stop = self.stop.on_signals(hangup=self._hangup)  # SIGHUP: reload (docs/engine.md, the stop idiom)
        dsock = demand_proto.open_server(self.host)
        ctrl = ControlServer(self.host, self.handle)
        watch = self.config_watch = ConfigWatch(self.host, self.config_path)  # an edit reloads, as SIGHUP does
        try:
            self.apply_config(self.effective())
            sd_notify("READY=1\nSTATUS=scheduling")
            log.info("qos daemon ready (pid %d): %s", os.getpid(), plural(len(self.gpus), "GPU"))
            if ready:
                ready()
            self._loop(guardian, stop, dsock, ctrl, watch)
        finally:
            sd_notify("STOPPING=1")
            for rt in self.gpus.values():
                rt.thaw_everything()
            save_managed(self.host, [])
            ctrl.close()
            dsock.close()
            watch.close()
            for path in (demand_proto.socket_path(self.host), ctrl_path(self.host)):
                with contextlib.suppress(VgpukitError):
                    self.host.remove(path)
            guardian.stop()
            stop.restore()
            self.libvirt.close()
            log.info("qos daemon stopped, every tenant thawed")

    def _hangup(self) -> None:
        self.reload_requested = True

    def _loop(
        self, guardian: Guardian, stop: Stop, dsock: socket.socket, ctrl: ControlServer, watch: ConfigWatch
    ) -> None:
        wd_usec = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
        wd_every = wd_usec * 500 if wd_usec else 0  # ns: half the systemd watchdog
        next_wd = next_house = next_live = next_sample = self.clock()
        while not stop.is_set():
            now = self.clock()
            if self.reload_requested:
                self.reload_requested = False
                self.reload(asked=False)
            for key, rt in list(self.gpus.items()):
                if rt.next_at is not None and rt.next_at <= now:
                    rt.timer.add((now - rt.next_at) / 1e9)
                    self._drop(rt.step(now), key)
            sampling = self.sampling
            if sampling and now >= next_sample:
                self.sample(now)
                next_sample = now + self.cfg.sample_ms * 1_000_000
            if now >= next_house:
                for rt in self.gpus.values():
                    if rt.memory is not None and rt.spec.memory_qos:
                        rt.memory.tick(rt.spec, now, rt.online_busy(), rt.hooks)
                guardian.beat()
                self.refusals.tick(now)
                next_house = now + HOUSEKEEPING_NS
                if now >= next_live:
                    self.check_alive()
                    next_live = now + LIVENESS_NS
                if self.on_tick:
                    self.on_tick(self)
            if wd_every and now >= next_wd:
                sd_notify("WATCHDOG=1")
                next_wd = now + wd_every
            deadlines = [next_house] + [rt.next_at for rt in self.gpus.values() if rt.next_at is not None]
            if sampling:
                deadlines.append(next_sample)
            timeout = max(0.0, (min(deadlines) - self.clock()) / 1e9)
            try:
                fds: list[Any] = [stop, dsock, *ctrl.fds(), *watch.fds()]
                ready = readable(fds, timeout)
            except InterruptedError:
                continue
            for obj in ready:
                if obj is dsock:
                    for data, pid, uid in demand_proto.receive(dsock):
                        self.on_demand(data, pid, uid)
                elif obj is stop:
                    stop.quiet()  # a signal's byte (its handler ran): the loop looks at the flags
                elif obj in watch.fds():
                    self.reload_requested |= watch.changed()
                else:
                    ctrl.ready(obj)


def ctrl_path(host: Host) -> Path:
    from .control import socket_path

    return socket_path(host)
