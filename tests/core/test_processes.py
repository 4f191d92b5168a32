"""One answer to "is this process alive": vgpukit.processes, read through the host door."""

from __future__ import annotations

import os
from pathlib import Path

from vgpukit import processes
from vgpukit.host import Host


def _stat(root: Path, pid: int, state: str, start: int) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    rest = " ".join(["0"] * 18)  # fields 4..21
    (d / "stat").write_text(f"{pid} (a (b) c) {state} {rest} {start} 0 0\n")


def test_alive_reads_the_state_and_the_start_time(tmp_path: Path) -> None:
    host = Host(tmp_path)
    _stat(tmp_path, 4242, "S", 777)
    _stat(tmp_path, 4243, "Z", 777)
    _stat(tmp_path, 4244, "T", 5)
    assert processes.alive(host, 4242) and processes.alive(host, 4242, 777)
    assert not processes.alive(host, 4242, 778)  # the pid was reused since
    assert not processes.alive(host, 4243)  # a zombie holds nothing
    assert processes.state(host, 4244) == "T" and processes.start_time(host, 4244) == 5
    assert processes.state(host, 4245) is None and processes.start_time(host, 4245) is None


def test_without_proc_the_signal_answers(tmp_path: Path) -> None:
    host = Host(tmp_path)  # no proc/ under this root
    assert processes.alive(host, os.getpid())
    assert not processes.alive(host, 4194304)  # above pid_max: no such process
