"""The device plugin follows another command's changes: run in the real-kernel guest (a ``GUEST_STEPS``
step of test_watch_realkernel.py) or on a simulated qemu-guest host (``--sim DIR``).

``vgpukit k8s device-plugin`` runs as a process with nothing on a timer (``--interval`` and
``--resync`` an hour), registered with the kubelet stand-in (tests/k8s/kubelet.py); this process
changes the host with the CLI (in-process, as another command would) and times, from the moment the
change engine committed the change (its journal removed: inotify) to the ListAndWatch update that
shows it: VFs created on vfio-pci, a VF's driver bound to vfio-pci. Prints one JSON document.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.k8s.kubelet import Kubelet
from tests.realkernel.targets import PF, PF_IDS, VF_BDFS, RealTarget, SimTarget, Target
from vgpukit.host.notify import IN_DELETE, IN_MOVED_FROM, Inotify
from vgpukit.k8s.plugin import plugin_dir

RESOURCE = "vgpukit.io/vf-" + PF_IDS.replace(":", "-")
REPS = 3
WAIT = 120.0  # seconds for an update that must come (TCG is slow; no timer of the plugin's can bring it)
START = 600.0  # seconds for the plugin to start listening (imports and a first full read, under TCG)


@contextlib.contextmanager
def commits(target: Target) -> Iterator[list[float]]:
    """When the change engine committed while the block ran (its journal removed)."""
    notify = Inotify(target.host)
    target.host.mkdir(target.host.state_dir())
    notify.add(target.host.state_dir(), IN_DELETE | IN_MOVED_FROM)
    times: list[float] = []
    done = threading.Event()

    def follow() -> None:
        while not done.is_set():
            if select.select([notify], [], [], 0.05)[0]:
                now = time.monotonic()
                times.extend(now for e in notify.read() if e.name == "journal")

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    try:
        yield times
    finally:
        time.sleep(0.1)
        done.set()
        t.join()
        notify.close()


def cli(target: Target, *args: str) -> float:
    """Run a vgpukit command in-process; the moment its last change was committed (its exit without one)."""
    with commits(target) as times:
        r = target.cli(*args)
        exited = time.monotonic()
    assert r.rc == 0, f"{args}: {r}"
    return max(times, default=exited)


def mark(kubelet: Kubelet) -> tuple[object, int]:
    """Where the resource's updates are now: later updates are the next change's."""
    ep = kubelet.endpoints.get(RESOURCE)
    return ep, len(ep.updates) if ep is not None else 0


def seen(kubelet: Kubelet, since: tuple[object, int], want: Callable[[set[str]], bool]) -> float | None:
    """When the first update after ``since`` showing ``want`` came (None: not within WAIT); a
    resource registered anew (its endpoint replaced) counts from its first update."""
    end = time.monotonic() + WAIT
    with kubelet.changed:
        while time.monotonic() < end:
            ep = kubelet.endpoints.get(RESOURCE)
            updates = [] if ep is None else ep.updates[since[1] :] if ep is since[0] else ep.updates
            at = next((t for t, devices in updates if want(set(devices))), None)
            if at is not None:
                return at
            kubelet.changed.wait(timeout=1.0)
    return None


def timed(kubelet: Kubelet, target: Target, want: Callable[[set[str]], bool], *args: str) -> float | None:
    """Milliseconds from the command's commit to the update showing ``want`` (0: it came first)."""
    before = mark(kubelet)
    made = cli(target, *args)
    at = seen(kubelet, before, want)
    return None if at is None else round(1000 * max(0.0, at - made))


def started(proc: subprocess.Popen[str]) -> str:
    """The plugin's first line (it is listening from then on; a process under TCG starts slowly)."""
    assert proc.stdout is not None
    if select.select([proc.stdout], [], [], START)[0]:
        line = proc.stdout.readline().strip()
        if line:
            return line
    proc.terminate()
    _out, err = proc.communicate(timeout=60)
    raise SystemExit(f"the device plugin said nothing within {START:g} s (exit {proc.returncode}): {err[-3000:]}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--sim"] and len(argv) == 2:
        target: Target = SimTarget(Path(argv[1]))
    elif argv == ["--real"] and os.environ.get("VGPUKIT_IN_GUEST") == "1":  # never the machine running the suite
        target = RealTarget()
    else:
        raise SystemExit("usage: python -m tests.realkernel.watch_probe --sim DIR | --real (in the guest)")
    target.reset()  # no VFs (an earlier step may have left some)
    kubelet = Kubelet(plugin_dir(target.host)).start()
    argv_dp = [sys.executable, "-m", "vgpukit", *target.argv(("k8s", "device-plugin", "--share-replicas", "0"))]
    argv_dp += ["--interval", "3600", "--resync", "3600"]
    proc = subprocess.Popen(argv_dp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: dict[str, Any] = {"target": target.kind, "vfs_created_ms": [], "driver_bound_ms": [], "missed": []}
    vf1, vf2 = VF_BDFS[0], VF_BDFS[1]
    began = time.monotonic()
    try:
        out["plugin"] = started(proc)
        out["plugin_start_s"] = round(time.monotonic() - began, 1)
        with contextlib.redirect_stderr(io.StringIO()):
            for _ in range(REPS):
                both = lambda ids: ids == {vf1, vf2}  # noqa: E731
                ms = timed(kubelet, target, both, "sriov", "enable", PF, "--vfs", "2", "--driver", "vfio-pci")
                out["vfs_created_ms"].append(ms) if ms is not None else out["missed"].append("enable")
                if timed(kubelet, target, lambda ids: ids == {vf1}, "unbind", vf2) is None:
                    out["missed"].append("unbind")
                ms = timed(kubelet, target, both, "bind", vf2, "--driver", "vfio-pci")
                out["driver_bound_ms"].append(ms) if ms is not None else out["missed"].append("bind")
                if timed(kubelet, target, lambda ids: not ids, "sriov", "disable", PF) is None:
                    out["missed"].append("disable")
    finally:
        proc.terminate()
        try:
            _stdout, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _stdout, err = proc.communicate()
        out["plugin_exit"] = proc.returncode
        out["plugin_stderr"] = err[-2000:]
        kubelet.stop()
        with contextlib.suppress(Exception):
            target.reset()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VGPUKIT_RESYNC", "3600")
    sys.exit(main(sys.argv[1:]))
