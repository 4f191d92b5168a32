#!/bin/sh
# /init of the vgpukit real-kernel initramfs (busybox). Generated assets: /modules.list (one .ko a
# line, in load order). Per run: the writable 9p share "vgpukitout" holds steps.sh (the batch) and
# receives each step's stdout/stderr/rc. Progress is also printed on the serial console as
# "@@VGPUKIT ..." lines so a run can be diagnosed when the share is unusable.
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "@@VGPUKIT init"
while read -r m; do
  [ -n "$m" ] || continue
  insmod "$m" 2>/dev/null || echo "@@VGPUKIT insmod-failed $m"
done < /modules.list

mkdir -p /hostro /ovl /host /out
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /hostro; then
  echo "@@VGPUKIT fatal: cannot mount the host root over 9p"
  poweroff -f
fi
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vgpukitout /out || echo "@@VGPUKIT fatal: no out share"

# A writable view of the host root: overlay with a tmpfs upper layer, so /etc/vgpukit, /etc/mdevctl.d
# and every other path the tool writes exist without touching the (read-only) host.
mount -t tmpfs -o size=256m tmpfs /ovl
mkdir -p /ovl/upper /ovl/work
# /tmp stays the host's (through the overlay) so a checkout under /tmp - where CI may clone - is
# visible in the guest; /run gets a fresh tmpfs so no host state under /run/vgpukit leaks in.
if mount -t overlay overlay -o lowerdir=/hostro,upperdir=/ovl/upper,workdir=/ovl/work /host; then
  echo "@@VGPUKIT root overlay"
else
  echo "@@VGPUKIT root read-only (overlay failed): only /run and /tmp are writable"
  mount --bind /hostro /host
  mount -t tmpfs tmpfs /host/tmp
fi
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mount -t tmpfs tmpfs /host/run
mkdir -p /host/run/vgpukit-guest-out /host/etc/vgpukit /host/etc/mdevctl.d 2>/dev/null
mount --bind /out /host/run/vgpukit-guest-out

# step NAME TIMEOUT COMMAND: run COMMAND with the host's /bin/sh inside the chroot.
step() {
  name=$1; limit=$2; shift 2
  read -r t0 _ < /proc/uptime
  echo "@@VGPUKIT-STEP-BEGIN $name"
  timeout "$limit" chroot /host /bin/sh -c "$*" > "/out/$name.out" 2> "/out/$name.err" < /dev/null
  rc=$?
  read -r t1 _ < /proc/uptime
  echo "$rc $t0 $t1" > "/out/$name.rc"
  echo "@@VGPUKIT-STEP-END $name rc=$rc"
}

echo "@@VGPUKIT-READY"
if [ -f /out/steps.sh ]; then
  . /out/steps.sh
else
  echo "@@VGPUKIT fatal: no steps.sh in the out share"
fi
sync
echo "@@VGPUKIT-DONE"
poweroff -f
