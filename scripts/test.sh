#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test (ctest: the GoogleTest
# suites, the examples on the CPU backend, pytest, the repository checks). GPU tests skip with
# a message where no GPU is present. scripts/test.sh --help says more.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
usage: scripts/test.sh [--help]

Installs what is missing (with apt-get: cmake, ninja, g++, fmt, spdlog, GoogleTest and LLVM
for the CPU backend; with pip: pybind11, pytest, numpy), builds everything in
\$TILUS_BUILD_DIR (default: build/) and runs every test with ctest. Tests that need a GPU, NVRTC
or the CPU backend skip where it is missing.

environment:
  TILUS_BUILD_DIR        the build directory (default: build/)
  TILUS_JOBS             parallel build and test jobs (default: the number of cores)
  TILUS_SKIP_INSTALL=1   install nothing (use what the machine has)

scripts/demo.sh runs the examples (scripts/demo.sh --help).
EOF
}

for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
    *) printf 'test.sh: unknown argument %s (scripts/test.sh --help)\n' "$arg" >&2; exit 2 ;;
  esac
done

install_missing
configure_and_build
log "running the tests"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
log "all tests passed"
