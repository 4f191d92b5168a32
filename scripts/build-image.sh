#!/usr/bin/env bash
# build-image.sh [--deb DEB] [--base TAR]: the node image localhost/vgpukit:<version>
# (deploy/image/Containerfile) without any image registry (docs/kubernetes.md "The image"):
#   1. a Debian 12 root file system: debootstrap --variant=minbase from this machine's apt mirror, with
#      the .deb's Depends included (cached as /var/tmp/vgpukit-image/rootfs-<hash>.tar, keyed by them),
#   2. `podman import` of it as localhost/vgpukit-base:<hash>,
#   3. `podman build` of the Containerfile installing the .deb (dpkg -i, no network).
#   --deb DEB   install this package (default: scripts/build-deb.sh builds one from a clean tree)
#   --base TAR  (or VGPUKIT_IMAGE_BASE=TAR, which scripts/release.sh passes on) step 1 from a Debian 12
#               root file system you already have, made with debootstrap --variant=minbase (a tarball
#               of it): the Depends are installed into a copy with apt-get (no Recommends) instead of
#               running debootstrap; the key of the cache then includes the tarball's sha256.
#               tests/ship uses it to debootstrap once for the .deb's chroot and the image.
# Needs root, debootstrap, podman (+ runc). Prints the image name.
set -euo pipefail
cd "$(dirname "$0")/.."
DEB=""; BASE_TAR=${VGPUKIT_IMAGE_BASE:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) DEB=$(realpath "$2"); shift 2;;
    --base) BASE_TAR=$2; shift 2;;
    *) echo "usage: $0 [--deb DEB] [--base TAR]" >&2; exit 2;;
  esac
done
if [ -n "$BASE_TAR" ]; then
  [ -f "$BASE_TAR" ] || { echo "build-image: no such base tarball: $BASE_TAR" >&2; exit 2; }
  BASE_TAR=$(realpath "$BASE_TAR")
fi
CACHE=/var/tmp/vgpukit-image; mkdir -p "$CACHE"
W=$(mktemp -d "${TMPDIR:-/tmp}/vgpukit-image.XXXXXX"); MOUNTS=()
cleanup() {  # unmount what --base bound, and never remove through a mount left behind
  for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null || true; done
  if awk -v w="$W/" 'index($5, w) == 1 {f = 1} END {exit !f}' /proc/self/mountinfo; then
    echo "build-image: $W still has mounts under it; left in place" >&2
  else
    rm -rf "$W"
  fi
}
trap cleanup EXIT
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
if [ "${VGPUKIT_TEST_PODMAN_REROOT:-}" = 1 ] || ! awk '$5 == "/" {f = 1} END {exit !f}' /proc/self/mountinfo; then
  # in a chroot / is not a mount point and runc cannot make it a slave mount: run podman in its own
  # mount namespace whose / is a recursive bind of this one (as tests/attach/test_podman.py does)
  mkdir "$W/reroot"
  PODMAN=(unshare --mount --propagation unchanged sh -c 'mount --rbind / "$0" && exec chroot "$0" "$@"' "$W/reroot"
          "${PODMAN[@]}")
fi
[ -n "$DEB" ] || DEB=$(bash scripts/build-deb.sh -o "$W/deb" | tail -1)
VERSION=$(dpkg-deb -f "$DEB" Version)
# the Depends, without version constraints, as debootstrap's --include list
DEPENDS=$(dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/(.*)//; s/ //g' | grep -v '^$' | sort -u | paste -sd, -)
mirror() {  # the Debian archive this machine's apt uses (as ../shared/tools/fresh-machine.sh finds it)
  { awk '/^URIs:/{print $2}' /etc/apt/sources.list.d/*.sources 2>/dev/null; awk '$1=="deb"{print $2}' /etc/apt/sources.list 2>/dev/null; } \
    | grep -v -E 'security|updates' | head -1
}
if [ -n "$BASE_TAR" ]; then
  KEY=$({ printf 'bookworm base %s\n' "$DEPENDS"; sha256sum <"$BASE_TAR"; } | sha256sum | cut -c1-12)
else
  KEY=$(printf 'bookworm minbase %s\n' "$DEPENDS" | sha256sum | cut -c1-12)
fi
BASE=localhost/vgpukit-base:$KEY
if ! "${PODMAN[@]}" image exists "$BASE"; then
  if [ ! -f "$CACHE/rootfs-$KEY.tar" ]; then
    R=$W/rootfs
    if [ -n "$BASE_TAR" ]; then
      # the base plus the Depends, by apt in a chroot with /proc and /dev bound (non-recursive binds,
      # unmounted again below or by the trap; not in a private mount namespace: in a chroot, as in the
      # fresh-machine check, / is not a mount point and its propagation cannot be changed)
      mkdir "$R" && tar -C "$R" -xf "$BASE_TAR"
      [ -e "$R/etc/resolv.conf" ] && cp -a "$R/etc/resolv.conf" "$W/resolv.conf"
      rm -f "$R/etc/resolv.conf" && cp /etc/resolv.conf "$R/etc/resolv.conf"
      for m in proc dev; do mount --bind "/$m" "$R/$m"; MOUNTS+=("$R/$m"); done
      chroot "$R" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
        sh -ec "apt-get update -qq && apt-get install -y -qq --no-install-recommends $(echo "$DEPENDS" | tr , ' ')" \
        >"$W/apt.log" 2>&1 </dev/null || { tail -20 "$W/apt.log" >&2; exit 1; }
      for m in "${MOUNTS[@]}"; do umount "$m"; done; MOUNTS=()
      rm -f "$R/etc/resolv.conf"; [ -e "$W/resolv.conf" ] && cp -a "$W/resolv.conf" "$R/etc/resolv.conf"
      rm -rf "$R"/var/cache/apt/*.bin "$R"/var/log/apt/*
    else
      debootstrap --variant=minbase --include="$DEPENDS" bookworm "$R" "$(mirror)" >"$W/debootstrap.log" 2>&1 \
        || { tail -20 "$W/debootstrap.log" >&2; exit 1; }
    fi
    rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* "$R"/var/log/*.log
    tar -C "$R" --numeric-owner -cf "$CACHE/rootfs-$KEY.tar.part" . && mv "$CACHE/rootfs-$KEY.tar.part" "$CACHE/rootfs-$KEY.tar"
  fi
  "${PODMAN[@]}" import -q "$CACHE/rootfs-$KEY.tar" "$BASE" >/dev/null
fi
cp "$DEB" "$W/vgpukit_${VERSION}_amd64.deb"
IMAGE=localhost/vgpukit:$VERSION
"${PODMAN[@]}" build -q --network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
  --build-arg BASE="$BASE" --build-arg VERSION="$VERSION" -f "$PWD/deploy/image/Containerfile" -t "$IMAGE" "$W" >/dev/null
echo "$IMAGE"
