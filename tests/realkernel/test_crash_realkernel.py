"""Real kernel only: kill -9 of ``sriov enable --driver vfio-pci`` inside its work window, then a
re-run that repairs the interrupted change (journal) and converges; a third run changes nothing.

The kill lands after the command announced its 4th control-file write (``--debug`` prints each write
before making it), so the guest's PF is left half-done: autoprobe off, VFs created, some bound.
"""

from __future__ import annotations

import pytest

from .conftest import GuestSession
from .targets import PF

pytestmark = pytest.mark.realkernel

KILL_SCRIPT = f"""
VGPUKIT sriov disable nvme0 >/dev/null 2>&1
f=/run/vgpukit-kill.fifo; rm -f $f; mkfifo $f
VGPUKIT --debug sriov enable nvme0 --vfs 3 --driver vfio-pci >/dev/null 2>$f & pid=$!
n=0
while IFS= read -r line; do
  case "$line" in "vgpukit.host: write '"*) n=$((n+1)); [ $n -eq 4 ] && kill -9 $pid ;; esac
done < $f
wait $pid; echo "killed-rc=$?"
[ -e /run/vgpukit/journal ] && echo journal-left
echo "numvfs=$(cat /sys/bus/pci/devices/{PF}/sriov_numvfs)"
echo "autoprobe=$(cat /sys/bus/pci/devices/{PF}/sriov_drivers_autoprobe)"
"""

GUEST_STEPS = [
    ("crash-kill", "sh-vgpukit", (KILL_SCRIPT,)),
    ("crash-rerun", "vgpukit", ("sriov", "enable", "nvme0", "--vfs", "3", "--driver", "vfio-pci", "--json")),
    ("crash-again", "vgpukit", ("sriov", "enable", "nvme0", "--vfs", "3", "--driver", "vfio-pci", "--json")),
    ("crash-cleanup", "vgpukit", ("sriov", "disable", "nvme0")),  # the next modules see the PF as booted
]


def test_kill_leaves_a_half_done_pf_and_a_journal(guest: GuestSession) -> None:
    r = guest.step("crash-kill")
    assert r.rc == 0, r.describe()
    assert "killed-rc=137" in r.stdout, r.describe()
    assert "journal-left" in r.stdout, r.describe()
    assert "autoprobe=0" in r.stdout, r.describe()  # turned off while the VFs are created


def test_rerun_repairs_then_converges(guest: GuestSession) -> None:
    r = guest.step("crash-rerun")
    assert r.rc == 0, r.describe()
    assert "recovering an interrupted change" in r.stderr
    pf = r.json()["pf"]
    assert [v["driver"] for v in pf["vfs"]] == ["vfio-pci"] * 3
    assert pf["autoprobe"] is True
    again = guest.step("crash-again")
    assert again.rc == 0 and again.json()["changed"] is False, again.describe()
    assert "recovering" not in again.stderr
