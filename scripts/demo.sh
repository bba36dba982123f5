#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the tensor-core matmul example
# (examples/cpp/matmul_mma.h) on ragged sizes and at 4096^3, checked against a CPU reference,
# with its speed. Without a GPU it compiles the examples with NVRTC instead (running them on
# the CPU arrives with the CPU backend).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_missing
configure_and_build
[ $# -gt 0 ] || set -- matmul_mma matmul_mma_large
"$BUILD_DIR/examples/cpp/run_examples" "$@"
