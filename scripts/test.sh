#!/usr/bin/env bash
# Installs what is missing, builds everything, runs every test (ctest: the GoogleTest suites,
# the examples on the CPU backend, pytest, the repository checks) and prints how many tests of
# each suite passed, were skipped and failed, with the skip reasons. GPU tests skip with a
# message where no GPU is present. scripts/test.sh --help says more.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
usage: scripts/test.sh [--help]

Installs what is missing (with apt-get: cmake, ninja, g++, fmt, spdlog, GoogleTest and LLVM
for the CPU backend; with pip: pybind11, pytest, numpy), builds everything in
\$TILUS_BUILD_DIR (default: build/) and runs every test with ctest. Tests that need a GPU, NVRTC
or the CPU backend skip where it is missing; a suite whose tests all skipped shows as
"Skipped" in ctest's list. Last comes a summary: per suite, the tests passed, skipped and
failed, and why tests were skipped (the results are kept in \$TILUS_BUILD_DIR/test-results/).

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
install_packaging_deps
configure_and_build
results="$BUILD_DIR/test-results"
rm -rf "$results"
mkdir -p "$results"
log "running the tests"
rc=0
# Each GoogleTest executable writes <name>.xml there, pytest pytest.xml, ctest ctest.xml.
GTEST_OUTPUT="xml:$results/" PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} -rs --junitxml=$results/pytest.xml" \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --output-junit "$results/ctest.xml" || rc=$?
if command -v "${PYTHON:-python3}" >/dev/null 2>&1; then
  "${PYTHON:-python3}" "$TILUS_ROOT/scripts/test_summary.py" "$results" || true
fi
if [ $rc -ne 0 ]; then
  log "some tests failed"
  exit $rc
fi
log "all tests passed (skipped ones are listed above)"
