#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job.
# Until the GPU code generator exists, the demo traces every example Script and prints
# its IR after each pass.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_missing
configure_and_build
"$BUILD_DIR/examples/cpp/print_ir" "$@"
