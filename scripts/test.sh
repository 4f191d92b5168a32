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
python -m pytest -q "$@"
