#!/usr/bin/env bash
# Builds the AOT example from scratch and runs it: the bundle (build_bundle.py, needs NVRTC and
# tilus's Python package on PYTHONPATH), then the C++ program against it with CMake.
#   examples/aot/run.sh [BUILD_DIR]      (default: build-aot)
#   AOT_BUILD_ONLY=1 examples/aot/run.sh  builds without running (no GPU needed)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:-build-aot}")"
rm -rf "$out"
mkdir -p "$out"
"${PYTHON:-python3}" "$here/build_bundle.py" "$out/bundle"
cmake -S "$here" -B "$out/program" -DTILUS_BUNDLE_DIR="$out/bundle" -DCMAKE_BUILD_TYPE=Release ${CMAKE_GENERATOR:+-G "$CMAKE_GENERATOR"} >"$out/cmake.log"
cmake --build "$out/program" -j "$(nproc)" >>"$out/cmake.log"
echo "built $out/program/aot_demo"
if [[ "${AOT_BUILD_ONLY:-0}" != 1 ]]; then
  "$out/program/aot_demo"
fi
