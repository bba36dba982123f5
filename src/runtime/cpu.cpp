// The CPU executor: ORC LLJIT over the CPU code generator's LLVM IR, blocks on CPU threads.
#include "tilus/runtime/cpu_kernel.h"

#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "tilus/ir/facts.h"
#include "tilus/passes/pipeline.h"

#ifdef TILUS_HAVE_LLVM
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "tilus/codegen/llvm_emitter.h"
#endif

namespace tilus {

namespace {
bool env_checked() {
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
void CpuKernel::launch(const std::vector<KernelArg>&) const {}
std::array<uint32_t, 3> CpuKernel::grid(const std::vector<KernelArg>&) const { return {0, 0, 0}; }
const Kernel& CpuKernel::kernel() const { throw InternalError("CPU backend not built"); }
const std::string& CpuKernel::llvm_ir() const { throw InternalError("CPU backend not built"); }
bool CpuKernel::checked() const { return false; }
double CpuKernel::compile_ms() const { return 0; }

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

void optimize(llvm::Module& m, llvm::TargetMachine* tm) {
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
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

// One JIT per process: modules are added to it, never removed (kernels live as long as the
// process, like loaded CUDA modules).
struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple()};
  std::mutex mutex;
  uint64_t next_id = 0;

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
};

}  // namespace

struct CpuKernel::Impl {
  Kernel lowered;
  KernelSource signature;  // name, params, grid: for argument checks and the grid
  std::string ir;
  std::vector<CpuAccessSite> sites;
  int64_t shared_bytes = 0;
  bool checked = false;
  int threads = 0;
  double compile_ms = 0;
  using BlockFn = void (*)(const int64_t*, int32_t, int32_t, int32_t, uint8_t*, CpuBlockContext*);
  BlockFn fn = nullptr;
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

// Runs fn(worker) on `n` threads with stacks big enough for large register tiles.
void run_workers(int n, const std::function<void(int)>& fn) {
  struct Arg {
    const std::function<void(int)>* fn;
    int worker;
  };
  std::vector<pthread_t> threads(static_cast<size_t>(n));
  std::vector<Arg> args(static_cast<size_t>(n));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t(256) << 20);  // reserved lazily by the kernel
  for (int w = 0; w < n; ++w) {
    args[w] = {&fn, w};
    int rc = pthread_create(&threads[w], &attr, [](void* p) -> void* {
      auto* a = static_cast<Arg*>(p);
      (*a->fn)(a->worker);
      return nullptr;
    }, &args[w]);
    if (rc != 0) {
      pthread_attr_destroy(&attr);
      for (int j = 0; j < w; ++j) pthread_join(threads[j], nullptr);
      throw Error(fmt::format("CPU backend: cannot start a worker thread ({})", std::strerror(rc)));
    }
  }
  pthread_attr_destroy(&attr);
  for (int w = 0; w < n; ++w) pthread_join(threads[w], nullptr);
}

}  // namespace

bool cpu_backend_available() { return true; }
std::string cpu_unavailable_reason() { return ""; }

CpuKernel::CpuKernel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CpuKernel::~CpuKernel() = default;

