# Shared by scripts/test.sh and scripts/demo.sh: install what a fresh machine lacks, then
# configure and build. Sourced, not run.
set -euo pipefail

TILUS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${TILUS_BUILD_DIR:-$TILUS_ROOT/build}"
JOBS="${TILUS_JOBS:-$(nproc 2>/dev/null || echo 2)}"

log() { printf '[tilus] %s\n' "$*" >&2; }

# Debian/Ubuntu packages, each with a file that shows it is present. A machine without
# network (the GPU machine) already has them; nothing is installed there.
declare -A TILUS_PACKAGES=(
  [cmake]="/usr/bin/cmake"
  [ninja-build]="/usr/bin/ninja"
  [g++]="/usr/bin/g++"
  [libfmt-dev]="/usr/include/fmt/format.h"
  [libspdlog-dev]="/usr/include/spdlog/spdlog.h"
  [libgtest-dev]="/usr/include/gtest/gtest.h"
)

have_file() { [ -e "$1" ] || command -v "$(basename "$1")" >/dev/null 2>&1; }

install_missing() {
  if [ -n "${TILUS_SKIP_INSTALL:-}" ]; then
    log "TILUS_SKIP_INSTALL is set: installing nothing"
    return
  fi
  local missing=()
  for pkg in "${!TILUS_PACKAGES[@]}"; do
    have_file "${TILUS_PACKAGES[$pkg]}" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "all build dependencies present"
    install_optional
    install_python_deps
    return
  fi
  log "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! command -v apt-get >/dev/null 2>&1; then
    log "apt-get not found: install ${missing[*]} by hand"
    exit 1
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  install_optional
  install_python_deps
}

# LLVM (14 or newer) for the CPU backend: installed where apt can, skipped where it cannot
# (the GPU machine has no network and no LLVM headers; the backend is then off and its
# tests skip).
have_llvm() { compgen -G "/usr/lib/llvm-*/lib/cmake/llvm/LLVMConfig.cmake" >/dev/null || command -v llvm-config >/dev/null 2>&1; }

install_optional() {
  have_llvm && return
  command -v apt-get >/dev/null 2>&1 || { log "LLVM not found and no apt-get: the CPU backend is off"; return; }
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing llvm-dev (CPU backend)"
  if ! { timeout 300 $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 $sudo apt-get install -y -qq llvm-dev >/dev/null; }; then
    log "could not install llvm-dev: the CPU backend is off"
  fi
}

# The Python package needs pybind11 (build) and, for its tests, pytest and numpy: from PyPI
# where pip can reach it, else Debian's packages; without them the package is skipped.
install_python_deps() {
  local py="${PYTHON:-python3}"
  command -v "$py" >/dev/null 2>&1 || { log "no $py: the Python package is off"; return; }
  if "$py" -c "import pybind11, pytest, numpy" >/dev/null 2>&1; then return; fi
  log "installing pybind11, pytest, numpy for $py"
  "$py" -m pip install -q pybind11 pytest numpy >/dev/null 2>&1 ||
    "$py" -m pip install -q --break-system-packages pybind11 pytest numpy >/dev/null 2>&1 ||
    log "could not install the Python test dependencies: the Python package and its tests are off"
}

# scikit-build-core (what `pip install .` builds with) for the package-metadata check
# (tests/repo, repo_package_metadata); optional: without it that check is skipped.
install_packaging_deps() {
  [ -z "${TILUS_SKIP_INSTALL:-}" ] || return 0
  local py="${PYTHON:-python3}"
  command -v "$py" >/dev/null 2>&1 || return 0
  # cuobjdump, for the tests that read a kernel's SASS: NVIDIA's PyPI package where the CUDA
  # toolkit here came without it (tilus.artifacts finds it there).
  if [ ! -x /usr/local/cuda/bin/cuobjdump ] && ! command -v cuobjdump >/dev/null 2>&1 &&
     ! "$py" -c "import glob, nvidia, sys; sys.exit(not any(glob.glob(p + '/cu*/bin/cuobjdump') for p in nvidia.__path__))" >/dev/null 2>&1; then
    log "installing cuobjdump (nvidia-cuda-cuobjdump from PyPI)"
    "$py" -m pip install -q nvidia-cuda-cuobjdump >/dev/null 2>&1 ||
      "$py" -m pip install -q --break-system-packages nvidia-cuda-cuobjdump >/dev/null 2>&1 ||
      log "could not install cuobjdump: the tests that read SASS will skip"
  fi
  "$py" -c "import scikit_build_core" >/dev/null 2>&1 && return 0
  "$py" -m pip install -q scikit-build-core >/dev/null 2>&1 ||
    "$py" -m pip install -q --break-system-packages scikit-build-core >/dev/null 2>&1 ||
    log "could not install scikit-build-core: the package-metadata check will be skipped"
}

# configure_and_build [target ...]: configures $BUILD_DIR once, then builds the targets named
# and what they depend on (everything without names).
configure_and_build() {
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    log "configuring in $BUILD_DIR"
    local py=()
    command -v "${PYTHON:-python3}" >/dev/null 2>&1 && py=(-DPython_EXECUTABLE="$(command -v "${PYTHON:-python3}")")
    # GCC 12 (CI's compiler) builds tilus without a warning: there, a new one is an error.
    local werror=()
    "${CXX:-c++}" -v 2>&1 | grep -q '^gcc version 12\.' && werror=(-DTILUS_WERROR=ON)
    cmake -S "$TILUS_ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${py[@]}" "${werror[@]}" >/dev/null
  fi
  local targets=()
  [ $# -eq 0 ] || targets=(--target "$@")
  log "building ${*:-everything} with $JOBS jobs"
  cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
}
