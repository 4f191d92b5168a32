"""``vgpukit remediate`` on a real kernel with a real libvirtd (issue 35, "Proof"), in the session guest.

The emulated NVMe controller's three VFs are bound to vfio-pci and one of them is held by a running
domain of the guest's libvirtd 9.0 (qemu driver, a nested QEMU under TCG, the VF as a managed
``<hostdev>``: QEMU holds ``/dev/vfio/<group>``). ``vgpukit remediate nvme0 --vms shutdown --force``
then: quarantines the PF, asks libvirt to shut the domain down (a guest with no OS ignores the ACPI
request: destroyed after ``--timeout``, as ``--force`` allows), waits until nothing holds a VF, takes
the VFs down, resets the PF through sysfs (the kernel's ``pci_reset_function()``: the nvme driver,
told through reset_prepare/reset_done, sets the controller up again and says so), re-creates the three
VFs with their vfio-pci bindings and bind records, verifies the PF, starts the domain again (a new
QEMU holds the VF) and releases the PF. The guest has no systemd: libvirtd runs by hand with its
logs in files (``stdio_handler = "file"``: no virtlogd) and no namespaces or cgroups, as
test_libvirt_mdev_realkernel.py sets it up.
"""

from __future__ import annotations

import re

import pytest

from .conftest import GuestSession

pytestmark = pytest.mark.realkernel

D = "/tmp/remedy"
DOMAIN = """<domain type='qemu'><name>nvme-vm</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='pc'>hvm</type></os>
<devices><emulator>/usr/bin/qemu-system-x86_64</emulator>
<hostdev mode='subsystem' type='pci' managed='yes'><source>
<address domain='0x0000' bus='0x00' slot='0x02' function='0x1'/></source></hostdev>
</devices></domain>"""

SCRIPT = f"""
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
D={D}; mkdir -p $D /etc/libvirt/qemu /run/libvirt /var/lib/libvirt /var/cache/libvirt /var/log/libvirt
grep -q '^libvirt-qemu:' /etc/passwd ||
  echo 'libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin' >> /etc/passwd
grep -q '^libvirt-qemu:' /etc/group || echo 'libvirt-qemu:x:64055:' >> /etc/group
grep -q '^kvm:' /etc/group || echo 'kvm:x:64056:' >> /etc/group
printf 'user = "root"\\ngroup = "root"\\nsecurity_driver = "none"\\nnamespaces = []\\ncgroup_controllers = []\\n' \\
  > /etc/libvirt/qemu.conf
printf 'remember_owner = 0\\nstdio_handler = "file"\\n' >> /etc/libvirt/qemu.conf
V="virsh -c qemu:///system"
holders() {{ for f in /proc/[0-9]*/fd/*; do t=$(readlink $f 2> /dev/null) || continue
  case $t in /dev/vfio/[0-9]*) c=${{f%/fd/*}}; echo "$(cat $c/comm) ${{c#/proc/}} $t";; esac; done | sort -u; }}
vfs() {{ for v in /sys/bus/pci/devices/0000:00:02.0/virtfn*; do b=$(basename $(readlink $v))
  echo "$b $(basename $(readlink /sys/bus/pci/devices/$b/driver 2> /dev/null) 2> /dev/null)"; done; }}
libvirtd -p /run/libvirt/libvirtd.pid >> $D/libvirtd.log 2>&1 < /dev/null &
i=0; until $V version > /dev/null 2>&1; do
  i=$((i+1)); [ $i -gt 400 ] && echo "libvirtd did not answer" && break; sleep 1; done
VGPUKIT sriov enable nvme0 --vfs 3 --driver vfio-pci > /dev/null
cat > $D/dom.xml <<'XML'
{DOMAIN}
XML
$V define $D/dom.xml > /dev/null && $V start nvme-vm > /dev/null
echo "### before"; holders; echo "### vfs_before"; vfs; echo "### binds_before"; ls /run/vgpukit/bind
echo "### reset_method"; cat /sys/bus/pci/devices/0000:00:02.0/reset_method
dmesg | grep -c 'nvme nvme0: .* queues' > $D/queues
start=$(date +%s.%N)
echo "### remediate"; VGPUKIT remediate nvme0 --connect qemu:///system --vms shutdown --force --timeout 5 --json
echo "rc=$?"
end=$(date +%s.%N)
sleep 2
echo "### after"; holders; echo "### vfs_after"; vfs; echo "### binds_after"; ls /run/vgpukit/bind
echo "### state"; $V domstate nvme-vm; ls /var/lib/vgpukit/quarantine 2> /dev/null | wc -l
echo "### reinit"; echo "$(cat $D/queues) $(dmesg | grep -c 'nvme nvme0: .* queues')"
echo "### seconds"; echo "$start $end" | awk '{{printf "%.1f\\n", $2 - $1}}'
$V destroy nvme-vm > /dev/null 2>&1; $V undefine nvme-vm > /dev/null 2>&1
VGPUKIT sriov disable nvme0 > /dev/null
p=$(cat /run/libvirt/libvirtd.pid); kill $p; while [ -e /proc/$p ]; do sleep 0.5; done
rm -rf /run/libvirt/* /var/cache/libvirt/* /run/vgpukit/remedy /var/lib/vgpukit/quarantine
"""

