"""What each step observed, returned by the executor (issue 31), and the one attribute step, SetAttr.

* the run's :class:`Outcome` carries, per applied step, what it read before and read back after;
* :class:`SetAttr` (a one-value file): its inverse is the value it read, it verifies itself by reading
  back, a value already there is neither written nor journaled, and its undo puts the read value back;
* a journal written by a vgpukit before SetAttr (kind ``sriov-autoprobe``) is still replayed;
* ``sriov enable`` renders its report from the outcome (its VFs as its steps read them back).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from tests.conftest import sim_host
from vgpukit.engine import Env, Observed, Step, execute, session, step_kind, to_entry
from vgpukit.engine.attr import SetAttr
from vgpukit.engine.files import PutFile
from vgpukit.engine.journal import Journal, pending
from vgpukit.errors import VerifyFailed

from .helpers import fresh

NIC0 = "0000:05:00.0"  # hgx-a100's first SR-IOV NIC (autoprobe on)
AUTOPROBE = f"/sys/bus/pci/devices/{NIC0}/sriov_drivers_autoprobe"


@step_kind
@dataclass(frozen=True)
class Fails(Step):
    kind: ClassVar[str] = "test-observed-fails"

    def describe(self) -> str:
        return "fail"

    def apply(self, env: Env) -> None:
        raise VerifyFailed("this step fails")


def _autoprobe(sim: Path) -> str:
    return (sim / AUTOPROBE.lstrip("/")).read_text().strip()


def test_the_outcome_carries_what_a_set_attr_read_before_and_after(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    assert _autoprobe(sim) == "1"
    step = SetAttr(AUTOPROBE, "0", f"sriov_drivers_autoprobe of {NIC0}")
    outcome = execute(Env(sim_host(sim), command="test"), [step])
    assert outcome.observed == (Observed(step, "1", "0"),)
    assert outcome.done == (f"set sriov_drivers_autoprobe of {NIC0} to 0",)
    assert _autoprobe(sim) == "0"
    assert [(s, o.after) for s, o in outcome.of(SetAttr)] == [(step, "0")]


def test_a_set_attr_undo_puts_back_the_value_it_read(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    env = Env(sim_host(sim), command="test")
    with pytest.raises(VerifyFailed, match="rolled back the 1 step done"):
        execute(env, [SetAttr(AUTOPROBE, "0"), Fails()])
    assert _autoprobe(sim) == "1"
    # journaled before the change: a command killed after it is repaired by the next one
    assert SetAttr(AUTOPROBE, "0").inverse(env) == SetAttr(AUTOPROBE, "1", "", " (as it was)")
    execute(env, [SetAttr(AUTOPROBE, "0", "autoprobe")])
    book = Journal(env.host, "killed")
    book.add_all([to_entry(SetAttr(AUTOPROBE, "1", "autoprobe", " (as it was)"))])
    with session(env) as lines:  # the next command repairs it first
        pass
    assert "put back: set autoprobe to 1 (as it was)" in lines and _autoprobe(sim) == "1"
    assert pending(env.host) is None


def test_a_value_already_there_is_not_written_nor_journaled(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    env = Env(sim_host(sim), command="test")
    step = SetAttr(AUTOPROBE, "1")
    assert step.inverse(env) is None
    outcome = execute(env, [step])
    assert outcome.observed == (Observed(step, "1", "1"),)


def test_a_set_attr_verifies_itself(tmp_path: Path) -> None:
    """A file that is not there (nothing to write to) is a failed step, rolled back with the others."""
    sim = fresh(tmp_path, "hgx-a100")
    env = Env(sim_host(sim), command="test")
    missing = f"/sys/bus/pci/devices/{NIC0}/no_such_attribute"
    with pytest.raises(VerifyFailed, match=f"{missing} is not there after writing it; rolled back the 1 step"):
        execute(env, [SetAttr(AUTOPROBE, "0"), SetAttr(missing, "1")])
    assert _autoprobe(sim) == "1"


def test_a_put_file_observes_the_text_before_and_after(tmp_path: Path) -> None:
    sim = fresh(tmp_path, "hgx-a100")
    (sim / "etc/vgpukit").mkdir(parents=True, exist_ok=True)
    (sim / "etc/vgpukit/x.conf").write_text("old\n")
    step = PutFile("/etc/vgpukit/x.conf", "new\n")
    outcome = execute(Env(sim_host(sim), command="test"), [step])
    assert outcome.observed == (Observed(step, "old\n", "new\n"),)


def test_a_journal_from_before_set_attr_is_replayed(tmp_path: Path) -> None:
    """An older vgpukit journaled the autoprobe's inverse as kind ``sriov-autoprobe``."""
    sim = fresh(tmp_path, "hgx-a100")
    env = Env(sim_host(sim), command="test")
    execute(env, [SetAttr(AUTOPROBE, "0")])
    old = {
        "kind": "sriov-autoprobe",
        "text": f"set sriov_drivers_autoprobe of {NIC0} to 1 (as it was)",
        "pf": NIC0,
        "value": True,
        "why": " (as it was)",
        "was": None,
        "module": "vgpukit.sriov.steps",
    }
    Journal(env.host, "killed").add_all([old])
    with session(env) as lines:
        pass
    assert f"put back: set sriov_drivers_autoprobe of {NIC0} to 1 (as it was)" in lines
    assert _autoprobe(sim) == "1"


def test_sriov_enable_reports_from_what_its_steps_observed(tmp_path: Path) -> None:
    """Each VF's driver, override and record in the report are what its BindDriver step read back or
    wrote (the run's outcome), and they are what the host holds."""
    from vgpukit.holders import OpenFiles
    from vgpukit.pci import Scan
    from vgpukit.sriov import planner
    from vgpukit.sriov.model import Bound, read_pf
    from vgpukit.sriov.steps import BindDriver, DeviceNow, observed

    sim = fresh(tmp_path, "hgx-a100")
    host = sim_host(sim)
    scan = Scan(host)
    steps = planner.plan(planner.Facts(host, scan), planner.EnableRequest(NIC0, 4, "vfio-pci", timeout=5))
    outcome = execute(Env(host, command="test"), steps)
    binds = list(outcome.of(BindDriver))
    assert len(binds) == 4
    for step, seen in binds:
        assert isinstance(seen.before, DeviceNow) and seen.before.back.driver is None  # autoprobe was off
        assert isinstance(seen.after, Bound) and seen.after.driver == seen.after.override == "vfio-pci"
        assert isinstance(seen.after.record, str) and step.bdf in seen.after.record
    autoprobe = [o for s, o in outcome.of(SetAttr)]
    assert [(o.before, o.after) for o in autoprobe] == [("1", "0"), ("0", "1")]  # off while created, as it was
    known = observed(outcome)
    assert set(known.drivers) == {s.bdf for s, _ in binds} and known.attrs == {AUTOPROBE: "1"}
    reported = read_pf(host, NIC0, OpenFiles(host), known=known, before=scan.device(NIC0))
    fresh_read = read_pf(host, NIC0, OpenFiles(host), scan=Scan(host))
    assert reported == fresh_read and reported.autoprobe
