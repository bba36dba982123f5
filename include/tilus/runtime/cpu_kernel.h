// The CPU backend: runs a tilus kernel on the host through LLVM's ORC JIT.
//
//   auto k = tilus::CpuKernel::compile(tilus::trace(MatmulShared{}));
//   k->launch({m, n, k, a.arg(), b.arg(), c.arg()});   // host pointers (DeviceBuffer on Backend::Cpu)
//
// The pass pipeline runs for the CPU target (the same passes and checks as sm_90a), the
// kernel is lowered to LLVM IR (tilus/codegen/llvm_emitter.h), optimized for the host CPU (O3,
// or for compile time when the kernel is large) and JIT compiled; a launch runs the grid's
// blocks in parallel on CPU threads and returns when all are done.
//
// Checked mode (CpuOptions::checked, or TILUS_CPU_CHECK=1): every global access that no
// bounds predicate guards is checked against the tensor's shape, and every global access
// against the bytes the parameter's pointer may address (KernelArg::bytes, which buffers
// set); the first failure is thrown as CpuCheckError naming the instruction, the user's
// file and line, the tensor, the offending index and the block.
//
// Without LLVM at build time cpu_backend_available() is false and compile() throws.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tilus/ir/program.h"
#include "tilus/runtime/launcher.h"

namespace tilus {

// A checked-mode failure (an out-of-bounds access) found while running on the CPU.
class CpuCheckError : public Error {
 public:
  using Error::Error;
};

bool cpu_backend_available();
// Why not (empty when available).
std::string cpu_unavailable_reason();

// A launch stopped by its caller (CpuKernel::launch's `interrupted`, e.g. Ctrl-C in Python).
class CpuInterrupted : public Error {
 public:
  using Error::Error;
};

struct CpuOptions {
  bool checked = false;  // also on when TILUS_CPU_CHECK=1
  int threads = 0;       // worker threads for the blocks (0: the hardware's)
  // Kernels with more tile instructions than this are compiled for compile time rather than
  // for speed: split into parts of at most `part_instructions`, each optimized by a short
  // function pipeline and given fast machine-code generation, so compile time grows linearly
  // with the kernel; smaller kernels get LLVM's O3 (docs/cpu.md, "Compile time").
  // TILUS_CPU_FAST_COMPILE_ABOVE overrides the limit (0: every kernel).
  int64_t fast_compile_above = 128;
  int64_t part_instructions = 50;
};

class CpuKernel {
 public:
  // Runs the pass pipeline on a traced one-kernel program, lowers it and JIT compiles it.
  static std::shared_ptr<const CpuKernel> compile(const Program& traced, const CpuOptions& options = {});
  ~CpuKernel();

  // Checks the arguments (as the GPU launcher does), evaluates the grid and runs every block.
  // While the blocks run, the calling thread calls `interrupted` (when given) about every
  // 50 ms; once it returns true the running blocks stop at their next loop iteration, no
  // other block starts, and CpuInterrupted is thrown.
  void launch(const std::vector<KernelArg>& args, const std::function<bool()>& interrupted = {}) const;
  std::array<uint32_t, 3> grid(const std::vector<KernelArg>& args) const;
  // The kernel after the pass pipeline, and its LLVM IR before optimization.
  const Kernel& kernel() const;
  // Its parameters with their argument contracts, grid and global tensors (as the GPU's).
  const KernelSource& signature() const;
  const std::string& llvm_ir() const;
  bool checked() const;
  double compile_ms() const;  // pipeline + lowering + JIT
  // True when its machine code came from the disk cache (an earlier process compiled it) or from
  // an identical kernel compiled earlier in this process, rather than from LLVM's code generator.
  bool from_cache() const;
  // True when compiled for compile time (more than CpuOptions::fast_compile_above instructions).
  bool fast_compiled() const;
  // Why the kernel could not run (well) on a GPU although it runs here: more shared memory per
  // block than the GPU allows, register spills under its launch bounds. Also logged as
  // warnings at compile time.
  const std::vector<std::string>& gpu_warnings() const;

  struct Impl;

 private:
  explicit CpuKernel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilus
