// The CPU executor: ORC LLJIT over the CPU code generator's LLVM IR, blocks on CPU threads.
#include "tilus/runtime/cpu_kernel.h"

#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "tilus/ir/facts.h"
#include "tilus/ir/functor.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/log.h"
#include "tilus/passes/pipeline.h"
#include "tilus/runtime/cache.h"
#include "tilus/runtime/jit.h"

#ifdef TILUS_HAVE_LLVM
#include "fibers.h"
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "tilus/codegen/llvm_emitter.h"
#endif

namespace tilus {

namespace {
// Part of the CPU cache entries' key and metadata: bumped when what they hold changes.
[[maybe_unused]] constexpr const char* kCpuObjectFormat = "tilus-cpu-object-1";  // used with LLVM only

[[maybe_unused]] bool env_checked() {  // unused where tilus is built without LLVM
  const char* e = std::getenv("TILUS_CPU_CHECK");
  return e && *e && std::string(e) != "0";
}
}  // namespace

#ifndef TILUS_HAVE_LLVM

bool cpu_backend_available() { return false; }
std::string cpu_unavailable_reason() { return "tilus was built without LLVM (the CPU backend needs LLVM 14 or newer)"; }

struct CpuKernel::Impl {};
CpuKernel::CpuKernel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuKernel::~CpuKernel() = default;
std::shared_ptr<const CpuKernel> CpuKernel::compile(const Program&, const CpuOptions&) {
  throw CompileError("the CPU backend is not available: " + cpu_unavailable_reason());
}
void CpuKernel::launch(const std::vector<KernelArg>&, const std::function<bool()>&) const {}
std::array<uint32_t, 3> CpuKernel::grid(const std::vector<KernelArg>&) const { return {0, 0, 0}; }
const Kernel& CpuKernel::kernel() const { throw InternalError("CPU backend not built"); }
const KernelSource& CpuKernel::signature() const { throw InternalError("CPU backend not built"); }
const std::string& CpuKernel::llvm_ir() const { throw InternalError("CPU backend not built"); }
bool CpuKernel::checked() const { return false; }
double CpuKernel::compile_ms() const { return 0; }
bool CpuKernel::fast_compiled() const { return false; }
bool CpuKernel::from_cache() const { return false; }
const std::vector<std::string>& CpuKernel::gpu_warnings() const { throw InternalError("CPU backend not built"); }

#else

namespace {

std::string take(llvm::Error e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << e;
  return os.str();
}

template <class T>
T must(llvm::Expected<T> v, const char* what) {
  if (!v) throw InternalError(fmt::format("CPU backend: {}: {}", what, take(v.takeError())));
  return std::move(*v);
}

// Half-precision conversions LLVM may call on hosts without F16C (and always from double).
float tilus_h2f(uint16_t h) { return float(dtypes::float16.decode_float(h)); }
uint16_t tilus_f2h(float f) { return uint16_t(dtypes::float16.encode_float(double(f))); }
uint16_t tilus_d2h(double d) { return uint16_t(dtypes::float16.encode_float(d)); }

// Low-precision floats (fp8, sub-byte floats) and sub-byte memory, for the CPU emitter: one
// implementation of the formats (DataType's), so the CPU backend is bit-exact with the host's
// reference. `format` is cpu::low_float_format(t).
DataType low_float(int32_t format) {
  return DataType::make_float(format & 0xff, (format >> 8) & 0xff, (format >> 16) & 0xff,
                              static_cast<FloatStyle>((format >> 24) & 0xff));
}
double tilus_low_float_decode(uint32_t code, int32_t format) { return low_float(format).decode_float(code); }
uint32_t tilus_low_float_encode(double v, int32_t format) { return uint32_t(low_float(format).encode_float(v)); }
// Element `index` of a densely packed array of `bits`-bit codes. Stores change only the
// element's bits, atomically, so blocks running on other threads may write its neighbours.
uint32_t tilus_load_bits(const uint8_t* base, int64_t index, int32_t bits) {
  uint64_t first = uint64_t(index) * uint64_t(bits);
  uint32_t code = 0;
  for (int32_t k = 0; k < bits; ++k) {
    uint64_t bit = first + uint64_t(k);
    code |= uint32_t((base[bit / 8] >> (bit % 8)) & 1u) << k;
  }
  return code;
}
void tilus_store_bits(uint8_t* base, int64_t index, int32_t bits, uint32_t code) {
  uint64_t first = uint64_t(index) * uint64_t(bits);
  for (int32_t k = 0; k < bits;) {
    uint64_t bit = first + uint64_t(k);
    int32_t here = std::min<int32_t>(bits - k, 8 - int32_t(bit % 8));
    uint8_t mask = uint8_t(((1u << here) - 1u) << (bit % 8));
    uint8_t value = uint8_t(((code >> k) << (bit % 8)) & mask);
    __atomic_fetch_and(&base[bit / 8], uint8_t(~mask), __ATOMIC_RELAXED);
    __atomic_fetch_or(&base[bit / 8], value, __ATOMIC_RELAXED);
    k += here;
  }
}

// O3 for kernels of ordinary size. A large kernel (split into parts by the emitter) gets a
// short function pipeline instead: O3's loop passes (induction-variable simplification, full
// unrolling, rotation) and the inliner take time that grows faster than the function, and
// unrolled tiles multiply the machine code.
void optimize(llvm::Module& m, llvm::TargetMachine* tm, bool fast) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  if (!fast) {
    mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  } else if (auto err = pb.parsePassPipeline(mpm, "function(sroa,early-cse,instcombine,simplifycfg)")) {
    throw InternalError("CPU backend: the fast pass pipeline: " + take(std::move(err)));
  }
  mpm.run(m, mam);
}

// One JIT per process: modules are added to it, never removed (kernels live as long as the
// process, like loaded CUDA modules).
struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple()};
  std::mutex mutex;
  // The kernels linked so far, by cache key (each object is linked once: its entry symbol is
  // named after the key).
  std::unordered_map<std::string, void*> loaded;

  static Jit& get() {
    static Jit* j = [] {
      llvm::InitializeNativeTarget();
      llvm::InitializeNativeTargetAsmPrinter();
      auto* jit = new Jit();
      jit->jtmb = must(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
      jit->jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
      jit->lljit = must(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jit->jtmb).create(), "creating the JIT");
      auto& jd = jit->lljit->getMainJITDylib();
      char prefix = jit->lljit->getDataLayout().getGlobalPrefix();
      jd.addGenerator(must(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix), "process symbols"));
      llvm::orc::MangleAndInterner mangle(jit->lljit->getExecutionSession(), jit->lljit->getDataLayout());
      llvm::orc::SymbolMap helpers;
      auto add = [&](const char* name, void* fn) {
#if LLVM_VERSION_MAJOR >= 17
        helpers[mangle(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn), llvm::JITSymbolFlags::Exported};
#else
        helpers[mangle(name)] = llvm::JITEvaluatedSymbol(llvm::pointerToJITTargetAddress(fn), llvm::JITSymbolFlags::Exported);
#endif
      };
      add("__gnu_h2f_ieee", reinterpret_cast<void*>(&tilus_h2f));
      add("__extendhfsf2", reinterpret_cast<void*>(&tilus_h2f));
      add("__gnu_f2h_ieee", reinterpret_cast<void*>(&tilus_f2h));
      add("__truncsfhf2", reinterpret_cast<void*>(&tilus_f2h));
      add("__truncdfhf2", reinterpret_cast<void*>(&tilus_d2h));
      add("tilus_low_float_decode", reinterpret_cast<void*>(&tilus_low_float_decode));
      add("tilus_low_float_encode", reinterpret_cast<void*>(&tilus_low_float_encode));
      add("tilus_load_bits", reinterpret_cast<void*>(&tilus_load_bits));
      add("tilus_store_bits", reinterpret_cast<void*>(&tilus_store_bits));
      if (auto err = jd.define(llvm::orc::absoluteSymbols(std::move(helpers))))
        throw InternalError("CPU backend: defining helper symbols: " + take(std::move(err)));
      return jit;
    }();
    return *j;
  }
};