GUEST_STEPS = [("remedy-nvme-vm", "sh-vgpukit", (SCRIPT,), 900)]


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### (\w+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.fixture
def run(guest: GuestSession) -> dict[str, str]:
    step = guest.step("remedy-nvme-vm")
    assert step.rc == 0, step.describe()
    assert "libvirtd did not answer" not in step.stdout, step.describe()
    return _sections(step.stdout)


def _holders(text: str) -> list[tuple[str, str, str]]:
    return [(c, p, n) for c, p, n in (line.split() for line in text.splitlines() if line.startswith("qemu"))]


def test_a_vm_held_vf_is_drained_the_pf_reset_and_everything_restored(run: dict[str, str]) -> None:
    import json

    assert run["remediate"].strip().endswith("rc=0"), run["remediate"][-3000:]
    before, after = _holders(run["before"]), _holders(run["after"])
    assert [(c, n) for c, _, n in before] == [("qemu-system-x86", "/dev/vfio/7")], run["before"]
    assert [(c, n) for c, _, n in after] == [("qemu-system-x86", "/dev/vfio/7")], run["after"]
    assert before[0][1] != after[0][1], run["remediate"][-3000:]  # a new QEMU: the domain stopped and started again
    assert run["vfs_before"].split("\n")[:3] == [f"0000:00:02.{i} vfio-pci" for i in (1, 2, 3)], run["vfs_before"]
    assert run["vfs_after"] == run["vfs_before"]  # the same VFs, on vfio-pci again
    assert run["binds_after"] == run["binds_before"] and run["binds_before"].strip()  # their bind records too
    assert run["remediate"].strip().endswith("rc=0"), run["remediate"]
    doc = json.loads(run["remediate"].rsplit("rc=", 1)[0])
    assert doc["reset_method"] == "function" and doc["holders"][0]["name"] == "nvme-vm"
    assert doc["plan"][:3] == [
        "quarantine nvme0 (0000:00:02.0)",
        "shut down VM nvme-vm (qemu:///system) (destroyed if still running after the timeout: --force)",
        "wait up to 5 s until nothing holds nvme0 (0000:00:02.0) or a piece of it",
    ]
    assert "reset nvme0 (0000:00:02.0) through /sys/bus/pci/devices/0000:00:02.0/reset" in doc["plan"][4]
    assert doc["plan"][-2:] == ["start VM nvme-vm again (qemu:///system)", "release nvme0 (0000:00:02.0) (verified)"]
    assert run["state"].split() == ["running", "0"]  # running again, nothing left quarantined
    was, now = (int(x) for x in run["reinit"].split())
    assert now == was + 1  # the nvme driver set the controller up again after the reset (reset_done)
    assert run["reset_method"].split()[0] == "flr"
    print(f"remediate nvme0 in the guest: {run['seconds'].strip()} s")
