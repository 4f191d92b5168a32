#!/usr/bin/env bash
# Install everything vgpukit needs on a Debian 12 machine (run as root): system packages with
# apt-get, Python packages into ./.venv. Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: Python + venv + compiler (wheels that build), libvirt client library and schemas
# (libvirt-python extra, virt-xml-validate), the PCI ID database (device names), podman + runc + a
# static busybox (the CDI specs are proven by running containers: tests/attach/test_podman.py),
# debootstrap, dpkg-dev and lintian (tests/ship: the .deb in a fresh chroot, the node image). The
# real-kernel tests' own packages (qemu, cpio, kmod, xz-utils, kernel headers) are installed by
# tests/realkernel/harness.py when it runs.
APT_PACKAGES=(python3 python3-venv python3-dev gcc make pkg-config
              libvirt-dev libvirt-clients libvirt0 libxml2-utils
              pci.ids podman runc busybox-static
              debootstrap dpkg-dev lintian)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  # exactly "install ok installed" ("deinstall ok config-files", "unknown ok not-installed" are not)
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  for p in "${missing[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] \
      || { echo "setup: $p is still not installed after apt-get install" >&2; exit 1; }
  done
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
echo "setup: installing vgpukit and its Python dependencies into .venv"
.venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/pip install -q -e '.[dev,libvirt,k8s]'

echo "setup: building the CUDA interception library (build/libvgpukit-cuda.so)"
make -s -C contrib/cuda O="$PWD/build"