struct Failure {
  std::mutex mutex;
  std::atomic<bool> failed{false};
  std::string message;
};

struct RunState {
  const CpuKernel::Impl* kernel;
  Failure failure;
  // Blocks running, and those of them spinning in lock_semaphore: when every running block
  // spins for a while, none of them can be released.
  std::atomic<int> running{0}, spinning{0};
  int workers = 0;
  // The clusters (blocks of one cluster run together on one host thread), in launch order: the
  // next one to start (cluster launch control cancels it by taking it), their count, the grid and
  // the cluster's shape.
  std::atomic<int64_t> next_cluster{0};
  int64_t clusters = 0;
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> cluster{1, 1, 1};
  // Set on a failure or an interrupt: the generated code returns at its next loop back-edge.
  std::atomic<int32_t> stop{0};

  // The first block index of cluster c (clusters x fastest).
  std::array<int32_t, 3> cluster_origin(int64_t c) const {
    int64_t nx = grid[0] / cluster[0], ny = grid[1] / cluster[1];
    return {int32_t(c % nx * cluster[0]), int32_t(c / nx % ny * cluster[1]), int32_t(c / (nx * ny) * cluster[2])};
  }
};

struct ClusterRun;

// The runtime's state of one block (CpuBlockContext::block): its shared memory, its tensor memory
// and which columns of it are allocated, its rank in its cluster.
struct BlockState {
  std::vector<uint8_t> shared_buffer, tmem_buffer;
  uint8_t* smem = nullptr;
  uint64_t columns[8] = {};  // 512 bits: the allocated 32-bit columns of tensor memory
  bool relinquished = false;
  // The named barriers 0..15 (sync_threads, named_barrier_arrive): threads arrived in the phase
  // under way, and the phases completed.
  struct Named {
    int64_t arrived = 0;
    uint64_t generation = 0;
  } named[16];
  int rank = 0;
  ClusterRun* cluster = nullptr;
  CpuBlockContext ctx{};
};

// The blocks of the cluster running on a host thread, and its barrier (cluster.sync).
struct ClusterRun {
  std::vector<BlockState*> blocks;
  int arrived = 0;
  uint64_t generation = 0;
};

}  // namespace

struct CpuKernel::Impl {
  Kernel lowered;
  KernelSource signature;  // name, params, grid: for argument checks and the grid
  // The LLVM IR before optimization: printed when asked for (or dumped), since a large
  // kernel's text takes a while to print and most callers never look at it.
  CpuCodegenOptions codegen;
  std::string entry;
  mutable std::mutex ir_mutex;
  mutable std::string ir;
  mutable bool ir_printed = false;
  std::vector<CpuAccessSite> sites;
  int64_t shared_bytes = 0;
  bool checked = false;
  int threads = 0;
  double compile_ms = 0;
  using BlockFn = void (*)(const int64_t*, int32_t, int32_t, int32_t, uint8_t*, CpuBlockContext*);
  BlockFn fn = nullptr;
  bool fast = false;  // compiled for compile time (a large kernel)
  bool from_cache = false;  // its machine code was not generated by this compile
  int64_t stack_bytes = 0;  // the block function's stack arrays (register tensors, the frame)
  bool forks = false;          // thread groups run concurrently (fibers)
  bool tensor_memory = false;  // it allocates tensor memory (each block gets kCpuTmemBytes)
  std::vector<std::string> gpu_warnings;
};

