"""A simulated ``nvidia-cuda-mps-control``: the control daemon's command interface, as far as vgpukit uses it.

``-d`` starts a daemon (the parent returns once it is ready) that writes ``nvidia-cuda-mps-control.pid``
and its ``control`` socket into ``CUDA_MPS_PIPE_DIRECTORY`` and ``control.log`` into
``CUDA_MPS_LOG_DIRECTORY``; a second ``-d`` on the same pipe directory fails. Without ``-d``, commands
are read from stdin, one a line, sent to the daemon and its answers printed: ``quit``,
``set_default_active_thread_percentage P``, ``get_default_active_thread_percentage``,
``set_default_device_pinned_mem_limit DEV VALUE``, ``get_default_device_pinned_mem_limit DEV``.
The simulator's own facts: nothing here reads the product's code.
"""

from __future__ import annotations

import os
import socket
import sys

PID_FILE = "nvidia-cuda-mps-control.pid"


def _dirs() -> tuple[str, str]:
    return (
        os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"),
        os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"),
    )


def _alive(pipe: str) -> bool:
    try:
        with open(os.path.join(pipe, PID_FILE)) as f:
            os.kill(int(f.read().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def _serve(pipe: str, log: str, ready: int) -> None:
    os.chdir(pipe)  # the socket by a relative name: pipe directories may be longer than sun_path
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists("control"):
        os.remove("control")
    srv.bind("control")
    srv.listen(8)
    with open(PID_FILE + ".tmp", "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(PID_FILE + ".tmp", PID_FILE)
    logf = open(os.path.join(log, "control.log"), "a", buffering=1)  # noqa: SIM115
    logf.write(f"Startup: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}\n")
    os.write(ready, b"1")
    os.close(ready)
    state: dict[str, str] = {"atp": "100.0"}
    while True:
        conn, _ = srv.accept()
        with conn:
            words = conn.recv(4096).decode(errors="replace").split()
            reply, stop = "", False
            if words == ["quit"]:
                stop = True
            elif len(words) == 2 and words[0] == "set_default_active_thread_percentage":
                state["atp"] = f"{float(words[1]):.1f}"
                reply = state["atp"]
            elif words == ["get_default_active_thread_percentage"]:
                reply = state["atp"]
            elif len(words) == 3 and words[0] == "set_default_device_pinned_mem_limit":
                state[f"pin{words[1]}"] = words[2]
            elif len(words) == 2 and words[0] == "get_default_device_pinned_mem_limit":
                reply = state.get(f"pin{words[1]}", "none")
            else:
                reply = "Unknown command"
            logf.write(f"Command: {' '.join(words)}\n")
            conn.sendall((reply + "\n").encode())
        if stop:
            logf.write("Exit\n")
            os.remove(PID_FILE)
            os.remove("control")
            return


def daemon() -> int:
    pipe, log = _dirs()
    if _alive(pipe):
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    os.makedirs(pipe, exist_ok=True)
    os.makedirs(log, exist_ok=True)
    r, w = os.pipe()
    if os.fork() > 0:
        os.close(w)
        ok = os.read(r, 1) == b"1"
        return 0 if ok else 1
    os.close(r)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        _serve(pipe, log, w)
    finally:
        os._exit(0)


def client() -> int:
    pipe, _log = _dirs()
    if not _alive(pipe):
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    os.chdir(pipe)
    for line in sys.stdin:
        if not line.strip():
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect("control")
            s.sendall(line.encode())
            out = s.recv(4096).decode(errors="replace").strip()
        if out:
            print(out)
    return 0


def main(argv: list[str]) -> int:
    return daemon() if argv[:1] == ["-d"] else client()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
