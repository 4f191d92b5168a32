#!/usr/bin/env bash
# Install everything and run the whole test suite: lint (ruff), types (mypy --strict on vgpukit/),
# and pytest, including the real-kernel QEMU suite (skip it with VGPUKIT_SKIP_REALKERNEL=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"
ruff check vgpukit tests benchmarks
ruff format --check vgpukit tests benchmarks
echo "== mypy"
mypy
echo "== pytest"
# Simulated hosts are trees of small files: build them on tmpfs when there is one (much faster).
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
python -m pytest -q --durations=20 "$@"
