// The CPU backend's code generator: lowers a kernel (after the tile-level passes) to LLVM IR.
//
// The CPU runs tiles, not threads: one call of the generated function runs one thread block,
// register tensors are per-block arrays indexed by tile position (their layouts only matter
// where an instruction reinterprets registers: `view`), shared tensors live in a per-block
// buffer at their planned offsets, asynchronous copies complete at once, waits and barriers
// are no-ops. Numerics follow the CUDA path: 16-bit floats compute in float32 and round per
// operation, float-to-int conversions saturate, `dot` accumulates in the accumulator's dtype.
//
// The generated function is
//   void <kernel>_block(const int64_t* args, int32_t bx, int32_t by, int32_t bz,
//                       uint8_t* shared, CpuBlockContext* ctx)
// where args holds one 8-byte slot per runtime parameter (integers as int64, floats as
// double, pointers as addresses). A large kernel's function calls internal parts, each with
// the same arguments and the block's frame (the values that cross parts).
//
// Only built with LLVM (TILUS_HAVE_LLVM); the runtime (tilus/runtime/cpu_kernel.h) is the public face
// (CpuKernel::llvm_ir(), and TILUS_DUMP_IR, show the generated IR).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/program.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tilus {

// One checked access of the generated code: what a checked-mode error reports.
struct CpuAccessSite {
  std::string inst;    // "load_global", "copy", ...
  SourceLoc loc;
  std::string tensor;  // "global float16[m, k]", or a shared tile's root "shared float32[64, 32]"
  int param = -1;      // the pointer parameter the tensor was viewed from (-1: unknown)
  std::string param_name;
  // A shared tile (KernelFacts::shared_bounds): per root dim, the tile's extent and the root's.
  bool shared = false;
  std::vector<int64_t> tile_extents, root_shape;
  // An mbarrier wait (the runtime reports one that can never complete).
  bool barrier_wait = false;
  // A TMA box's start (KernelFacts::tma_start): the elements of `dtype` in 16 bytes, which
  // its innermost coordinate must be a multiple of (0: not a TMA box).
  int64_t tma_multiple = 0;
  std::string dtype;
};

// The operations of the CPU backend's mbarriers (CpuBlockContext::mbarrier).
enum CpuMbarrierOp : int32_t {
  kMbarrierInit = 0,        // value: the arrival count
  kMbarrierArrive = 1,      // value: arrivals
  kMbarrierExpectTx = 2,    // value: bytes
  kMbarrierCompleteTx = 3,  // value: bytes
  kMbarrierWait = 4,        // value: the phase parity; a wait that cannot complete is reported
};

// Filled in by the runtime before each block; the generated code reports checked-mode
// failures through `report` (first failure wins, the access is skipped).
struct CpuBlockContext {
  // (ctx, site, index of the failing dim or -1 for a pointer-extent failure, the element's
  // global index as int64 per dim (a shared tile's: its first index in the root), rank, byte
  // offset from the parameter's pointer)
  void (*report)(CpuBlockContext* ctx, int32_t site, int32_t dim, const int64_t* index, int32_t rank,
                 int64_t byte_offset);
  const int64_t* extents;  // bytes addressable from each pointer parameter (-1: unknown)
  void* runtime;           // the runtime's own state
  // Nonzero once the launch is interrupted: the generated code returns at the next loop
  // back-edge (or part boundary) and no further block starts. Read with relaxed atomics.
  const int32_t* cancel;
  int32_t bx, by, bz;
  // (ctx, CpuMbarrierOp, the barrier's 8 bytes, value, site): the blocks of the CPU backend
  // run their instructions in order, so a wait whose phase has not completed never will.
  void (*mbarrier)(CpuBlockContext* ctx, int32_t op, uint64_t* barrier, int64_t value, int32_t site);
  // (ctx, CpuSemaphoreOp, the int32 semaphore, value, site): a lock spins until the semaphore
  // holds `value` (and reports one that no running block can release), a release stores it.
  void (*semaphore)(CpuBlockContext* ctx, int32_t op, int32_t* semaphore, int32_t value, int32_t site);
  // (ctx, CpuServiceOp, a, b, p): see CpuServiceOp.
  int64_t (*service)(CpuBlockContext* ctx, int32_t op, int64_t a, int64_t b, void* p);
  // Runs the functions `parts` (n of them, each a thread group: the block function's arguments and a
  // frame) concurrently, as the GPU's warps would: each on a copy of `frame` (frame_bytes; the
  // group's threads have their own values), switching where one waits on what another must do;
  // returns when all are done, with the bytes each changed written back into `frame`.
  void (*fork)(CpuBlockContext* ctx, int32_t n, void* const* parts, uint8_t* frame, int64_t frame_bytes,
               const int64_t* args);
  uint8_t* tmem;  // this block's tensor memory (kCpuTmemBytes)
  void* block;    // the runtime's state of this block
};