namespace {

void report(CpuBlockContext* ctx, int32_t site, int32_t dim, const int64_t* index, int32_t rank, int64_t byte_offset) {
  auto* state = static_cast<RunState*>(ctx->runtime);
  std::lock_guard<std::mutex> lock(state->failure.mutex);
  if (state->failure.failed.load()) return;
  const CpuAccessSite& s = state->kernel->sites.at(size_t(site));
  std::string idx;
  for (int d = 0; d < rank; ++d) idx += fmt::format("{}{}", d ? ", " : "", index[d]);
  std::string where = s.loc.valid() ? s.loc.str() + ": " : "";
  std::string param = s.param_name.empty() ? "" : fmt::format(" (from parameter '{}')", s.param_name);
  if (s.tma_multiple) {
    state->failure.message = fmt::format(
        "{}{}: the TMA box of {}{} starts at [{}]: innermost offset {} is not a multiple of {} elements of {} (16 "
        "bytes); the box's first element is not 16-byte aligned, which the GPU's TMA faults on (CUDA error: an "
        "illegal instruction) (block ({}, {}, {}))",
        where, s.inst, s.tensor, param, idx, index[dim], s.tma_multiple, s.dtype, ctx->bx, ctx->by, ctx->bz);
    state->failure.failed.store(true);
    return;
  }
  std::string why;
  if (s.shared) why = fmt::format("dim {} takes [{}, {}), outside the tensor's [0, {}) (a run-time offset)", dim,
                                  index[dim], index[dim] + s.tile_extents[dim], s.root_shape[dim]);
  else if (dim >= 0) why = fmt::format("index {} of dim {} is out of the tensor's bounds and no bounds predicate guards it", index[dim], dim);
  else why = fmt::format("byte offset {} lies outside the {} bytes that '{}' points to", byte_offset,
                         ctx->extents[s.param], s.param_name);
  state->failure.message = fmt::format("{}{}: out-of-bounds access of {}{} at {} index [{}]: {} (block ({}, {}, {}))",
                                       where, s.inst, s.tensor, param, s.shared ? "shared" : "global", idx, why,
                                       ctx->bx, ctx->by, ctx->bz);
  state->failure.failed.store(true);
}

// Stops the launch with message(where, site) unless it has failed already.
template <class F>
void fail_at(CpuBlockContext* ctx, int32_t site, F message) {
  auto* state = static_cast<RunState*>(ctx->runtime);
  std::lock_guard<std::mutex> lock(state->failure.mutex);
  if (state->failure.failed.load()) return;
  const CpuAccessSite& s = state->kernel->sites.at(size_t(site));
  state->failure.message = message(s.loc.valid() ? s.loc.str() + ": " : std::string(), s);
  state->failure.failed.store(true);
}

// An mbarrier on the CPU, in its 8 shared bytes: pending arrivals (20 bits), the arrival
// count (20 bits), the transaction bytes still expected (23 bits, signed: a copy may complete
// before its expectation) and the phase's parity. A phase completes when no arrival and no
// byte is missing.
struct CpuBarrier {
  int64_t pending, count, tx, parity;
  static CpuBarrier load(const uint64_t* p) {
    uint64_t s = *p;
    int64_t tx = int64_t((s >> 40) & 0x7fffff);
    if (tx & 0x400000) tx -= 0x800000;
    return {int64_t(s & 0xfffff), int64_t((s >> 20) & 0xfffff), tx, int64_t(s >> 63)};
  }
  void store(uint64_t* p) const {
    *p = (uint64_t(pending) & 0xfffff) | ((uint64_t(count) & 0xfffff) << 20) | ((uint64_t(tx) & 0x7fffff) << 40) |
         (uint64_t(parity) << 63);
  }
  void maybe_complete() {
    if (pending <= 0 && tx == 0) {
      parity ^= 1;
      pending = count;
    }
  }
};

void mbarrier(CpuBlockContext* ctx, int32_t op, uint64_t* p, int64_t value, int32_t site) {
  fibers::Scheduler* sched = fibers::Scheduler::current();
  if (sched && op != kMbarrierWait) sched->progress();  // what a waiting fiber may wait for
  if (op == kMbarrierInit) {
    CpuBarrier{value, value, 0, 0}.store(p);
    return;
  }
  CpuBarrier bar = CpuBarrier::load(p);
  if (op == kMbarrierWait && sched && bar.parity == value) {
    // The blocks of a cluster and the thread groups that wait on each other run as fibers: the
    // wait lets the others run until the phase completes (or none can go on: a deadlock).
    sched->wait_until([&] { return CpuBarrier::load(p).parity != value; },
                      [ctx, p, value, site] {
                        auto* state = static_cast<RunState*>(ctx->runtime);
                        const CpuAccessSite& s = state->kernel->sites.at(size_t(site));
                        CpuBarrier b = CpuBarrier::load(p);
                        return fmt::format("{}{}: block ({}, {}, {}) waits for the phase of parity {} of an mbarrier "
                                           "({}): {} of its {} arrivals and {} transaction bytes are missing",
                                           s.loc.valid() ? s.loc.str() + ": " : "", s.inst, ctx->bx, ctx->by, ctx->bz,
                                           value, s.tensor, b.pending, b.count, b.tx);
                      });
    return;
  }
  switch (op) {
    case kMbarrierArrive:
      bar.pending -= value;
      bar.maybe_complete();
      break;
    case kMbarrierExpectTx: bar.tx += value; break;
    case kMbarrierCompleteTx:
      bar.tx -= value;
      if (bar.pending == 0) bar.maybe_complete();
      break;
    case kMbarrierWait: {
      if (bar.parity != value) return;  // the phase of that parity has completed
      fail_at(ctx, site, [&](const std::string& where, const CpuAccessSite& s) {
        return fmt::format(
            "{}{}: waits for the phase of parity {} of an mbarrier ({}), which has not completed: {} of its {} "
            "arrivals and {} transaction bytes are missing, and the block runs its instructions in order, so nothing "
            "after the wait can complete it (on a GPU it would hang) (block ({}, {}, {}))",
            where, s.inst, value, s.tensor, bar.pending, bar.count, bar.tx, ctx->bx, ctx->by, ctx->bz);
      });
      return;
    }
    default: break;
  }
  bar.store(p);
}

void semaphore(CpuBlockContext* ctx, int32_t op, int32_t* p, int32_t value, int32_t site) {
  std::atomic_ref<int32_t> sem(*p);
  if (op == kSemaphoreRelease) {
    sem.store(value, std::memory_order_release);
    return;
  }
  if (sem.load(std::memory_order_acquire) == value) return;
  auto* state = static_cast<RunState*>(ctx->runtime);
  auto cancelled = [&] {
    return state->failure.failed.load(std::memory_order_relaxed) ||
           std::atomic_ref<const int32_t>(*ctx->cancel).load(std::memory_order_relaxed) != 0;
  };
  state->spinning++;
  using Clock = std::chrono::steady_clock;
  Clock::time_point stuck_since{};
  bool stuck = false;
  for (int64_t spins = 0;; ++spins) {
    int32_t now = sem.load(std::memory_order_acquire);
    if (now == value || cancelled()) break;
    if (state->spinning.load() >= state->running.load()) {
      if (!stuck) stuck_since = Clock::now();
      stuck = true;
      if (Clock::now() - stuck_since > std::chrono::milliseconds(500)) {
        fail_at(ctx, site, [&](const std::string& where, const CpuAccessSite& s) {
          return fmt::format(
              "{}{}: block ({}, {}, {}) waits for the semaphore ({}) to hold {}, but it holds {} and every block the "
              "CPU backend is running ({} at a time, started in order of block index, x fastest) waits on a "
              "semaphore: the block that would release it has not started or never does (on a GPU this can hang)",
              where, s.inst, ctx->bx, ctx->by, ctx->bz, s.tensor, value, now, state->workers);
        });
        break;
      }
    } else {
      stuck = false;
    }
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    else std::this_thread::yield();
  }
  state->spinning--;
}

// --- the blocks of a cluster, tensor memory, cluster launch control (CpuBlockContext::service) ------

template <class F>
void fail_block(CpuBlockContext* ctx, int32_t site, F message) {
  if (site >= 0) return fail_at(ctx, site, [&](const std::string& where, const CpuAccessSite& s) {
    return message(where + s.inst + ": ");
  });
  auto* state = static_cast<RunState*>(ctx->runtime);
  std::lock_guard<std::mutex> lock(state->failure.mutex);
  if (state->failure.failed.load()) return;
  state->failure.message = message(std::string());
  state->failure.failed.store(true);
}

// Tensor memory columns [first, first + n) of a block: whether all are free, and marking them.
bool columns_free(const BlockState& b, int64_t first, int64_t n) {
  for (int64_t c = first; c < first + n; ++c)
    if (b.columns[c / 64] >> (c % 64) & 1) return false;
  return true;
}
void mark_columns(BlockState& b, int64_t first, int64_t n, bool used) {
  for (int64_t c = first; c < first + n; ++c) {
    if (used) b.columns[c / 64] |= uint64_t(1) << (c % 64);
    else b.columns[c / 64] &= ~(uint64_t(1) << (c % 64));
  }
}
int64_t columns_used(const BlockState& b) {
  int64_t n = 0;
  for (uint64_t w : b.columns) n += __builtin_popcountll(w);
  return n;
}

int64_t service(CpuBlockContext* ctx, int32_t op, int64_t a, int64_t b, void* p) {
  auto* blk = static_cast<BlockState*>(ctx->block);
  auto* state = static_cast<RunState*>(ctx->runtime);
  fibers::Scheduler* sched = fibers::Scheduler::current();
  ClusterRun* cl = blk->cluster;
  auto peer = [&](int64_t rank) -> BlockState* {
    if (rank >= 0 && rank < int64_t(cl->blocks.size())) return cl->blocks[size_t(rank)];
    fail_block(ctx, -1, [&](const std::string&) {
      return fmt::format("block ({}, {}, {}) addresses block {} of its cluster, which has {} blocks", ctx->bx, ctx->by,
                         ctx->bz, rank, cl->blocks.size());
    });
    return blk;
  };
  switch (op) {
    case kServicePeerShared: return int64_t(reinterpret_cast<uintptr_t>(peer(a)->smem));
    case kServicePeerTmem: return int64_t(reinterpret_cast<uintptr_t>(peer(a)->ctx.tmem));
    case kServiceTmemAlloc: {
      int32_t site = int32_t(b);
      if (blk->relinquished) {
        fail_block(ctx, site, [&](const std::string& where) {
          return fmt::format("{}block ({}, {}, {}) allocates tensor memory after tcgen05.relinquish_alloc_permit",
                             where, ctx->bx, ctx->by, ctx->bz);
        });
        return 0;
      }
      // The lowest free run of `a` columns aligned to its size; waits (as the GPU's tcgen05.alloc
      // does) while another group of the block holds them.
      int64_t found = -1;
      auto find = [&] {
        for (int64_t c = 0; c + a <= 512; c += a)
          if (columns_free(*blk, c, a)) return found = c, true;
        return false;
      };
      if (!find()) {
        if (!sched) {
          fail_block(ctx, site, [&](const std::string& where) {
            return fmt::format("{}block ({}, {}, {}) asks for {} columns of tensor memory and {} of its 512 are "
                               "allocated: it would wait forever for them (every tcgen05.alloc needs its dealloc)",
                               where, ctx->bx, ctx->by, ctx->bz, a, columns_used(*blk));
          });
          return 0;
        }
        sched->wait_until(find, [ctx, a, blk] {
          return fmt::format("block ({}, {}, {}) waits in tcgen05.alloc for {} columns of tensor memory ({} of 512 "
                             "allocated)", ctx->bx, ctx->by, ctx->bz, a, columns_used(*blk));
        });
      }
      mark_columns(*blk, found, a, true);
      return found;  // lane 0: (0 << 16) | column
    }
    case kServiceTmemDealloc: {
      int64_t first = a & 0xffff, n = b;
      bool whole = true;
      for (int64_t c = first; c < first + n && c < 512; ++c)
        whole = whole && (blk->columns[c / 64] >> (c % 64) & 1);
      if (!whole || (a >> 16) != 0 || first + n > 512) {
        fail_block(ctx, -1, [&](const std::string&) {
          return fmt::format("block ({}, {}, {}): tcgen05.dealloc of columns [{}, {}) that are not allocated",
                             ctx->bx, ctx->by, ctx->bz, first, first + n);
        });
        return 0;
      }
      mark_columns(*blk, first, n, false);
      if (sched) sched->progress();
      return 0;
    }
    case kServiceTmemRelinquish: blk->relinquished = true; return 0;
    case kServiceClusterSync: {
      // Every block of the cluster arrives; the last one releases them.
      uint64_t generation = cl->generation;
      if (++cl->arrived == int(cl->blocks.size())) {
        cl->arrived = 0;
        ++cl->generation;
        if (sched) sched->progress();
        return 0;
      }
      sched->wait_until([cl, generation] { return cl->generation != generation; },
                        [ctx, cl] {
                          return fmt::format("block ({}, {}, {}) waits in cluster.sync ({} of the cluster's {} blocks "
                                             "arrived)", ctx->bx, ctx->by, ctx->bz, cl->arrived, cl->blocks.size());
                        });
      return 0;
    }
    case kServiceNamedBarrier: {
      // The group's threads arrive; the barrier completes at arrive_count (the GPU's bar.sync /
      // bar.arrive), and a waiting group lets the other fibers run until it has.
      int32_t site = int32_t(b), id = int32_t(a & 15);
      bool wait = (a >> 4) & 1;
      int64_t count = (a >> 8) & 0xffffff, threads = a >> 32;
      BlockState::Named& nb = blk->named[id];
      uint64_t generation = nb.generation;
      nb.arrived += threads;
      if (nb.arrived >= count) {
        nb.arrived = 0;
        ++nb.generation;
      }
      if (sched) sched->progress();
      if (!wait || nb.generation != generation) return 0;
      if (!sched) {
        fail_block(ctx, site, [&](const std::string& where) {
          return fmt::format("{}block ({}, {}, {}) waits at named barrier {} for {} threads, {} of which arrived, and "
                             "the block runs its thread groups in order, so no later one can arrive (thread groups "
                             "that meet at a named barrier run at once only as consecutive siblings)",
                             where, ctx->bx, ctx->by, ctx->bz, id, count, nb.arrived);
        });
        return 0;
      }
      sched->wait_until([&nb, generation] { return nb.generation != generation; },
                        [ctx, &nb, id, count, site] {
                          auto* st = static_cast<RunState*>(ctx->runtime);
                          const CpuAccessSite& s = st->kernel->sites.at(size_t(site));
                          return fmt::format("{}{}: block ({}, {}, {}) waits at named barrier {}: {} of its {} "
                                             "threads arrived",
                                             s.loc.valid() ? s.loc.str() + ": " : "", s.inst, ctx->bx, ctx->by,
                                             ctx->bz, id, nb.arrived, count);
                        });
      return 0;
    }
    case kServiceClcTryCancel: {
      // Cancels the next cluster that has not started (it never will: it is taken from the queue the
      // host threads start clusters from) and answers with its first block index.
      int64_t c = state->next_cluster.fetch_add(1);
      int32_t response[4] = {0, 0, 0, 0};
      if (c < state->clusters) {
        auto origin = state->cluster_origin(c);
        response[0] = 1;
        response[1] = origin[0], response[2] = origin[1], response[3] = origin[2];
      }
      auto* bar = reinterpret_cast<uint8_t*>(uintptr_t(a));
      auto* resp = static_cast<uint8_t*>(p);
      int64_t resp_off = resp - blk->smem, bar_off = bar - blk->smem;
      std::vector<BlockState*> to = {blk};
      if (b) to = cl->blocks;  // multicast: every block of the cluster, at the same offsets
      for (BlockState* t : to) {
        std::memcpy(t->smem + resp_off, response, 16);
        mbarrier(&t->ctx, kMbarrierCompleteTx, reinterpret_cast<uint64_t*>(t->smem + bar_off), 16, -1);
      }
      return response[0];
    }
    default: return 0;
  }
}

// CpuBlockContext::fork: the thread groups as fibers, each on its own copy of the frame; then
// the bytes each changed back into the frame (a variable that several groups changed holds the
// last group's value: the GPU's threads each have their own).
void fork(CpuBlockContext* ctx, int32_t n, void* const* parts, uint8_t* frame, int64_t frame_bytes,
          const int64_t* args) {
  using PartFn = void (*)(const int64_t*, int32_t, int32_t, int32_t, uint8_t*, CpuBlockContext*, uint8_t*);
  fibers::Scheduler* sched = fibers::Scheduler::current();
  size_t bytes = size_t(std::max<int64_t>(frame_bytes, 1));
  size_t padded = (bytes + 63) / 64 * 64;
  std::vector<uint8_t> snapshot(frame, frame + bytes);
  auto release = [](uint8_t* f) { std::free(f); };
  std::vector<std::unique_ptr<uint8_t, decltype(release)>> frames;
  auto* blk = static_cast<BlockState*>(ctx->block);
  int remaining = n;
  for (int32_t i = 0; i < n; ++i) {
    frames.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(64, padded)), release);
    std::memcpy(frames.back().get(), frame, bytes);
    uint8_t* mine = frames.back().get();
    auto fn = reinterpret_cast<PartFn>(parts[i]);
    sched->spawn([=, &remaining] {
      fn(args, ctx->bx, ctx->by, ctx->bz, blk->smem, ctx, mine);
      --remaining;
    });
  }
  sched->wait_until([&] { return remaining == 0; }, [ctx, &remaining] {
    return fmt::format("block ({}, {}, {}) waits for {} of its thread groups to finish", ctx->bx, ctx->by, ctx->bz,
                       remaining);
  });
  for (auto& f : frames)
    for (size_t j = 0; j < bytes; ++j)
      if (f.get()[j] != snapshot[j]) frame[j] = f.get()[j];
}

