#!/usr/bin/env bash
# For the GPU machine (a developer tool, not a set-up command): build without LLVM, run every
# test (the GPU ones included), the C++ examples, compute-sanitizer on the examples, and
# optionally the benchmarks. Logs go to $OUT (default ./gpu-logs); a summary is printed last.
#   scripts/gpu_check.sh [tests] [examples] [sanitize] [bench] [cpu] [python] [autotune]
#   (default: the first four)
# `python` runs the pytest suite, every Python example, compute-sanitizer on two of them, and
# bench/launch_overhead.py (PYTHON: the interpreter with torch, Triton, pytest, pybind11);
# `autotune` the autotuned matmul example and bench/autotune_bench.py (tilus vs Triton).
# `cpu` runs carry/static/tests/cpp/tilus_cpu_static (built elsewhere with
# -DTILUS_LLVM_STATIC=ON, since this machine has no LLVM; its libfmt/libspdlog in carry/lib):
# the differential tests (CPU backend vs GPU) and bench/run_cpu.py (vs Triton's interpreter).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TILUS_BUILD_DIR:-$ROOT/build-gpu}"
LOGS="${OUT:-$ROOT/gpu-logs}"
mkdir -p "$LOGS"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests examples sanitize bench)
export TILUS_CACHE_DIR="${TILUS_CACHE_DIR:-$BUILD/cache}"
summary=()
record() { summary+=("$(printf '%-10s %s' "$1" "$2")"); }

t0=$(date +%s)
if ! { cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILUS_ENABLE_CPU=OFF \
         -DPython_EXECUTABLE="$(command -v "${PYTHON:-python3}")" &&
       cmake --build "$BUILD" -j "$(nproc)"; } >"$LOGS/build.log" 2>&1; then
  tail -40 "$LOGS/build.log"
  echo "build FAILED"
  exit 1
fi
record build "ok ($(( $(date +%s) - t0 )) s)"