std::shared_ptr<const CpuKernel> CpuKernel::compile(const Program& traced, const CpuOptions& options) {
  if (traced.kernels.size() != 1)
    throw InternalError(fmt::format("CpuKernel::compile expects one kernel, got {}", traced.kernels.size()));
  auto t0 = std::chrono::steady_clock::now();
  PipelineOptions popts;
  popts.target = Target::cpu();
  Program lowered = run_pipeline(traced, popts);
  auto impl = std::make_unique<Impl>();
  impl->lowered = lowered.kernels[0];
  const Kernel& k = impl->lowered;
  if (k.warps < 1) throw CompileError(fmt::format("kernel {}: warps is not set", k.name), k.loc);
  impl->checked = options.checked || env_checked();
  impl->threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  impl->shared_bytes = k.shared_memory_bytes;
  // A cluster's blocks just run; launch_grid checks the grid against the cluster shape.
  impl->signature = kernel_signature(k, KernelFacts(k));
  impl->signature.arch = "cpu";

  Jit& jit = Jit::get();
  auto context = std::make_unique<llvm::LLVMContext>();
  CpuCodegenOptions copts;
  copts.checked = impl->checked;
  CpuLoweredKernel lk = emit_llvm(k, *context, copts);
  std::string entry;
  {
    std::lock_guard<std::mutex> lock(jit.mutex);
    entry = fmt::format("tilus_{}_{}", k.name, jit.next_id++);
  }
  lk.module->getFunction(lk.entry)->setName(entry);
  {
    llvm::raw_string_ostream os(impl->ir);
    lk.module->print(os, nullptr);
  }
  impl->sites = std::move(lk.sites);
  if (const char* dump = std::getenv("TILUS_DUMP_IR"); dump && *dump) {
    // Next to the pass dumps of run_pipeline: the LLVM IR before optimization.
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::path(dump) / k.name;
    std::filesystem::create_directories(dir, ec);
    std::ofstream(dir / "cpu.ll") << impl->ir;
  }
  lk.module->setDataLayout(jit.lljit->getDataLayout());
  lk.module->setTargetTriple(jit.lljit->getTargetTriple().str());
  {
    auto tm = must(jit.jtmb.createTargetMachine(), "creating the target machine");
    optimize(*lk.module, tm.get());
  }
  // The lookup compiles the module to machine code with the JIT's one target machine, which is
  // not thread-safe: one compile at a time (the optimization above runs in parallel).
  std::unique_lock<std::mutex> jit_lock(jit.mutex);
  if (auto err = jit.lljit->addIRModule(llvm::orc::ThreadSafeModule(std::move(lk.module), std::move(context))))
    throw InternalError("CPU backend: adding the module: " + take(std::move(err)));
  auto sym = must(jit.lljit->lookup(entry), "looking up the kernel");
  jit_lock.unlock();
#if LLVM_VERSION_MAJOR >= 15
  impl->fn = sym.toPtr<Impl::BlockFn>();
#else
  impl->fn = reinterpret_cast<Impl::BlockFn>(sym.getAddress());
#endif
  impl->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  spdlog::debug("tilus: compiled kernel {} for the CPU in {:.1f} ms{}", k.name, impl->compile_ms,
                impl->checked ? " (checked mode)" : "");
  return std::shared_ptr<const CpuKernel>(new CpuKernel(std::move(impl)));
}

std::array<uint32_t, 3> CpuKernel::grid(const std::vector<KernelArg>& args) const {
  return launch_grid(impl_->signature, args);
}

const Kernel& CpuKernel::kernel() const { return impl_->lowered; }
const std::string& CpuKernel::llvm_ir() const { return impl_->ir; }
bool CpuKernel::checked() const { return impl_->checked; }
double CpuKernel::compile_ms() const { return impl_->compile_ms; }

void CpuKernel::launch(const std::vector<KernelArg>& args) const {
  const Impl& k = *impl_;
  check_arguments(k.signature, args);
  std::array<uint32_t, 3> g = launch_grid(k.signature, args);
  int64_t total = int64_t(g[0]) * g[1] * g[2];
  if (total == 0) return;
  std::vector<int64_t> slots(args.size()), extents(args.size(), -1);
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
  RunState state{&k, {}};
  std::atomic<int64_t> next{0};
  int workers = int(std::min<int64_t>(k.threads, total));
  run_workers(workers, [&](int) {
    std::vector<uint8_t> shared(size_t(std::max<int64_t>(k.shared_bytes, 1)) + 128, 0);
    auto* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared.data()) + 127) / 128 * 128);
    CpuBlockContext ctx{&report, extents.data(), &state, 0, 0, 0};
    for (int64_t b = next++; b < total && !state.failure.failed.load(std::memory_order_relaxed); b = next++) {
      ctx.bx = int32_t(b % g[0]);
      ctx.by = int32_t(b / g[0] % g[1]);
      ctx.bz = int32_t(b / (int64_t(g[0]) * g[1]));
      k.fn(slots.data(), ctx.bx, ctx.by, ctx.bz, smem, &ctx);
    }
  });
  if (state.failure.failed.load()) throw CpuCheckError(fmt::format("kernel {}: {}", k.signature.name, state.failure.message));
}

#endif

}  // namespace tilus
