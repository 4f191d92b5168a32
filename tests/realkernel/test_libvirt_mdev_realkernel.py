"""libvirt as a real client of the mdevctl shim, in the shared session guest: libvirtd 9.0 (Debian 12,
its nodedev driver) runs ``virsh nodedev-define / -list / -dumpxml / -start / -destroy / -undefine``
of an mtty mdev twice -- once over Debian's mdevctl 1.2.0 (``/usr/bin/mdevctl``), once over the shim
installed as ``/usr/sbin/mdevctl`` (a wrapper running ``vgpukit mdev --mdevctl``). libvirt must do
the same over both: the same virsh output, sysfs and definition files after each step.

The guest has no udevd, so libvirt's udev monitor hears of no device appearing or going: libvirtd is
restarted after ``nodedev-start`` and ``nodedev-destroy`` (its start-up enumeration reads sysfs), the
same in both runs; after ``nodedev-define`` and ``-undefine`` the script waits until libvirt's list
shows the change (libvirt re-reads ``mdevctl list --defined`` when /etc/mdevctl.d changes, on its own
time; through the shim each such read is a Python process, seconds under TCG). docs/mdev.md, "libvirt over the shim".
"""

from __future__ import annotations

import re

import pytest

from .conftest import GuestSession

pytestmark = pytest.mark.realkernel

D = "/tmp/libvirt-mdev"
U = "5a1c0de0-0000-4000-8000-00000000d001"

SETUP = f"""
set -e
INSTALL_MDEVCTL
command -v libvirtd virsh
mkdir -p {D} /etc/libvirt/qemu /run/libvirt /var/lib/libvirt /var/cache/libvirt /var/log/libvirt
# what libvirt-daemon-system would add: the qemu driver's user (it starts only when the user exists)
grep -q '^libvirt-qemu:' /etc/passwd ||
  echo 'libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin' >> /etc/passwd
grep -q '^libvirt-qemu:' /etc/group || echo 'libvirt-qemu:x:64055:' >> /etc/group
grep -q '^kvm:' /etc/group || echo 'kvm:x:64056:' >> /etc/group
printf 'user = "root"\\ngroup = "root"\\n' > /etc/libvirt/qemu.conf
# devtmpfs has no /dev/stdin (udev makes it): libvirt passes --jsonfile=/dev/stdin to mdevctl
[ -e /dev/stdin ] || ln -s /proc/self/fd/0 /dev/stdin
cat > {D}/mdevctl-shim <<EOF
#!/bin/sh
export PYTHONPATH=$PYTHONPATH
exec VGPUKIT mdev --mdevctl "\\$@"
EOF
chmod +x {D}/mdevctl-shim
"""

# The round trip, through whichever mdevctl comes first in PATH.
ROUND = f"""
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
D={D}
U={U}
V="virsh -c qemu:///system"
lv_start() {{
  libvirtd -p /run/libvirt/libvirtd.pid >> $D/libvirtd.log 2>&1 < /dev/null &
  i=0; until $V version > /dev/null 2>&1; do i=$((i+1)); [ $i -gt 400 ] && return 1; sleep 1; done
}}
lv_stop() {{ p=$(cat /run/libvirt/libvirtd.pid); kill $p; while [ -e /proc/$p ]; do sleep 0.5; done; }}
r() {{ $V "$@" > $D/out 2> $D/err && s=ok || s=fail; echo "\\$ virsh $* -> $s"; cat $D/out
  sed "s/^/[$1] /" $D/err >> $D/errors; }}
w() {{ i=0; while [ $i -lt 60 ]; do  # libvirt re-reads `mdevctl list --defined` on its own time: wait
  if $V nodedev-list --cap mdev --all | grep -q "$N"
  then [ $1 = present ] && return; else [ $1 = absent ] && return; fi
  sleep 2; i=$((i+1)); done; echo "$N still not $1 after 120 s"; }}
state() {{ echo "sysfs: $(ls /sys/bus/mdev/devices | tr '\\n' ' ')files: $(ls /etc/mdevctl.d/mtty 2>/dev/null |
  tr '\\n' ' ')"; }}
: > $D/errors; : > $D/holders
echo "### which"; command -v mdevctl
echo "### script"
lv_start || echo "libvirtd did not answer"
P=$($V nodedev-list --cap mdev_types | grep -v '^$' | head -1)
echo "parent: $P"
r nodedev-list --cap mdev --all
echo "<device><parent>$P</parent><capability type='mdev'><type id='mtty-1'/><uuid>$U</uuid></capability>
</device>" > $D/dev.xml
r nodedev-define $D/dev.xml
N=$($V nodedev-list --cap mdev --all | grep "$(echo $U | tr - _)" | head -1)
echo "name: $N"; w present; state
r nodedev-list --cap mdev --all
r nodedev-dumpxml $N
r nodedev-start $N
state
lv_stop; lv_start
r nodedev-list --cap mdev
r nodedev-dumpxml $N
for f in /proc/[0-9]*/fd/*; do t=$(readlink $f 2> /dev/null) || continue
  case $t in /dev/vfio/*) c=${{f%/fd/*}}; echo "$(cat $c/comm) $t" >> $D/holders;; esac; done
r nodedev-destroy $N
state
lv_stop; lv_start
r nodedev-list --cap mdev --all
r nodedev-undefine $N
w absent; state
r nodedev-list --cap mdev --all
lv_stop
echo "### errors"; cat $D/errors
echo "### holders"; sort -u $D/holders
"""

RESET = f"""
for d in /sys/bus/mdev/devices/*; do [ -e "$d" ] && echo 1 > "$d/remove"; done
rm -rf /etc/mdevctl.d/mtty /var/cache/libvirt/* /run/libvirt/*; : > {D}/libvirtd.log
"""

GUEST_STEPS = [
    ("libvirt-mdev-setup", "sh-vgpukit", (SETUP,)),
    ("libvirt-mdev-mdevctl", "sh", (ROUND + RESET,), 900),
    (
        "libvirt-mdev-shim",
        "sh",
        (f"rm -f /usr/bin/mdevctl && cp {D}/mdevctl-shim /usr/sbin/mdevctl && {ROUND}{RESET}rm /usr/sbin/mdevctl",),
        1200,
    ),
]


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^### (\w+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.fixture
def runs(guest: GuestSession) -> tuple[dict[str, str], dict[str, str]]:
    setup = guest.step("libvirt-mdev-setup")
    assert setup.rc == 0, setup.describe()
    a, b = guest.step("libvirt-mdev-mdevctl"), guest.step("libvirt-mdev-shim")
    assert a.rc == 0 and b.rc == 0, a.describe() + b.describe()
    return _sections(a.stdout), _sections(b.stdout)


def test_libvirt_ran_over_both(runs: tuple[dict[str, str], dict[str, str]]) -> None:
    ref, ours = runs
    assert ref["which"].strip() == "/usr/bin/mdevctl" and ours["which"].strip() == "/usr/sbin/mdevctl"
    out = ref["script"]
    assert "libvirtd did not answer" not in out, out
    assert "$ virsh nodedev-define" in out and "-> ok" in out, out


def test_libvirt_does_over_the_shim_what_it_does_over_mdevctl(runs: tuple[dict[str, str], dict[str, str]]) -> None:
    ref, ours = runs
    assert ours["script"] == ref["script"], "\n--- mdevctl\n" + ref["script"] + "\n--- shim\n" + ours["script"]


def test_nodedev_start_and_destroy_over_the_shim(runs: tuple[dict[str, str], dict[str, str]]) -> None:
    """``nodedev-destroy`` of a started mdev stops it: libvirtd, which runs ``mdevctl stop``, is not a
    user of the device (docs/decisions.md, "In use")."""
    _, ours = runs
    out = ours["script"]
    for verb in ("define", "start", "destroy", "undefine"):
        assert f"$ virsh nodedev-{verb} " in out and re.search(rf"nodedev-{verb} \S+ -> ok", out), out + ours["errors"]
    assert "in use" not in ours["errors"], ours["errors"]