// Threads for the blocks, kept between launches: creating one per worker and launch (a stack of
// 64 MiB and more, mapped and faulted in anew) made a one-block launch cost about 300 us. A
// pooled worker has a stack of kPooledStack; a kernel whose arrays need more gets threads of its
// own for the launch (their stacks would stay resident in the pool). Forked children start with
// an empty pool (the parent's threads do not exist there).
constexpr size_t kPooledArrays = size_t(8) << 20;  // the block function's arrays a pooled stack holds
// Address space only: the kernel commits what the block touches. 64 MiB beyond the arrays the
// block function declares covers the rest of its frames and the runtime's.
constexpr size_t kStackMargin = size_t(64) << 20;

struct WorkDone {
  std::mutex mutex;
  std::condition_variable cv;
  int count = 0;
  void finish() {
    std::lock_guard<std::mutex> lock(mutex);
    ++count;
    cv.notify_all();
  }
};

class WorkerPool {
 public:
  static WorkerPool& get() {
    static WorkerPool* pool = [] {
      auto* p = new WorkerPool();  // never destroyed: its threads outlive main() waiting for work
      pthread_atfork([] { get().mutex_.lock(); }, [] { get().mutex_.unlock(); },
                     [] {
                       WorkerPool& self = get();
                       self.idle_.clear();  // the parent's threads (leaked: they are not in this process)
                       self.mutex_.unlock();
                     });
      return p;
    }();
    return *pool;
  }

