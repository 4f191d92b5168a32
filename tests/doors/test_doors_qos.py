"""The QoS rules (vgpukit/qos/planner.py) through every door: same refusal, same exit code, same
message, host unchanged.

The area command is ``vgpukit qos tenant add``, which asks the running daemon (a real ``qos daemon``
process on the simulated host, its config file holding the tenants already there); the config doors
(``apply``, the node agent's apply, the Ansible module) are given the whole ``qos:`` section, the
tenants already there and the new one. Before the planner, ``apply`` answered a rule's refusal as
invalid input (exit 2, ``qos: ...``) where the area command says ``conflict`` / ``no-capacity`` (exit
4): the area command's answer now holds for every door. The rules the config doors cannot reach
(adding a tenant that exists with other settings: a config names each tenant once, and ``apply``
replaces its settings) are in tests/qos.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import invoke, make_sim
from tests.doors import harness
from tests.qos.conftest import DaemonProc


@dataclass(frozen=True)
class Row:
    rule: str
    there: dict[str, tuple[str, int]]  # the tenants already on gpu0: name -> (class, share)
    new: tuple[str, str, int]  # the tenant to add: name, class, share
    code: int
    kind: str
    says: str


ROWS = [
    Row("online shares above 100%", {"a": ("online", 60)}, ("b", "online", 50), 4, "conflict",
        "gpu0: online shares add up to 110% (at most 100)"),
    Row("offline shares above 100% (online ones do not count)", {"a": ("offline", 70), "o": ("online", 90)},
        ("b", "offline", 31), 4, "conflict", "gpu0: offline shares add up to 101% (at most 100)"),
    Row("more than 64 tenants on a GPU", {f"t{i}": ("offline", 1) for i in range(64)}, ("b", "offline", 1), 4,
        "no-capacity", "gpu0: at most 64 tenants per GPU"),
]  # fmt: skip


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A process the tenants name (the daemon drops a tenant whose processes are gone)."""
    p = subprocess.Popen(["sleep", "300"])
    yield p.pid
    p.kill()
    p.wait()


def qos_doc(tenants: dict[str, tuple[str, int]], sim: Path) -> dict[str, object]:
    """Each tenant in a cgroup of its own (a process may be in one tenant only), made on the host."""
    for n in tenants:
        (sim / "sys/fs/cgroup" / n).mkdir(parents=True, exist_ok=True)
        (sim / "sys/fs/cgroup" / n / "cgroup.freeze").write_text("0\n")
    docs = {n: {"class": c, "share": s, "cgroup": f"/sys/fs/cgroup/{n}"} for n, (c, s) in tenants.items()}
    return {"gpus": {"gpu0": {"tenants": docs}}}


@pytest.mark.parametrize("row", ROWS, ids=[r.rule for r in ROWS])
def test_every_door_gives_the_same_refusal_and_changes_nothing(row: Row, tmp_path: Path) -> None:
    sim = make_sim(tmp_path / "host", "hgx-a100")
    (sim / "etc/vgpukit").mkdir(parents=True, exist_ok=True)
    name, cls, share = row.new
    config = yaml.safe_dump({"qos": qos_doc({**row.there, name: (cls, share)}, sim)}, default_flow_style=True)
    (sim / "etc/vgpukit/qos.yaml").write_text(yaml.safe_dump(qos_doc(row.there, sim)))
    daemon = DaemonProc(sim, sim=True)
    area = ["qos", "tenant", "add", "gpu0", name, "--class", cls, "--share", str(share)]
    area += ["--cgroup", f"/sys/fs/cgroup/{name}"]
    daemon.start()
    try:
        answers = harness.every_door(sim, tmp_path, config, area)
    finally:
        daemon.stop()
    for answer in answers:
        assert (answer.code, answer.kind, answer.message) == (row.code, row.kind, row.says), answer


def test_a_missing_cuda_library_is_the_same_warning_through_the_area_command_and_apply(
    tmp_path: Path, sleeper: int
) -> None:
    """A tenant with a memory cap while libvgpukit-cuda.so is missing: ``qos tenant add`` warns that
    the cap is not enforced; ``apply`` of the same tenant said nothing before the planner."""
    said = []
    for door in ("area", "apply"):
        sim = make_sim(tmp_path / door, "hgx-a100")
        if door == "area":
            daemon = DaemonProc(sim, sim=True).start()
            try:
                add = ["gpu0", "t1", "--class", "online", "--share", "40", "--memory", "4GiB", "--pid", str(sleeper)]
                r = invoke(sim, "qos", "tenant", "add", *add, "--json")
            finally:
                daemon.stop()
        else:
            doc = {"gpus": {"gpu0": {"tenants": {"t1": {"class": "online", "share": 40, "pids": [sleeper]}}}}}
            doc["gpus"]["gpu0"]["tenants"]["t1"]["memory"] = "4GiB"  # type: ignore[index]
            path = harness.host_config(tmp_path, yaml.safe_dump({"qos": doc}, default_flow_style=True))
            r = invoke(sim, "apply", "-f", str(path), "-c", harness.CONFIG, "--json")
        assert r.exit_code == 0, r.stderr
        said.append((json.loads(r.stdout)["warnings"], r.stderr.strip()))
    (area_warnings, area_line), (apply_warnings, apply_line) = said
    assert area_warnings == apply_warnings and len(area_warnings) == 1
    assert "/usr/lib/vgpukit/libvgpukit-cuda.so is missing" in area_warnings[0]
    assert "its --memory cap is not enforced" in area_warnings[0]
    assert area_line == apply_line == f"vgpukit: warning: {area_warnings[0]}"


def test_a_memory_burst_on_an_online_tenant_is_the_same_refusal_through_every_door(
    tmp_path: Path, sleeper: int
) -> None:
    """Memory QoS: a burst is for offline tenants (online tenants' memory is plain device memory); the area
    command, apply, the node agent and the Ansible module refuse it alike and change nothing."""
    sim = make_sim(tmp_path / "host", "hgx-a100")
    tenant = {"class": "online", "share": 40, "pids": [sleeper], "memory": "1GiB", "memory_burst": "4GiB"}
    config = yaml.safe_dump({"qos": {"gpus": {"gpu0": {"tenants": {"w": tenant}}}}}, default_flow_style=True)
    area = ["qos", "tenant", "add", "gpu0", "w", "--class", "online", "--share", "40", "--pid", str(sleeper)]
    area += ["--memory", "1GiB", "--memory-burst", "4GiB"]
    daemon = DaemonProc(sim, sim=True).start()
    before = harness.host_state(sim)
    try:  # the config doors name the value's path from the file's root first (`$.configs.NAME.qos...: `)
        doors = harness.config_doors(harness.host_config(tmp_path, config), tmp_path)
        answers = [harness.area(sim, area), *(door(sim) for door in doors.values())]
        assert harness.host_state(sim) == before
    finally:
        daemon.stop()
    says = "tenant w: a memory burst is for offline tenants (online tenants' memory is plain device memory)"
    assert {(a.code, a.kind) for a in answers} == {(2, "invalid-input")}, answers
    path = re.compile(r"\$\.configs\.[^.]+\.qos\.gpus\.gpu0\.tenants\.w\.memory_burst: ")
    assert all(path.match(a.message) for a in answers if a.door != "area"), answers
    assert all(path.sub("", a.message).startswith(says) for a in answers), answers
