#!/usr/bin/env bash
# Builds tilus (GPU parts only, no LLVM needed; bench_tilus and the Python package) and runs
# bench/run.py on this machine's GPU.
#   bench/run.sh [run.py arguments]
# PYTHON picks the interpreter that has torch and Triton (default: python3).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TILUS_BUILD_DIR:-$ROOT/build}"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILUS_BUILD_TESTS=OFF \
  -DPython_EXECUTABLE="$(command -v "${PYTHON:-python3}")" >/dev/null
# bench_tilus, and the Python package for the rows timed through Python (TMA examples).
cmake --build "$BUILD"
exec "${PYTHON:-python3}" "$ROOT/bench/run.py" --build "$BUILD" "$@"