  // Runs fn(w) for w in [0, n) on pooled threads, each finishing with done.finish().
  void start(int n, const std::function<void(int)>& fn, WorkDone& done) {
    std::vector<Worker*> mine;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (int(mine.size()) < n && !idle_.empty()) {
        mine.push_back(idle_.back());
        idle_.pop_back();
      }
    }
    while (int(mine.size()) < n) mine.push_back(spawn());
    for (int w = 0; w < n; ++w) {
      Worker* k = mine[size_t(w)];
      std::lock_guard<std::mutex> lock(k->mutex);
      k->fn = &fn;
      k->index = w;
      k->done = &done;
      k->cv.notify_one();
    }
  }

 private:
  struct Worker {
    std::mutex mutex;
    std::condition_variable cv;
    const std::function<void(int)>* fn = nullptr;
    int index = 0;
    WorkDone* done = nullptr;
  };
  std::mutex mutex_;
  std::vector<Worker*> idle_;

  Worker* spawn() {
    auto* k = new Worker();
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kPooledArrays + kStackMargin);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    int rc = pthread_create(&thread, &attr, [](void* p) -> void* {
      auto* k = static_cast<Worker*>(p);
      for (;;) {
        std::unique_lock<std::mutex> lock(k->mutex);
        k->cv.wait(lock, [&] { return k->fn != nullptr; });
        const std::function<void(int)>* fn = k->fn;
        WorkDone* done = k->done;
        int index = k->index;
        k->fn = nullptr;
        lock.unlock();
        (*fn)(index);
        {
          // Idle again before the launch learns it is done, so its next launch finds it.
          WorkerPool& pool = get();
          std::lock_guard<std::mutex> pool_lock(pool.mutex_);
          pool.idle_.push_back(k);
        }
        done->finish();
      }
      return nullptr;
    }, k);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      delete k;
      throw Error(fmt::format("CPU backend: cannot start a worker thread ({})", std::strerror(rc)));
    }
    return k;
  }
};

// Runs fn(worker) on `n` threads with stacks big enough for large register tiles: pooled ones
// when the block's arrays fit a pooled stack, else threads of this launch. Meanwhile the calling
// thread asks `interrupted` (when given) about every 50 ms and sets `cancel` once it says yes;
// it returns when every worker has.
void run_workers(int n, int64_t stack_bytes, const std::function<void(int)>& fn,
                 const std::function<bool()>& interrupted, std::atomic<int32_t>& cancel) {
  WorkDone done;
  std::vector<pthread_t> threads;
  struct Arg {
    const std::function<void(int)>* fn;
    int worker;
    WorkDone* done;
  };
  std::vector<Arg> args;
  if (size_t(stack_bytes) <= kPooledArrays) {
    WorkerPool::get().start(n, fn, done);
  } else {
    threads.resize(size_t(n));
    args.resize(size_t(n));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, size_t(stack_bytes) + kStackMargin);
    for (int w = 0; w < n; ++w) {
      args[w] = {&fn, w, &done};
      int rc = pthread_create(&threads[w], &attr, [](void* p) -> void* {
        auto* a = static_cast<Arg*>(p);
        (*a->fn)(a->worker);
        a->done->finish();
        return nullptr;
      }, &args[w]);
      if (rc != 0) {
        pthread_attr_destroy(&attr);
        for (int j = 0; j < w; ++j) pthread_join(threads[j], nullptr);
        throw Error(fmt::format("CPU backend: cannot start a worker thread ({})", std::strerror(rc)));
      }
    }
    pthread_attr_destroy(&attr);
  }
  {
    std::unique_lock<std::mutex> lock(done.mutex);
    while (!done.cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return done.count == n; })) {
      if (!interrupted || cancel.load(std::memory_order_relaxed)) continue;
      lock.unlock();
      bool stop = interrupted();
      lock.lock();
      if (stop) cancel.store(1, std::memory_order_relaxed);
    }
  }
  for (pthread_t& t : threads) pthread_join(t, nullptr);
}

// The most 32-bit registers per thread that the register tensors need at once (each live from
// its first to its last instruction in program order): a lower bound of what ptxas needs. A
// tensor that shares its operand's registers counts once: the result of a view, reshape,
// squeeze, unsqueeze or transpose (the emitter copies them slot by slot, and the CUDA compiler
// removes the copies), and the source of an assign whose last use the assign is (`acc =
// self.dot(a, b, acc)` accumulates in place: the dot's result and acc are one set of registers).
struct RegisterEstimate {
  int64_t peak = 0;
  // The register tensor (its root) with the most registers per thread live at the peak.
  const TensorNode* largest = nullptr;
  int64_t largest_registers = 0;
};

RegisterEstimate register_estimate(const Kernel& k) {
  struct Walk : StmtVisitor {
    int64_t index = 0;
    std::unordered_map<const TensorNode*, std::array<int64_t, 3>> uses;  // first, last, registers
    std::vector<std::pair<const TensorNode*, const TensorNode*>> views;  // result -> operand
    std::vector<std::tuple<int64_t, const TensorNode*, const TensorNode*>> assigns;  // index, dst, src
    void visit_inst(const InstNode& inst) override {
      Tensor out = inst.output();
      switch (inst.kind()) {
        case InstKind::View: case InstKind::Reshape: case InstKind::Squeeze: case InstKind::Unsqueeze:
        case InstKind::Transpose:
          for (auto& [t, access] : inst.operands())
            if (t.defined() && t.get() != out.get() && t.is_register() && out.defined() && out.is_register())
              views.emplace_back(out.get(), t.get());
          break;
        case InstKind::Assign: {
          auto& a = static_cast<const AssignInst&>(inst);
          if (a.dst.defined() && a.src.defined() && a.dst.is_register() && a.src.is_register())
            assigns.emplace_back(index, a.dst.get(), a.src.get());
          break;
        }
        default: break;
      }
      for (auto& [t, access] : inst.operands()) {
        if (!t.defined() || !t.is_register() || !t->layout.defined()) continue;
        auto [it, fresh] = uses.try_emplace(t.get(), std::array<int64_t, 3>{index, index, 0});
        it->second[1] = index;
        if (fresh) it->second[2] = (t->layout.local_size() * t.dtype().bits() + 31) / 32;
      }
      ++index;
    }
  } walk;
  walk.visit(k);
  std::unordered_map<const TensorNode*, const TensorNode*> renames;
  for (auto& [result, operand] : walk.views) renames[result] = operand;
  for (auto& [at, dst, src] : walk.assigns) {
    auto it = walk.uses.find(src);
    if (it != walk.uses.end() && it->second[1] == at && src != dst) renames[src] = dst;
  }
  auto root = [&](const TensorNode* t) {
    for (int hops = 0; hops < 1024; ++hops) {  // rename chains end (each hop moves to an older tensor)
      auto it = renames.find(t);
      if (it == renames.end()) break;
      t = it->second;
    }
    return t;
  };
  std::unordered_map<const TensorNode*, std::array<int64_t, 3>> live;  // by root: first, last, registers
  for (auto& [t, u] : walk.uses) {
    auto [it, fresh] = live.try_emplace(root(t), u);
    if (fresh) continue;
    it->second[0] = std::min(it->second[0], u[0]);
    it->second[1] = std::max(it->second[1], u[1]);
    it->second[2] = std::max(it->second[2], u[2]);
  }
  std::map<int64_t, std::vector<std::pair<const TensorNode*, int64_t>>> change;  // index -> (root, +-registers)
  for (auto& [t, l] : live) {
    change[l[0]].emplace_back(t, l[2]);
    change[l[1] + 1].emplace_back(t, -l[2]);
  }
  RegisterEstimate e;
  int64_t now = 0;
  std::unordered_map<const TensorNode*, int64_t> alive;
  for (auto& [i, deltas] : change) {
    for (auto& [t, d] : deltas) {
      now += d;
      if (d > 0) alive[t] = d;
      else alive.erase(t);
    }
    if (now > e.peak) {
      e.peak = now;
      for (auto& [t, r] : alive)
        if (r > e.largest_registers) e.largest = t, e.largest_registers = r;
    }
  }
  return e;
}

