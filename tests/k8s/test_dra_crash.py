"""kill -9 of the DRA plugin at every change of a prepare and of an unprepare: nothing leaks.

The plugin killed runs as the real command (``vgpukit k8s dra-plugin``) on a simulated host that kills it just
before its Nth change through the host door (``VGPUKIT_SIM_CRASH_AT_CHANGE``, counted per host the
plugin opens: one per call). For every N until the call completes without a kill, a restarted plugin
(the same code, in the test's process) is asked what the kubelet would ask next: the same prepare
again (the kubelet retries until it succeeds), or the unprepare (the pod was deleted meanwhile).
Either way the host ends where it must:

* after a retried prepare, exactly what an uninterrupted prepare gives (the VF on vfio-pci, the
  claim's spec and record), and its unprepare then puts everything back;
* after an unprepare, the host as before the claim: the VF on its own driver, no spec, no record,
  no journal left.

A share of a GPU shared by capacity (``shared-gpu-...``, the allocation's shareID and consumed capacity in
the claim) runs with the QoS daemon of its simulated host: its tenant is part of the host's state, added
by the prepare and removed by the unprepare, never left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke, sim_host
from tests.engine.helpers import fresh, journal_left
from tests.k8s.apiserver import ApiServer
from tests.k8s.drakubelet import DraKubelet
from tests.k8s.test_dra_plugin import NODE, Node, _ok, api, claim  # noqa: F401 (fixtures)
from vgpukit.host import Host
from vgpukit.k8s.dra.server import plugin_socket, registry_socket
from vgpukit.sim.kernel import CRASH_CHANGE_ENV
from vgpukit.sim.nvml import CRASH_ENV as NVML_CRASH_ENV
from vgpukit.sriov.binding import current_driver

ROOT = str(Path(__file__).resolve().parents[2])
LIMIT = 60  # kill points tried at most per call (a prepare of a VF makes about a dozen changes)


class Plugin:
    """``vgpukit k8s dra-plugin`` as a process, and the kubelet peer registered with it."""

    def __init__(
        self, sim: Path, kubeconfig: Path, crash_at: int = 0, killer: str = CRASH_CHANGE_ENV, args: tuple[str, ...] = ()
    ) -> None:
        self.host = sim_host(sim)
        for sock in (registry_socket(self.host), plugin_socket(self.host)):
            self.host.remove(sock)  # a killed plugin's sockets: the test waits for new ones
        env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONFAULTHANDLER": "1"}
        env.pop(CRASH_CHANGE_ENV, None)
        env.pop(NVML_CRASH_ENV, None)
        if crash_at:
            env[killer] = str(crash_at)
        cmd = [sys.executable, "-m", "vgpukit", "--sim", str(sim), "k8s", "dra-plugin", "--node", NODE]
        cmd += ["--kubeconfig", str(kubeconfig), "--interval", "30", *args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not registry_socket(self.host).exists() and time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read()  # type: ignore[union-attr]
            time.sleep(0.05)
        resolve = lambda shown: self.host.socket_address(self.host.path(*shown.strip("/").split("/")))  # noqa: E731
        self.kubelet = DraKubelet(registry_socket(self.host).parent, resolve)
        self.kubelet.register()

    def call(self, verb: str, ref: tuple[str, str, str]) -> Any:
        """The claim's answer, or None when the plugin died during the call."""
        try:
            return getattr(self.kubelet, verb)(ref).claims[ref[2]]
        except Exception:  # grpc.RpcError: UNAVAILABLE, the connection lost with the process
            if self.proc.wait(timeout=30) != -9:
                raise
            return None

    def close(self) -> None:
        self.kubelet.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # where it hangs, every thread's stack (PYTHONFAULTHANDLER) in the failure
            self.proc.send_signal(signal.SIGABRT)
            _out, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"the plugin did not end on SIGTERM:\n{err}") from None
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@dataclass(frozen=True)
class Case:
    name: str
    setup: tuple[tuple[str, ...], ...]
    kind: str  # the DRA device kind claimed (its first device of the static view; "mig-3g.20gb": made on demand)
    profile: str = "hgx-a100"
    args: tuple[str, ...] = ()  # more arguments of the plugin
    shared: bool = False  # a share of the device shared by capacity (the QoS daemon runs; the library is there)


