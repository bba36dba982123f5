#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. GPU tests skip with a message
# where no GPU is present.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_missing
configure_and_build
log "running the C++ tests"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
log "all tests passed"