// The register tensor that holds the most at the peak, for the spill warnings.
std::string largest_tensor(const RegisterEstimate& e) {
  if (!e.largest) return "";
  return fmt::format(" (the largest: {}, {}{}, {} per thread)", e.largest->name, e.largest->dtype.name(),
                     shape_str(e.largest->shape), e.largest_registers);
}

// What the spill warnings advise. More warps spread the tiles thinner, except for a dot whose
// tile the mma.sync tiling could not split over every warp (3 warps, say): there, what helps is
// a warp count it splits over.
std::string spill_advice(const Kernel& k) {
  struct Dots : StmtVisitor {
    int64_t warps = 0;
    std::string found;
    void visit_inst(const InstNode& i) override {
      if (i.lowering.op != MachineOp::MmaSync || !found.empty()) return;
      const DotTiling& d = i.lowering.dot;
      int64_t used = d.warps_m * d.warps_n;
      Tensor out = i.output();
      if (used >= warps || !out.defined() || out.rank() != 2) return;
      auto shape = out.static_shape();
      int64_t tiles = (shape[0] / 16) * (shape[1] / 8), pow2 = 1;
      while (pow2 < warps) pow2 *= 2;
      found = fmt::format("; the {} at {} spreads its {} tile over {} of the {} warps (warps={}x{}), so each of "
                          "them holds more: {}",
                          i.display_name(), i.loc.str(), shape_str(shape), used, warps, d.warps_m, d.warps_n,
                          pow2 <= tiles ? fmt::format("use {} warps (a count it splits over) or smaller tiles", pow2)
                                        : std::string("use smaller tiles"));
    }
  } d;
  d.warps = k.warps;
  d.visit(k);
  return d.found.empty() ? "; give each thread less: more warps or smaller tiles" : d.found;
}

// What would keep a kernel that runs here from running (well) on a GPU: more shared memory
// than the GPU allows per block (the present GPU's, or without one those of sm_80 and
// sm_86 / sm_89, below sm_90's budget that the CPU target plans with), or registers beyond
// what the launch bounds allow, so that ptxas spills (checked with an NVRTC compile when the
// register tensors alone come near the limit and NVRTC is present; beyond it, without compiling).
std::vector<std::string> gpu_limits(const Program& traced, const Kernel& k) {
  std::vector<std::string> out;
  std::vector<std::string> archs;
  // A Blackwell kernel (tensor memory, cluster launch control) is for sm_100a only.
  struct Blackwell : StmtVisitor {
    bool found = false;
    void visit_inst(const InstNode& i) override { found = found || i.def().traits.min_sm >= 100; }
  } blackwell;
  blackwell.visit(k.body);
  if (blackwell.found) archs = {"sm_100a"};
  else if (gpu_available()) archs.push_back(current_device().arch());
  else archs = {"sm_80", "sm_86", "sm_89"};
  std::string over;
  for (auto& a : archs) {
    Target t = Target::from_arch(a);
    if (k.shared_memory_bytes > t.shared_memory_per_block)
      over += fmt::format("{}{} ({} bytes)", over.empty() ? "" : ", ", a, t.shared_memory_per_block);
  }
  if (!over.empty())
    out.push_back(fmt::format("kernel {} uses {} bytes of shared memory per block, more than {} allows{}", k.name,
                              k.shared_memory_bytes, over, gpu_available() ? " (this machine's GPU)" : ""));
  // copy_async calls that select_instructions could not give cp.async (the GPU compile warns too).
  struct SynchronousCopies : StmtVisitor {
    std::vector<std::string> found;
    void visit_inst(const InstNode& i) override {
      if (i.kind() == InstKind::CopyAsync && i.lowering.op == MachineOp::Simt)
        found.push_back(fmt::format("{} at {}: {}", i.display_name(), i.loc.str(), i.lowering.note));
    }
  } copies;
  copies.visit(k);
  for (auto& c : copies.found) out.push_back(fmt::format("kernel {}: {}", k.name, c));
  int64_t threads = std::max<int64_t>(1, k.num_threads());
  int64_t limit = std::min<int64_t>(255, 65536 / threads / 8 * 8);
  RegisterEstimate estimate = register_estimate(k);
  if (estimate.peak > limit) {
    // Certain to spill (and NVRTC would take minutes on tiles this large): said without compiling.
    out.push_back(fmt::format("kernel {} would spill to local memory, which is slow: its register tensors hold at "
                              "least {} registers per thread at once{}, and {} threads per block allow {}{}",
                              k.name, estimate.peak, largest_tensor(estimate), threads, limit, spill_advice(k)));
  } else if (estimate.peak * 2 > limit && nvrtc_available()) {
    std::string arch = archs.front() == "sm_80" ? "sm_90a" : archs.front();  // sm_100a for a Blackwell kernel
    try {
      KernelResources r = compile_program(traced, arch, &default_cache()).resources;
      if (r.spills())
        out.push_back(fmt::format("kernel {} spills to local memory on {} ({}), which is slow: its register tensors "
                                  "hold at least {} registers per thread at once{}, and {} threads per block allow "
                                  "{}{}",
                                  k.name, arch, r.str(), estimate.peak, largest_tensor(estimate), threads, limit,
                                  spill_advice(k)));
    } catch (const Error& e) {
      out.push_back(fmt::format("kernel {} does not compile for {}: {}", k.name, arch, e.what()));
    }
  }
  return out;
}

}  // namespace

bool cpu_backend_available() { return true; }
std::string cpu_unavailable_reason() { return ""; }

CpuKernel::CpuKernel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuKernel::~CpuKernel() = default;