CASES = [
    Case("vf-bound-at-prepare", (("sriov", "enable", "nic1", "--vfs", "2"),), "vf"),
    Case("whole-gpu", (), "gpu"),
    # gpu0 in MIG mode with an operator's 1g.5gb (slot 6): the claim's 3g.20gb is made at prepare
    Case("mig-made-on-demand", (("partition", "gpu0", "--mig", "1g.5gb"),), "mig-3g.20gb"),
    # a Hopper GPU with MIG mode off: prepare turns it on (and records that), then makes the 3g.40gb;
    # unprepare destroys it and turns MIG mode off again (and forgets it)
    Case("mig-mode-toggled", (), "mig-3g.40gb", profile="hgx-h100"),
    Case("gpu-shared-by-capacity", (), "gpu", args=("--share-by-capacity", "gpu"), shared=True),
]
SHARE = {"shareID": "0b5e4a8c-2f1d-4c3b-9a7e-6d5c4b3a2f10", "consumedCapacity": {"memory": "4Gi", "computeShare": "25"}}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for case in CASES:
        sim = fresh(tmp_path_factory.mktemp("dra-crash"), case.profile, case.name)
        for args in case.setup:
            _ok(sim, *args)
        invoke(sim, "health")  # the health layer's state, as a host that ran before has it
        if case.shared:  # the CUDA library a share's memory cap needs, the pod's cgroup
            from tests.k8s.test_dra_capacity import LIBRARY, pod_cgroup

            (sim / LIBRARY).parent.mkdir(parents=True, exist_ok=True)
            (sim / LIBRARY).write_text("a stand-in\n")
            pod_cgroup(sim, "pod-crash")
        host = sim_host(sim)  # the kubelet's directories, as a running kubelet has them
        host.mkdir(registry_socket(host).parent)
        host.mkdir(plugin_socket(host).parent)
        out[case.name] = sim
    return out


def mig_layout(sim: Path) -> list[tuple[int, int]]:
    """(profile id, start) of gpu0's GPU instances, as the simulated driver has them."""
    from vgpukit.sim.nvml import SimNvml

    n = SimNvml(sim)
    try:
        return sorted((g.profile_id, g.start) for g in n.gpu_instances(0)) if n.mig_mode(0)[0] else []
    finally:
        n.close()


def mig_mode(sim: Path) -> tuple[bool, bool]:
    from vgpukit.sim.nvml import SimNvml

    n = SimNvml(sim)
    try:
        return n.mig_mode(0)
    finally:
        n.close()


def tenants(host: Host) -> list[str]:
    """The QoS daemon's tenants (every GPU), when it runs."""
    from vgpukit.errors import NotFound
    from vgpukit.qos import control

    try:
        return sorted(
            f"{g['gpu']}/{t['name']}" for g in control.request(host, {"op": "status"})["gpus"] for t in g["tenants"]
        )
    except NotFound:
        return []


def state(host: Host, uid: str, bdf: str) -> dict[str, Any]:
    return {
        "tenants": tenants(host),
        "driver": current_driver(host, bdf) if bdf.count(":") == 2 else None,
        "mig": mig_layout(host.root),
        "mode": mig_mode(host.root),
        "mode record": host.dra_mig_mode_record("0000:03:00.0").exists(),
        "made": host.dra_made_record(uid).exists(),
        "spec": host.dra_claim_cdi_spec(uid).exists(),
        "record": host.dra_claim_record(uid).exists(),
        "journal": journal_left(host.root),
    }


@pytest.fixture
def copy(short_tmp: Path, pristine: dict[str, Path]) -> Iterator[Any]:
    n = 0

    def make(case: Case) -> Path:
        nonlocal n
        n += 1
        dst = short_tmp / f"h{n}"
        subprocess.run(["cp", "-a", str(pristine[case.name]), str(dst)], check=True)
        return dst

    yield make


def _pick(sim: Path, kind: str) -> tuple[str, str]:
    from tests.k8s.test_dra_plugin import opener, unusable
    from vgpukit.k8s.dra.devices import dra_devices
    from vgpukit.k8s.dra.server import Driver

    if kind.startswith("mig-"):  # the first placement of the profile the GPU can still hold, made on demand
        parts = Driver(NODE, opener(sim), lambda *_: {}, unusable(sim), partitionable="on").publication()[1]
        found = [
            e["name"]
            for part in parts.values()
            for e in part["devices"]
            if e["attributes"].get("migProfile", {}).get("string") == kind.removeprefix("mig-")
        ]
        return sorted(found)[0], ""
    _env, collect, close = opener(sim)()
    try:
        name, dev = sorted((n, d) for n, d in dra_devices(collect()).items() if d.kind == kind)[0]
        return name, dev.device.topo_bdf or dev.device.id
    finally:
        close()


@contextmanager
def qos_daemon(sim: Path, case: Case) -> Iterator[None]:
    """The simulated host's QoS daemon, for a case of a share (its tenants outlive the plugin's kills)."""
    if not case.shared:
        yield
        return
    from tests.qos.conftest import DaemonProc

    d = DaemonProc(sim, sim=True).start()
    try:
        yield
    finally:
        d.stop()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("verb", ["prepare", "unprepare"])
def test_a_kill_at_every_change_leaks_nothing(
    case: Case,
    verb: str,
    copy: Any,
    api: ApiServer,  # noqa: F811
    short_tmp: Path,
) -> None:
    from vgpukit.k8s.dra.capacity import shared_name

    first = copy(case)
    device, bdf = _pick(first, case.kind)
    ref = ("default", "c", "u-crash")
    doc = claim("u-crash", "c", shared_name(device) if case.shared else device)
    if case.shared:  # the scheduler's allocation of a share, for the pod whose cgroup the host has
        doc["status"]["allocation"]["devices"]["results"][0].update(SHARE)
        doc["status"]["reservedFor"] = [{"resource": "pods", "name": "pod-crash", "uid": "pod-crash"}]
    api.claims[("default", "c")] = doc
    kubeconfig = api.kubeconfig(short_tmp / "kubeconfig")
    with qos_daemon(first, case):
        before = state(sim_host(first), "u-crash", bdf)
    points = 0
    # every change through the host door; for a MIG slice made on demand, every change of the driver too
    killers = [(k, n) for k in (CRASH_CHANGE_ENV, NVML_CRASH_ENV) for n in range(1, LIMIT + 1)]
    done: set[str] = set()
    prepared: Path | None = None  # unprepare: the host with the claim prepared, made once, copied for each kill
    for killer, n in killers:
        if killer in done or (killer == NVML_CRASH_ENV and not case.kind.startswith("mig-")):
            continue
        if prepared is not None:
            sim = short_tmp / f"p{points}-{n}"
            subprocess.run(["cp", "-a", str(prepared), str(sim)], check=True)
        else:
            sim = first if not points and n == 1 else copy(case)
        host = sim_host(sim)
        with qos_daemon(sim, case):
            if verb == "unprepare" and prepared is None:  # a prepared claim, then the unprepare is the call killed
                node = Node(sim, api)
                try:
                    assert node.kubelet.prepare(ref).claims["u-crash"].error == ""
                finally:
                    node.close()
                # the health layer's record brought up to date (the VF changed driver), so the plugin started
                # next makes no change of its own at start-up: every kill point is the unprepare's
                invoke(sim, "health")
                if not case.shared:  # a share's tenant lives in its QoS daemon, not in the tree: prepared each time
                    prepared = short_tmp / "prepared"
                    subprocess.run(["cp", "-a", str(sim), str(prepared)], check=True)
            p = Plugin(sim, kubeconfig, crash_at=n, killer=killer, args=case.args)
            try:
                out = p.call(verb, ref)
            finally:
                p.close()
            if out is not None:  # no kill: every point of this kind was tried
                assert out.error == "", out.error
                done.add(killer)
                continue
            points += 1
            node = Node(sim, api)  # restarted (in this process): its first call repairs, the kubelet asks again
            try:
                if verb == "prepare" and n % 2:  # the kubelet retries the prepare...
                    assert node.kubelet.prepare(ref).claims["u-crash"].error == ""
                    again = state(host, "u-crash", bdf)
                    assert again["spec"] and again["record"] and not again["journal"], (n, again)
                    if case.kind == "vf":
                        assert again["driver"] == "vfio-pci", (n, again)
                    if case.kind.startswith("mig-"):
                        assert len(again["mig"]) == len(before["mig"]) + 1, (n, again)
                    if case.profile == "hgx-h100":  # turned on for the claim, and recorded so
                        assert again["mode"] == (True, True) and again["mode record"], (n, again)
                    if case.shared:  # the share's tenant, once
                        assert again["tenants"] == sorted(
                            [*before["tenants"], f"{share_gpu(node)}/dra-{SHARE['shareID']}"]
                        )
                # ... or the pod is gone: the unprepare leaves the host as before the claim
                assert node.kubelet.unprepare(ref).claims["u-crash"].error == ""
                assert state(host, "u-crash", bdf) == before, n
                assert node.kubelet.unprepare(ref).claims["u-crash"].error == ""  # an unknown claim: nothing to do
            finally:
                node.close()
    assert done == {CRASH_CHANGE_ENV, NVML_CRASH_ENV} or (not case.kind.startswith("mig-") and done), done
    print(f"{verb} {case.name}: {points} kill points")
    assert points >= (2 if case.kind == "gpu" or verb == "unprepare" else 4), points


def share_gpu(node: Node) -> str:
    """The QoS key of the shared GPU (its UUID)."""
    from vgpukit.k8s.dra.capacity import qos_key

    return qos_key(sorted((n, d) for n, d in node.driver.devices().items() if d.kind == "gpu")[0][1])