// The operations of CpuBlockContext::semaphore.
enum CpuSemaphoreOp : int32_t { kSemaphoreLock = 0, kSemaphoreRelease = 1 };

// The operations of CpuBlockContext::service: what a block asks of the runtime beyond memory (the
// blocks of a cluster, Blackwell's tensor memory, cluster launch control).
enum CpuServiceOp : int32_t {
  kServicePeerShared = 0,     // a: a cluster rank -> that block's shared memory (its address)
  kServicePeerTmem = 1,       // a: a cluster rank -> that block's tensor memory (128 lanes x 2048 bytes)
  kServiceTmemAlloc = 2,      // a: 32-bit columns, b: site -> the address (lane << 16 | column)
  kServiceTmemDealloc = 3,    // a: the address, b: the columns (site in p's place: none)
  kServiceTmemRelinquish = 4,  // b: site
  kServiceClusterSync = 5,    // b: site: every block of the cluster arrives and waits
  kServiceClcTryCancel = 6,   // a: the mbarrier (its address), b: multicast, p: the 16-byte response
  // a: a named barrier's id | wait << 4 | arrive_count << 8 | the arriving group's threads << 32,
  // b: site: the group arrives (sync_threads, named_barrier_arrive) and, with wait, waits for the
  // barrier to complete
  kServiceNamedBarrier = 7,
};

// The CPU backend's tensor memory of a block: 128 lanes of 512 32-bit columns, lane-major.
constexpr int64_t kCpuTmemLaneBytes = 512 * 4;
constexpr int64_t kCpuTmemBytes = 128 * kCpuTmemLaneBytes;

struct CpuCodegenOptions {
  // Emit checked-mode bounds checks of every global access (shared tiles at run-time offsets are
  // checked in every mode).
  bool checked = false;
  // Above 0: the kernel is emitted as a chain of functions of at most this many tile
  // instructions each (a statement with more, such as a large loop, splits its own body), so
  // that LLVM's work per function stays bounded (docs/cpu.md, "Compile time").
  int64_t chunk_instructions = 0;
};

// The number of tile instructions in a kernel, loops counted once (what the CPU backend's
// compile time grows with).
int64_t count_instructions(const Kernel& kernel);

struct CpuLoweredKernel {
  std::unique_ptr<llvm::Module> module;
  // The kernel runs thread groups concurrently (CpuBlockContext::fork): its blocks run as fibers.
  bool forks = false;
  std::string entry;                   // the block function's name
  std::vector<CpuAccessSite> sites;    // checked mode: indexed by the site argument of report
  int64_t shared_bytes = 0;            // bytes of the per-block shared buffer
  CpuLoweredKernel();
  CpuLoweredKernel(CpuLoweredKernel&&) noexcept;
  CpuLoweredKernel& operator=(CpuLoweredKernel&&) noexcept;
  ~CpuLoweredKernel();
};

// Lowers `kernel` (the output of run_pipeline) into a module of `context`. Throws
// CompileError naming the instruction for what the CPU backend cannot run.
CpuLoweredKernel emit_llvm(const Kernel& kernel, llvm::LLVMContext& context, const CpuCodegenOptions& options);

}  // namespace tilus