for step in "${steps[@]}"; do
  case "$step" in
    tests)
      ctest --test-dir "$BUILD" --output-on-failure -j 4 >"$LOGS/ctest.log" 2>&1
      record tests "rc=$? $(grep -E 'tests passed|tests failed' "$LOGS/ctest.log")"
      grep -E '^\[  FAILED|Failure|Expected|Which is' "$LOGS/ctest.log" | head -30
      "$BUILD/tests/cpp/test_gpu" >"$LOGS/test_gpu.log" 2>&1
      record test_gpu "rc=$? $(grep -cE '^\[       OK' "$LOGS/test_gpu.log") ok, $(grep -cE '^\[  SKIPPED \]' "$LOGS/test_gpu.log") skipped"
      ;;
    examples)
      "$BUILD/examples/cpp/run_examples" >"$LOGS/examples.log" 2>&1
      record examples "rc=$?"
      cat "$LOGS/examples.log"
      ;;
    sanitize)
      small=(vector_add matmul_naive matmul_shared softmax matmul_mma matmul_pipelined matmul_copy matmul_auto hopper_matmul)
      for tool in memcheck racecheck; do
        compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD/examples/cpp/run_examples" "${small[@]}" \
          >"$LOGS/sanitize-$tool.log" 2>&1
        record "$tool" "rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitize-$tool.log" | tail -1)"
      done
      compute-sanitizer --tool synccheck --error-exitcode 9 "$BUILD/examples/cpp/run_examples" matmul_pipelined matmul_copy hopper_matmul \
        >"$LOGS/sanitize-synccheck.log" 2>&1
      record synccheck "rc=$? $(grep -E 'ERROR SUMMARY' "$LOGS/sanitize-synccheck.log" | tail -1)"
      # The kernels whose barriers come from insert_barriers alone.
      compute-sanitizer --tool racecheck --error-exitcode 9 "$BUILD/tests/cpp/test_gpu" \
        --gtest_filter='Gpu.BarriersAreInserted*:Gpu.ShapesViewsAndCopies' >"$LOGS/sanitize-barriers.log" 2>&1
      record barriers "rc=$? $(grep -E 'RACECHECK SUMMARY' "$LOGS/sanitize-barriers.log" | tail -1)"
      # Every copy path, offsets past the tensor and unaligned bases: no access outside x.
      compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/cpp/test_gpu" \
        --gtest_filter='Gpu.CopyFamilyRandomized' >"$LOGS/sanitize-copies.log" 2>&1
      record copies-memcheck "rc=$? $(grep -E 'ERROR SUMMARY' "$LOGS/sanitize-copies.log" | tail -1)"
      ;;
    bench)
      PYTHON="${PYTHON:-python3}" TILUS_BUILD_DIR="$BUILD" "$ROOT/bench/run.sh" >"$LOGS/bench.log" 2>&1
      record bench "rc=$?"
      tail -20 "$LOGS/bench.log"
      ;;
    python)
      export PYTHONPATH="$BUILD/python"
      py="${PYTHON:-python3}"
      "$py" -m pytest -q -p no:cacheprovider "$ROOT/tests/python" >"$LOGS/pytest.log" 2>&1
      record pytest "rc=$? $(tail -1 "$LOGS/pytest.log")"
      grep -E '^FAILED|^E ' "$LOGS/pytest.log" | head -20
      : >"$LOGS/python-examples.log"
      rc=0
      for ex in vector_add matmul_v0 matmul_v1 matmul_v2 matmul_v3 matmul_tma tma_copy conv2d softmax layer_norm \
                hopper_matmul_v0 hopper_matmul_v1 hopper_matmul_v2 hopper_matmul_v3 hopper_matmul_v4 hopper_matmul_v5 \
                hopper_matmul_v6 matmul_a16wx matmul_fp8 per_token_cast swiglu_per_token_cast flash_attention \
                flash_decoding matmul_auto conv2d_auto; do
        (cd "$ROOT/examples/python" && "$py" "$ex.py") >>"$LOGS/python-examples.log" 2>&1 || rc=1
      done
      record py-examples "rc=$rc"
      cat "$LOGS/python-examples.log"
      for tool in memcheck racecheck synccheck; do
        (cd "$ROOT/examples/python" && for ex in matmul_v3 layer_norm matmul_tma tma_copy conv2d hopper_matmul_v1 \
                                                  hopper_matmul_v2 hopper_matmul_v3 hopper_matmul_v4 hopper_matmul_v5 \
                                                  matmul_a16wx matmul_fp8 per_token_cast swiglu_per_token_cast \
                                                  flash_attention flash_decoding matmul_auto conv2d_auto; do
          TILUS_EXAMPLES_QUICK=1 compute-sanitizer --tool "$tool" --error-exitcode 9 "$py" "$ex.py" || exit 1
        done) >"$LOGS/py-sanitize-$tool.log" 2>&1
        record "py-$tool" "rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/py-sanitize-$tool.log" | tail -1)"
      done
      "$py" "$ROOT/bench/launch_overhead.py" >"$LOGS/launch.log" 2>&1
      record launch "rc=$?"
      cat "$LOGS/launch.log"
      ;;
    autotune)
      export PYTHONPATH="$BUILD/python"
      py="${PYTHON:-python3}"
      (cd "$ROOT/examples/python" && "$py" matmul_autotune.py) >"$LOGS/matmul-autotune.log" 2>&1
      record matmul-autotune "rc=$?"
      tail -22 "$LOGS/matmul-autotune.log"
      "$py" "$ROOT/bench/autotune_bench.py" >"$LOGS/autotune-bench.log" 2>&1
      record autotune-bench "rc=$?"
      tail -8 "$LOGS/autotune-bench.log"
      ;;
    cpu)
      static="$ROOT/carry/static/tests/cpp/tilus_cpu_static"
      export LD_LIBRARY_PATH="$ROOT/carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
      "$static" test >"$LOGS/differential.log" 2>&1
      record differential "rc=$? $(grep -cE '^\[       OK' "$LOGS/differential.log") ok, $(grep -cE '^\[  SKIPPED \]' "$LOGS/differential.log") skipped"
      grep -E '^\[  FAILED|Failure|Expected|Which is|Skipped' "$LOGS/differential.log" | head -20
      "${PYTHON:-python3}" "$ROOT/bench/run_cpu.py" --bench "$static bench" >"$LOGS/bench-cpu.log" 2>&1
      record bench-cpu "rc=$?"
      tail -16 "$LOGS/bench-cpu.log"
      ;;
  esac
done
echo
printf '%s\n' "${summary[@]}"
