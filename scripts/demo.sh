#!/usr/bin/env bash
# Installs what is missing, builds run_examples (and only what it needs), and runs the main
# job: the tensor-core matmul example (examples/cpp/matmul_mma.h) on ragged sizes and timed at
# a large size, checked against a host reference, with its speed: on the GPU when one is
# usable, on the CPU backend (LLVM ORC JIT) otherwise. scripts/demo.sh --help says more.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The names run_examples accepts, in its order (`run_examples --list`; tests/repo/test_scripts.py
# checks that the two lists agree). Checked here so that a typo fails before the build.
EXAMPLES=(vector_add matmul_naive matmul_shared softmax matmul_mma matmul_mma_large matmul_pipelined
          matmul_pipelined_large matmul_copy matmul_copy_large matmul_auto matmul_auto_large hopper_matmul
          hopper_matmul_large)
DEFAULT_EXAMPLES=(matmul_mma matmul_mma_large)

usage() {
  cat <<EOF
usage: scripts/demo.sh [--cpu | --gpu] [--checked] [example ...]
       scripts/demo.sh --list | --help

Installs what is missing (with apt-get: cmake, ninja, g++, fmt, spdlog, GoogleTest and LLVM
for the CPU backend; with pip: pybind11, pytest, numpy), builds run_examples and the libraries
it needs in \$TILUS_BUILD_DIR (default: build/), and runs the examples named, each on random
ragged data, checked against a host reference, with its speed. Without names it runs
${DEFAULT_EXAMPLES[*]}: the tensor-core matmul (f16 in, f32 accumulate,
cp.async, ldmatrix, mma.sync; on sm_90a its dot runs as wgmma, TILUS_DOT_WGMMA=0 keeps
mma.sync) on ragged sizes, then timed at 4096^3 on the GPU or 512^3 on the CPU backend.

options:
  --cpu        run on the CPU backend (LLVM ORC JIT)
  --gpu        run on the GPU
               (default: the GPU when one is usable, else the CPU backend; TILUS_TARGET=cpu|gpu)
  --checked    run the CPU backend in checked mode (out-of-bounds accesses are errors)
  --list       print the example names, one a line, and exit
  -h, --help   print this help and exit

examples: ${EXAMPLES[*]}
  (the *_large ones are timed at a large size; hopper_matmul* are the wgmma kernels, on an
  sm_90a GPU only)

environment:
  TILUS_TARGET=cpu|gpu   the backend when neither --cpu nor --gpu is given
  TILUS_BUILD_DIR        the build directory (default: build/)
  TILUS_JOBS             parallel build jobs (default: the number of cores)
  TILUS_SKIP_INSTALL=1   install nothing (use what the machine has)

scripts/test.sh builds everything and runs every test.
EOF
}

flags=()
names=()
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    --list) printf '%s\n' "${EXAMPLES[@]}"; exit 0 ;;
    --cpu | --gpu | --checked) flags+=("$arg") ;;
    -*)
      printf 'demo.sh: unknown option %s (scripts/demo.sh --help lists them)\n' "$arg" >&2
      exit 2 ;;
    *)
      known=0
      for ex in "${EXAMPLES[@]}"; do [ "$ex" != "$arg" ] || known=1; done
      if [ $known -eq 0 ]; then
        printf 'demo.sh: unknown example %s; the examples are: %s\n' "$arg" "${EXAMPLES[*]}" >&2
        exit 2
      fi
      names+=("$arg") ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=("${DEFAULT_EXAMPLES[@]}")

install_missing
configure_and_build run_examples
exec "$BUILD_DIR/examples/cpp/run_examples" "${flags[@]}" "${names[@]}"
