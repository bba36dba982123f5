#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the tensor-core matmul example
# (examples/cpp/matmul_mma.h) on ragged sizes and timed at a large size, checked against a
# host reference, with its speed: on the GPU when one is usable, on the CPU backend (LLVM
# ORC JIT) otherwise; TILUS_TARGET=cpu|gpu or --cpu / --gpu choose, --checked runs the CPU
# backend in checked mode.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_missing
configure_and_build
[ $# -gt 0 ] || set -- matmul_mma matmul_mma_large
"$BUILD_DIR/examples/cpp/run_examples" "$@"
