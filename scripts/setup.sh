#!/usr/bin/env bash
# Install everything vgpukit needs on a Debian 12 machine (run as root): system packages with
# apt-get, Python packages into ./.venv. Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: Python + venv + compiler (wheels that build), libvirt client library and schemas
# (libvirt-python extra, virt-xml-validate), busybox/cpio/kmod/qemu for the real-kernel tests.
APT_PACKAGES=(python3 python3-venv python3-dev gcc make pkg-config
              libvirt-dev libvirt-clients libvirt0 libxml2-utils)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
echo "setup: installing vgpukit and its Python dependencies into .venv"
.venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/pip install -q -e '.[dev,libvirt]'

echo "setup: building the CUDA interception library (build/libvgpukit-cuda.so)"
make -s -C contrib/cuda O="$PWD/build"
