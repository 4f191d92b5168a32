"""``health --watch`` says when VFs go away (docs/health.md, "`--watch`"): one event per PF for the VFs
that went, ``vfs-missing`` (a PF reset took them, the PF still says how many: a repair is due) or
``vfs-removed`` (their count was changed on purpose: ``sriov disable``, fewer VFs), never a line per VF
and never a VF reported ``pci-gone`` because its PF's VFs were disabled."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke, make_sim
from tests.core.test_json_schemas import validator
from vgpukit.sim import nvml_events

NIC1 = "0000:25:00.0"
VFS = ("0000:25:00.2", "0000:25:00.3")


def _ok(sim: Path, *args: str) -> str:
    r = invoke(sim, *args)
    assert r.exit_code == 0, (args, r.stderr)
    return r.stdout


@pytest.fixture
def sim(tmp_path: Path) -> Path:
    """hgx-a100 with 2 VFs of nic1 on vfio-pci (watched), seen once by ``health``."""
    path = make_sim(tmp_path / "h", "hgx-a100")
    _ok(path, "sriov", "enable", "nic1", "--vfs", "2", "--driver", "vfio-pci")
    _ok(path, "health")
    return path


def _watch(sim: Path, change: Any, *flags: str) -> tuple[int, str]:
    """``health --watch --for 3`` while ``change()`` runs 0.5 s in."""

    def later() -> None:
        time.sleep(0.5)
        change()

    t = threading.Thread(target=later)
    t.start()
    try:
        r = invoke(sim, "health", "--watch", "--for", "3", *flags)
    finally:
        t.join()
    return r.exit_code, r.stdout


def _events(out: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.splitlines()]
    for doc in lines:
        assert not sorted(validator("health-event").iter_errors(doc), key=str)
    return lines


def test_a_pf_reset_is_one_line_naming_how_many_vfs_went(sim: Path) -> None:
    code, out = _watch(sim, lambda: nvml_events.pf_reset(sim, NIC1), "--json")
    got = [(e["bdf"], e["kind"], e["data"], e["severity"], e["action"]) for e in _events(out)]
    assert got == [(NIC1, "vfs-missing", 2, "degraded", "recreate-vfs")]
    assert code == 4  # the VFs are unusable until re-created (health says so, and names the repair)


def test_the_line_says_it_in_words(sim: Path) -> None:
    _, out = _watch(sim, lambda: nvml_events.pf_reset(sim, NIC1))
    assert out.count("\n") == 1
    assert out.split("  ", 1)[1] == (
        f"nic1 ({NIC1}): vfs-missing (2 VFs): VFs configured but missing (a PF reset took them away) "
        "[degraded, action recreate-vfs]\n"
    )


def test_sriov_disable_is_one_line_and_no_vf_is_reported_gone(sim: Path) -> None:
    _ok(sim, "sriov", "disable", "nic1")  # the watch starts with what came since the last look
    r = invoke(sim, "health", "--watch", "--for", "0", "--json")
    code, out = r.exit_code, r.stdout
    got = [(e["bdf"], e["kind"], e["data"], e["severity"]) for e in _events(out)]
    assert got == [(NIC1, "vfs-removed", 2, "info")]
    assert code == 0
    doc = json.loads(_ok(sim, "health", "--json"))
    assert not {d["bdf"] for d in doc["devices"]} & set(VFS)  # forgotten, not pci-gone


def test_fewer_vfs_forgets_the_ones_removed(sim: Path) -> None:
    _ok(sim, "sriov", "enable", "nic1", "--vfs", "1", "--driver", "vfio-pci")  # through 0, as the kernel does
    r = invoke(sim, "health", "--json")
    doc = json.loads(r.stdout)
    assert VFS[1] not in {d["bdf"] for d in doc["devices"]}
    pf_events = [(e["kind"], e["data"]) for d in doc["devices"] for e in d["events"] if d["bdf"] == NIC1]
    assert pf_events == [("vfs-removed", 1)]
    kinds = {e["kind"] for d in doc["devices"] for e in d["events"]}
    assert "pci-gone" not in kinds
    assert "iommu-group-changed" not in kinds  # the VF left is a new function (made again through 0)
    assert all(d["state"] == "healthy" for d in doc["devices"])


def test_vfs_that_left_with_their_pf_are_gone_not_removed(sim: Path) -> None:
    from vgpukit.sim.uevents import AnnouncingTree, publish

    tree = AnnouncingTree(sim)
    for bdf in (NIC1, *VFS):  # the PF left the bus with its VFs (a surprise removal)
        tree.remove_pci_device(bdf)
    publish(tree.root, tree.uevents)
    doc = json.loads(invoke(sim, "health", "--json").stdout)
    gone = {d["bdf"]: d["reasons"] for d in doc["devices"] if d["state"] == "unusable"}
    assert set(gone) == {NIC1, *VFS} and all(r == ["the device left sysfs"] for r in gone.values())


def test_a_slice_xid_line_is_valid_under_the_shipped_schema(sim: Path) -> None:
    """An XID in a MIG slice carries ``gi`` (docs/health.md); the stream's line must validate against
    health-event.json as every other line does (trial 6: it was refused, 'gi' was unexpected)."""
    _ok(sim, "partition", "gpu2", "--mig", "7g.40gb")
    _, out = _watch(sim, lambda: nvml_events.inject_xid(sim, 2, 13, gi=0), "--json")
    slice_lines = [e for e in _events(out) if e["kind"] == "xid"]
    assert [(e["data"], e.get("gi")) for e in slice_lines] == [(13, 0)]


def test_a_stream_line_has_the_fields_of_a_recorded_event_and_its_schema_name() -> None:
    """health-event.json states an event twice (the stream's line at the top, the record's event under
    ``$defs`` for health.json): the two stay the same but for ``schema``."""
    doc = json.loads((Path(__file__).parents[2] / "vgpukit/data/schemas/health-event.json").read_text())
    top = {k: v for k, v in doc["properties"].items() if k != "schema"}
    assert top == doc["$defs"]["event"]["properties"]
    assert [k for k in doc["required"] if k != "schema"] == doc["$defs"]["event"]["required"]
