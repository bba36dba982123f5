// The CPU backend: runs a tilus kernel on the host through LLVM's ORC JIT.
//
//   auto k = tilus::CpuKernel::compile(tilus::trace(MatmulShared{}));
//   k->launch({m, n, k, a.arg(), b.arg(), c.arg()});   // host pointers (DeviceBuffer on Backend::Cpu)
//
// The pass pipeline runs for the CPU target (the same passes and checks as sm_90a), the
// kernel is lowered to LLVM IR (tilus/codegen/llvm_emitter.h), optimized at O2 for the host CPU and
// JIT compiled; a launch runs the grid's blocks in parallel on CPU threads and returns when
// all are done.
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

struct CpuOptions {
  bool checked = false;  // also on when TILUS_CPU_CHECK=1
  int threads = 0;       // worker threads for the blocks (0: the hardware's)
};

class CpuKernel {
 public:
  // Runs the pass pipeline on a traced one-kernel program, lowers it and JIT compiles it.
  static std::shared_ptr<const CpuKernel> compile(const Program& traced, const CpuOptions& options = {});
  ~CpuKernel();

  // Checks the arguments (as the GPU launcher does), evaluates the grid and runs every block.
  void launch(const std::vector<KernelArg>& args) const;
  std::array<uint32_t, 3> grid(const std::vector<KernelArg>& args) const;
  // The kernel after the pass pipeline, and its LLVM IR before optimization.
  const Kernel& kernel() const;
  const std::string& llvm_ir() const;
  bool checked() const;
  double compile_ms() const;  // pipeline + lowering + JIT

  struct Impl;

 private:
  explicit CpuKernel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilus
