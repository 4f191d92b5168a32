#!/usr/bin/env bash
# A short tour of vgpukit on the built-in simulated HGX A100 host (no GPU needed).
# Usage: bash scripts/demo.sh   (as root on Debian 12; installs what it needs first)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
SIM=${VGPUKIT_DEMO_DIR:-/tmp/vgpukit-demo}
export PATH="$PWD/.venv/bin:$PATH"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step vgpukit sim init "$SIM" --profile hgx-a100 --force
export VGPUKIT_SIM="$SIM"
echo "(VGPUKIT_SIM=$SIM: every command below acts on the simulated host)"
step vgpukit topo
step vgpukit topo --matrix
step vgpukit devices --kind gpu