std::shared_ptr<const CpuKernel> CpuKernel::compile(const Program& traced, const CpuOptions& options) {
  if (traced.kernels.size() != 1)
    throw InternalError(fmt::format("CpuKernel::compile expects one kernel, got {}", traced.kernels.size()));
  apply_log_level();
  auto t0 = std::chrono::steady_clock::now();
  PipelineOptions popts;
  popts.target = Target::cpu();
  Program lowered = run_pipeline(traced, popts);
  auto t_pipeline = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  impl->lowered = lowered.kernels[0];
  const Kernel& k = impl->lowered;
  if (k.warps < 1) throw CompileError(fmt::format("kernel {}: warps is not set", k.name), k.loc);
  impl->checked = options.checked || env_checked();
  impl->threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  impl->shared_bytes = k.shared_memory_bytes;
  impl->gpu_warnings = gpu_limits(traced, k);
  {
    // Once per process each: the specializations of one kernel (a ragged size, then an aligned
    // one) mostly say the same (CpuKernel::gpu_warnings still holds every one of them).
    static std::mutex mutex;
    static std::set<std::string> said;
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& w : impl->gpu_warnings)
      if (said.insert(w).second) spdlog::warn("tilus: runs on the CPU backend, but on the GPU: {}", w);
  }
  // A cluster's blocks just run; launch_grid checks the grid against the cluster shape.
  impl->signature = kernel_signature(k, KernelFacts(k));
  impl->signature.arch = "cpu";

  Jit& jit = Jit::get();
  auto context = std::make_unique<llvm::LLVMContext>();
  CpuCodegenOptions copts;
  copts.checked = impl->checked;
  int64_t above = options.fast_compile_above, part = options.part_instructions;
  if (const char* e = std::getenv("TILUS_CPU_FAST_COMPILE_ABOVE"); e && *e) above = std::atoll(e);
  impl->fast = count_instructions(k) > above;
  if (impl->fast) copts.chunk_instructions = std::max<int64_t>(1, part);
  CpuLoweredKernel lk = emit_llvm(k, *context, copts);
  lk.module->setDataLayout(jit.lljit->getDataLayout());
  lk.module->setTargetTriple(jit.lljit->getTargetTriple().str());
  // The machine code is cached on disk (default_cache(), beside the cubins) under a key of the
  // unoptimized LLVM IR, the host CPU, LLVM's version and the optimization level, so that a
  // later process (an autotuned winner, a test run) does not generate it again. The entry
  // symbol is named after the key: an object links once per process.
  lk.module->getFunction(lk.entry)->setName("tilus_kernel");
  std::string key_ir;
  {
    llvm::raw_string_ostream os(key_ir);
    lk.module->print(os, nullptr);
  }
  std::string host = fmt::format("cpu:{}:{}:{}", jit.jtmb.getTargetTriple().str(), jit.jtmb.getCPU(),
                                 jit.jtmb.getFeatures().getString());
  std::string cache_key = DiskCache::key(key_ir, host, LLVM_VERSION_MAJOR * 100 + LLVM_VERSION_MINOR,
                                         {kCpuObjectFormat, impl->fast ? "fast" : "O3"});
  key_ir.clear();
  std::string entry = fmt::format("tilus_{}_{}", k.name, cache_key.substr(0, 16));
  lk.module->getFunction("tilus_kernel")->setName(entry);
  impl->codegen = copts;
  impl->entry = entry;
  impl->forks = lk.forks;
  {
    struct Find : StmtVisitor {
      bool found = false;
      void visit_inst(const InstNode& i) override { found = found || i.kind() == InstKind::Tcgen05Alloc; }
    } find;
    find.visit(k.body);
    impl->tensor_memory = find.found;
  }
  impl->sites = std::move(lk.sites);
  for (const std::string& dir : ir_dump_dirs(traced, popts)) {
    // Next to the pass dumps of run_pipeline: the LLVM IR before optimization.
    if (!impl->ir_printed) {
      llvm::raw_string_ostream os(impl->ir);
      lk.module->print(os, nullptr);
      os.flush();
      impl->ir_printed = true;
    }
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::ofstream(std::filesystem::path(dir) / "cpu.ll") << impl->ir;
  }
  auto t_emit = std::chrono::steady_clock::now();
  // Register tensors are arrays on the block function's stack (whole tiles, up to the verifier's
  // 512 KiB per GPU thread): the workers' stacks are sized to hold them.
  for (const llvm::Function& f : *lk.module) {
    if (f.isDeclaration()) continue;
    for (const llvm::Instruction& inst : f.getEntryBlock())
      if (auto* a = llvm::dyn_cast<llvm::AllocaInst>(&inst))
        if (auto* n = llvm::dyn_cast<llvm::ConstantInt>(a->getArraySize()))
          impl->stack_bytes += int64_t(lk.module->getDataLayout().getTypeAllocSize(a->getAllocatedType())) *
                               int64_t(n->getZExtValue()) + int64_t(a->getAlign().value());
  }
  auto linked = [&]() -> void* {
    std::lock_guard<std::mutex> lock(jit.mutex);
    auto it = jit.loaded.find(cache_key);
    return it == jit.loaded.end() ? nullptr : it->second;
  };
  void* fn = linked();
  std::unique_ptr<llvm::MemoryBuffer> object;
  std::string meta = fmt::format("{{\"format\": \"{}\", \"kernel\": \"{}\", \"entry\": \"{}\", \"host\": \"{}\"}}",
                                 kCpuObjectFormat, k.name, entry, host);
  if (!fn) {
    if (std::optional<CacheEntry> hit = default_cache().load(cache_key); hit && hit->meta == meta) {
      object = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(hit->cubin.data(), hit->cubin.size()), entry);
      spdlog::debug("tilus: kernel {} for the CPU: machine code from the cache ({})", k.name, cache_key);
    }
  }
  impl->from_cache = fn || object;
  auto t_opt = std::chrono::steady_clock::now();
  if (!impl->from_cache) {
    // Each compile has its own target machine (they are not thread-safe), so compiles run in
    // parallel up to linking; a large kernel's machine code is generated without optimization
    // (fast instruction selection and register allocation), which is linear in its size.
    llvm::orc::JITTargetMachineBuilder jtmb = jit.jtmb;
    jtmb.setCodeGenOptLevel(impl->fast ? llvm::CodeGenOpt::None : llvm::CodeGenOpt::Aggressive);
    auto tm = must(jtmb.createTargetMachine(), "creating the target machine");
    optimize(*lk.module, tm.get(), impl->fast);
    t_opt = std::chrono::steady_clock::now();
    object = must(llvm::orc::SimpleCompiler(*tm)(*lk.module), "generating machine code");
    llvm::StringRef bytes = object->getBuffer();
    default_cache().store(cache_key, CacheEntry{"", std::vector<char>(bytes.begin(), bytes.end()), meta});
  }
  lk.module.reset();
  context.reset();
  if (!fn) {
    std::lock_guard<std::mutex> lock(jit.mutex);
    auto it = jit.loaded.find(cache_key);  // another thread may have linked the same kernel meanwhile
    if (it != jit.loaded.end()) {
      fn = it->second;
    } else {
      if (auto err = jit.lljit->addObjectFile(std::move(object)))
        throw InternalError("CPU backend: adding the object: " + take(std::move(err)));
      auto sym = must(jit.lljit->lookup(entry), "looking up the kernel");
#if LLVM_VERSION_MAJOR >= 15
      fn = sym.toPtr<void*>();
#else
      fn = reinterpret_cast<void*>(sym.getAddress());
#endif
      jit.loaded[cache_key] = fn;
    }
  }
  impl->fn = reinterpret_cast<Impl::BlockFn>(fn);
  auto t_end = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  impl->compile_ms = ms(t0, t_end);
  spdlog::debug("tilus: compiled kernel {} for the CPU in {:.1f} ms{}{}{} (passes {:.1f}, LLVM IR {:.1f}, optimizer "
                "{:.1f}, machine code {:.1f})", k.name, impl->compile_ms, impl->checked ? " (checked mode)" : "",
                impl->fast ? " (large: compiled for compile time)" : "",
                impl->from_cache ? " (machine code cached)" : "", ms(t0, t_pipeline), ms(t_pipeline, t_emit),
                ms(t_emit, t_opt), ms(t_opt, t_end));
  return std::shared_ptr<const CpuKernel>(new CpuKernel(std::move(impl)));
}

std::array<uint32_t, 3> CpuKernel::grid(const std::vector<KernelArg>& args) const {
  return launch_grid(impl_->signature, args);
}

const Kernel& CpuKernel::kernel() const { return impl_->lowered; }
const KernelSource& CpuKernel::signature() const { return impl_->signature; }
const std::string& CpuKernel::llvm_ir() const {
  const Impl& k = *impl_;
  std::lock_guard<std::mutex> lock(k.ir_mutex);
  if (!k.ir_printed) {  // the emitter is deterministic: the same IR again
    llvm::LLVMContext context;
    CpuLoweredKernel lk = emit_llvm(k.lowered, context, k.codegen);
    lk.module->getFunction(lk.entry)->setName(k.entry);
    llvm::raw_string_ostream os(k.ir);
    lk.module->print(os, nullptr);
    os.flush();
    k.ir_printed = true;
  }
  return k.ir;
}
bool CpuKernel::checked() const { return impl_->checked; }
double CpuKernel::compile_ms() const { return impl_->compile_ms; }
bool CpuKernel::fast_compiled() const { return impl_->fast; }
bool CpuKernel::from_cache() const { return impl_->from_cache; }
const std::vector<std::string>& CpuKernel::gpu_warnings() const { return impl_->gpu_warnings; }

