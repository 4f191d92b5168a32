#!/usr/bin/env bash
# A short tour of vgpukit on built-in simulated hosts (no GPU needed): topology, SR-IOV + vfio,
# MIG, libvirt XML and CDI, a declarative host config (apply), mediated devices and NVIDIA vGPUs.
# Usage: bash scripts/demo.sh   (as root on Debian 12; installs what it needs first)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${VGPUKIT_DEMO_NO_SETUP:-}" ] || bash scripts/setup.sh   # the test suite runs the tour in its own venv
SIM=${VGPUKIT_DEMO_DIR:-/tmp/vgpukit-demo}
export PATH="$PWD/.venv/bin:$PATH"

section() { printf '\n\033[1;34m== %s\033[0m\n' "$*"; }
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
# a step that must fail with the given exit code (shows vgpukit's one-line errors)
refused() {
  local want=$1; shift
  printf '\n\033[1m$ %s\033[0m   # expected: refused, exit %s\n' "$*" "$want"
  set +e; "$@"; local rc=$?; set -e
  [ "$rc" = "$want" ] || { echo "demo: expected exit $want, got $rc" >&2; exit 1; }
}

section "A simulated HGX A100 host: 8 GPUs, 4 PCIe switches, 4 ConnectX-6, 2 NUMA nodes"
step vgpukit sim init "$SIM/hgx" --profile hgx-a100 --force
export VGPUKIT_SIM="$SIM/hgx"
echo "(VGPUKIT_SIM=$VGPUKIT_SIM: every command below acts on the simulated host)"
step vgpukit topo
step vgpukit topo --matrix
step vgpukit devices --kind gpu

section "SR-IOV virtual functions bound to vfio-pci"
step vgpukit sriov enable nic0 --vfs 4 --driver vfio-pci --dry-run
step vgpukit sriov enable nic0 --vfs 4 --driver vfio-pci
step vgpukit sriov enable nic0 --vfs 4 --driver vfio-pci
step vgpukit sim hold 0000:05:00.3 --vm web1
step vgpukit sriov list nic0
refused 4 vgpukit sriov enable nic0 --vfs 2
step vgpukit bind gpu7 --driver vfio-pci
step vgpukit bind gpu7 --restore

section "Crash safety: a command killed half-way is put back by the next one (host lock + journal)"
echo "(the simulated kernel kills the command just before its 6th control-file write, as kill -9 would)"
refused 137 env VGPUKIT_SIM_CRASH_AT_WRITE=6 vgpukit sriov enable nic1 --vfs 8 --driver vfio-pci
step vgpukit sriov list nic1
step vgpukit recover
step vgpukit sriov enable nic1 --vfs 8 --driver vfio-pci

section "MIG slices through (simulated) NVML"
step vgpukit partition gpu0 --mig 3g.20gb
step vgpukit partition gpu0 --mig 3g.20gb
step vgpukit partition gpu1 --mig 3g.20gb,2g.10gb,1g.5gb=2 --dry-run
refused 2 vgpukit partition gpu1 --mig 4g.20gb,3g.20gb,1g.5gb --dry-run   # can never fit an A100: invalid input
step vgpukit mig status gpu0
step vgpukit mig export -c demo

section "Hand them to a VM (libvirt XML) and to containers (CDI)"
step vgpukit render hostdev 0000:05:00.2
step vgpukit render domain --name gpuvm --memory 16384 --vcpus 8 --device gpu4 --device 0000:05:00.2
step vgpukit attach test 0000:05:00.4 --config --connect test:///default
refused 4 vgpukit attach test 0000:05:00.3 --config --connect test:///default
step vgpukit cdi generate --output -

section "Fleets: one declarative host config, kept current CDI specs, what Kubernetes would see"
step vgpukit sim init "$SIM/fleet" --profile hgx-a100 --force
export VGPUKIT_SIM="$SIM/fleet"
cat > "$SIM/host.yaml" <<'YAML'
version: vgpukit.host/v1
configs:
  vm-and-mig:
    sriov:
      - {device: nic0, vfs: 4, driver: vfio-pci}
    mig: two-halves
mig-configs:
  two-halves:
    - {devices: [0, 1], mig-enabled: true, mig-devices: {"3g.20gb": 2}}
YAML
echo "(written: $SIM/host.yaml)"
step vgpukit cdi enable
step vgpukit diff -f "$SIM/host.yaml" -c vm-and-mig
step vgpukit apply -f "$SIM/host.yaml" -c vm-and-mig
step vgpukit apply -f "$SIM/host.yaml" -c vm-and-mig
step vgpukit assert -f "$SIM/host.yaml" -c vm-and-mig
step vgpukit cdi list
step vgpukit k8s resources

section "Mediated devices (the kernel's mtty sample, as in the real-kernel tests)"
step vgpukit sim init "$SIM/guest" --profile qemu-guest --force
export VGPUKIT_SIM="$SIM/guest"
step vgpukit mdev types
step vgpukit mdev create --type mtty-2 --count 2 --define --auto
step vgpukit mdev list --defined

section "NVIDIA vGPU: legacy mdev (Tesla T4) and per-VF vendor VFIO (H100)"
step vgpukit sim init "$SIM/t4" --profile t4-mdev --force
export VGPUKIT_SIM="$SIM/t4"
step vgpukit vgpu create gpu0 --type "GRID T4-4Q" --count 2
step vgpukit vgpu types gpu0
step vgpukit sim init "$SIM/h100" --profile h100-vgpu --force
export VGPUKIT_SIM="$SIM/h100"
step vgpukit vgpu create gpu0 --type "NVIDIA H100-20C" --count 4
step vgpukit vgpu list

section "QoS: time-slicing a GPU between tenants (real processes stand in for GPU work)"
export VGPUKIT_SIM="$SIM/hgx"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done; wait 2>/dev/null || true; }
trap cleanup EXIT
vgpukit qos daemon 2>"$SIM/qos-daemon.log" & PIDS+=($!)
for _ in $(seq 50); do vgpukit qos status >/dev/null 2>&1 && break; sleep 0.1; done
sh -c 'while :; do :; done' & A=$!; PIDS+=($A)
sh -c 'while :; do :; done' & B=$!; PIDS+=($B)
step vgpukit qos set gpu2 --policy fixed-share --slice-ms 10
step vgpukit qos tenant add gpu2 web --class online --share 40 --pid "$A"
step vgpukit qos tenant add gpu2 batch --class offline --share 30 --pid "$B" --demand sample
step vgpukit qos notify gpu2 web busy
sleep 3
step vgpukit qos status
step vgpukit qos tenant rm gpu2 web
cleanup; PIDS=(); trap - EXIT

printf '\n\033[1;32mTour done.\033[0m Simulated hosts are in %s; try: VGPUKIT_SIM=%s/hgx vgpukit --help\n' "$SIM" "$SIM"