void CpuKernel::launch(const std::vector<KernelArg>& args, const std::function<bool()>& interrupted) const {
  const Impl& k = *impl_;
  check_arguments(k.signature, args);
  std::array<uint32_t, 3> g = launch_grid(k.signature, args);
  int64_t total = int64_t(g[0]) * g[1] * g[2];
  if (total == 0) return;
  size_t scratch_count = k.lowered.global_tensors.size();
  std::vector<int64_t> slots(args.size() + scratch_count), extents(args.size() + scratch_count, -1);
  for (size_t i = 0; i < args.size(); ++i) {
    DataType t = k.signature.params[i].dtype;
    const KernelArg& a = args[i];
    if (t.is_pointer()) {
      slots[i] = int64_t(a.ptr);
      extents[i] = a.bytes;
    } else if (t.is_float()) {
      double v = a.kind == KernelArg::Kind::Float ? a.f : double(a.i);
      std::memcpy(&slots[i], &v, sizeof v);
    } else {
      slots[i] = a.i;
    }
  }
  // The global tensors: zeros (a checked run fills those that need not be clean with 0xff
  // bytes, so that a kernel relying on zeros there shows it).
  std::vector<std::vector<uint8_t>> scratch(scratch_count);
  for (size_t i = 0; i < scratch_count; ++i) {
    const GlobalScratch& g = k.lowered.global_tensors[i];
    int64_t bytes = global_tensor_bytes(k.signature, args, g);
    scratch[i].assign(size_t(std::max<int64_t>(bytes, 1)) + 64, k.checked && !g.requires_clean ? 0xff : 0);
    slots[args.size() + i] = int64_t(reinterpret_cast<uintptr_t>(scratch[i].data()));
    extents[args.size() + i] = bytes;
  }
  RunState state{&k, {}};
  state.grid = g;
  state.cluster = k.lowered.cluster;
  int64_t csize = state.cluster[0] * state.cluster[1] * state.cluster[2];
  state.clusters = total / csize;
  state.workers = int(std::min<int64_t>(k.threads, state.clusters));
  std::atomic<int32_t> cancel{0};
  static_assert(sizeof(std::atomic<int32_t>) == sizeof(int32_t) && std::atomic<int32_t>::is_always_lock_free,
                "the generated code reads the flag as a plain i32 (atomically)");
  static_assert(offsetof(CpuBlockContext, cancel) == 3 * sizeof(void*), "the generated code reads field 3");
  int workers = state.workers;
  // The blocks of a cluster, and the thread groups that wait on each other, run as fibers.
  bool use_fibers = csize > 1 || k.forks;
  auto stopped = [&] {
    return state.failure.failed.load(std::memory_order_relaxed) || cancel.load(std::memory_order_relaxed);
  };
  run_workers(workers, k.stack_bytes, [&](int) {
    std::vector<std::unique_ptr<BlockState>> blocks;
    ClusterRun cluster;
    for (int64_t r = 0; r < csize; ++r) {
      auto blk = std::make_unique<BlockState>();
      blk->shared_buffer.assign(size_t(std::max<int64_t>(k.shared_bytes, 1)) + 128, 0);
      blk->smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(blk->shared_buffer.data()) + 127) / 128 * 128);
      if (k.tensor_memory) blk->tmem_buffer.assign(size_t(kCpuTmemBytes), 0);
      blk->rank = int(r);
      blk->cluster = &cluster;
      blk->ctx = CpuBlockContext{&report, extents.data(), &state, reinterpret_cast<const int32_t*>(&state.stop), 0, 0, 0,
                                 &mbarrier, &semaphore, &service, &fork,
                                 blk->tmem_buffer.empty() ? nullptr : blk->tmem_buffer.data(), blk.get()};
      cluster.blocks.push_back(blk.get());
      blocks.push_back(std::move(blk));
    }
    std::unique_ptr<fibers::Scheduler> sched;
    // A fiber runs on a stack of its own (so clustered and forking launches use pooled threads too).
    if (use_fibers) sched = std::make_unique<fibers::Scheduler>(size_t(k.stack_bytes) + kStackMargin);
    for (int64_t c = state.next_cluster++; c < state.clusters && !stopped(); c = state.next_cluster++) {
      auto origin = state.cluster_origin(c);
      for (int64_t r = 0; r < csize; ++r) {
        BlockState& blk = *blocks[size_t(r)];
        // Rank r of the cluster: x fastest (the GPU's %cluster_ctarank).
        int64_t rx = r % state.cluster[0], ry = r / state.cluster[0] % state.cluster[1],
                rz = r / (state.cluster[0] * state.cluster[1]);
        blk.ctx.bx = int32_t(origin[0] + rx);
        blk.ctx.by = int32_t(origin[1] + ry);
        blk.ctx.bz = int32_t(origin[2] + rz);
        std::fill(std::begin(blk.columns), std::end(blk.columns), 0);
        blk.relinquished = false;
        std::fill(std::begin(blk.named), std::end(blk.named), BlockState::Named{});
      }
      cluster.arrived = 0;
      state.running += int(csize);
      if (!use_fibers) {
        BlockState& blk = *blocks[0];
        k.fn(slots.data(), blk.ctx.bx, blk.ctx.by, blk.ctx.bz, blk.smem, &blk.ctx);
      } else {
        for (auto& b : blocks) {
          BlockState* blk = b.get();
          sched->spawn([&, blk] { k.fn(slots.data(), blk->ctx.bx, blk->ctx.by, blk->ctx.bz, blk->smem, &blk->ctx); });
        }
        if (!sched->run(stopped)) {
          // Every fiber waits on another: on the GPU the blocks would hang.
          std::string what;
          for (auto& w : sched->blocked()) what += "\n  " + w;
          std::lock_guard<std::mutex> lock(state.failure.mutex);
          if (!state.failure.failed.load()) {
            state.failure.message = fmt::format(
                "the threads of cluster {} wait on each other and none can go on (on a GPU the blocks would hang):{}",
                c, what);
            state.failure.failed.store(true);
          }
          state.stop.store(1);
        }
        sched->clear();
      }
      state.running -= int(csize);
      if (stopped()) {
        state.stop.store(1);
        break;
      }
      // Tensor memory a block left allocated: the GPU's next block on the SM could not have it.
      for (auto& b : blocks)
        if (int64_t n = columns_used(*b); n > 0) {
          fail_block(&b->ctx, -1, [&](const std::string&) {
            return fmt::format("block ({}, {}, {}) ended with {} columns of tensor memory allocated: every "
                               "tcgen05.alloc needs a tcgen05.dealloc before the kernel ends",
                               b->ctx.bx, b->ctx.by, b->ctx.bz, n);
          });
          state.stop.store(1);
        }
    }
  }, [&]() -> bool {
    if (!interrupted) return false;
    bool yes = interrupted();
    if (yes) state.stop.store(1);
    return yes;
  }, cancel);
  if (cancel.load()) throw CpuInterrupted(fmt::format("kernel {}: interrupted", k.signature.name));
  if (state.failure.failed.load()) throw CpuCheckError(fmt::format("kernel {}: {}", k.signature.name, state.failure.message));
  // A requires_clean global tensor must be left zero: the GPU runtime clears it only once.
  for (size_t i = 0; i < scratch_count; ++i) {
    const GlobalScratch& g = k.lowered.global_tensors[i];
    if (!g.requires_clean) continue;
    size_t bytes = size_t(extents[args.size() + i]);
    auto first = std::find_if(scratch[i].begin(), scratch[i].begin() + bytes, [](uint8_t v) { return v != 0; });
    if (first == scratch[i].begin() + bytes) continue;
    int64_t elem = std::max<int64_t>(1, g.dtype().bits() / 8);
    throw CpuCheckError(fmt::format(
        "kernel {}: {}: global_tensor {}{} (requires_clean=True) is not all zero after the launch (element {} in "
        "row-major order is not): a kernel must leave such a tensor zero, since the runtime clears it only when it "
        "allocates it and the next launch would see what this one left",
        k.signature.name, g.loc.str(), g.dtype().name(), shape_str(g.shape), (first - scratch[i].begin()) / elem));
  }
}

#endif

}  // namespace tilus
