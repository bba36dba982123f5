#include "tilus/runtime/jit.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cstring>

#include "tilus/codegen/cuda.h"
#include "tilus/passes/pipeline.h"

namespace tilus {

KernelSource cuda_source(const Program& traced, const std::string& arch, const CudaOptions& options) {
  if (traced.kernels.size() != 1)
    throw InternalError(fmt::format("cuda_source expects one kernel, got {}", traced.kernels.size()));
  PipelineOptions opts;
  opts.target = Target::from_arch(arch);
  // A persistent grid has a block per multiprocessor of the GPU it runs on.
  if (gpu_available() && current_device().arch() == arch) opts.target.multiprocessors = current_device().multiprocessors;
  Program lowered = run_pipeline(traced, opts);
  KernelSource source = emit_cuda(lowered.kernels[0], opts.target, options);
  for (const std::string& dir : ir_dump_dirs(traced, opts))  // next to the pass dumps
    std::ofstream(std::filesystem::path(dir) / "kernel.cu") << source.source;
  return source;
}

CompiledKernel compile_program(const Program& traced, const std::string& arch, DiskCache* cache,
                               const CudaOptions& options) {
  return compile_kernel(cuda_source(traced, arch, options), cache);
}

std::map<int, int64_t> specialization_of(const std::vector<KernelArg>& args) {
  std::map<int, int64_t> facts;
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelArg& a = args[i];
    if (a.kind == KernelArg::Kind::Int && is_specialized(uint64_t(a.i))) facts[int(i)] = kSpecializationDivisor;
    if (a.kind == KernelArg::Kind::Pointer && is_specialized(a.ptr)) facts[int(i)] = kSpecializationDivisor;
  }
  return facts;
}

void specialize(Program& traced, const std::map<int, int64_t>& facts) {
  Kernel& k = traced.kernels.at(0);
  for (auto& [index, d] : facts)
    if (index < int(k.params.size())) k.param_divisibility[index] = d;
}

Backend backend_for(const std::string& kernel, const std::vector<KernelArg>& args) {
  bool host = false, device = false;
  for (auto& a : args) {
    host |= a.memory == KernelArg::Memory::Host;
    device |= a.memory == KernelArg::Memory::Device;
  }
  if (host && device)
    throw ArgumentError(
        fmt::format("kernel {}: the arguments mix host and CUDA arrays; pass all of them on one device", kernel));
  const char* env = std::getenv("TILUS_TARGET");
  std::string t = env ? env : "";
  Backend b = t == "cpu" || t == "gpu" || t == "cuda" ? default_backend()
              : host                                  ? Backend::Cpu
              : device                                ? Backend::Gpu
                                                      : default_backend();
  // Memory the chosen backend cannot address would crash the launch: refuse it.
  if (device && (b == Backend::Cpu || !gpu_available()))
    throw ArgumentError(fmt::format("kernel {}: an argument is CUDA device memory (a CUDA array or a raw address), "
                                    "but {}; pass host arrays",
                                    kernel,
                                    b == Backend::Cpu && t == "cpu"
                                        ? "TILUS_TARGET=cpu runs the launch on the CPU backend"
                                        : "no GPU can run it (" + gpu_unavailable_reason() + ")"));
  if (b == Backend::Gpu && host)
    throw ArgumentError(fmt::format("kernel {}: an argument is host memory (a numpy array or another CPU array), but "
                                    "TILUS_TARGET={} runs the launch on the GPU; pass CUDA arrays",
                                    kernel, t));
  return b;
}

std::string specialization_key(const std::map<int, int64_t>& facts) {
  std::string key;
  for (auto& [i, d] : facts) key += fmt::format("{}:{};", i, d);
  return key;
}

const char* to_string(Backend b) { return b == Backend::Cpu ? "cpu" : "gpu"; }

Backend default_backend() {
  const char* env = std::getenv("TILUS_TARGET");
  std::string t = env ? env : "";
  if (t == "cpu") return Backend::Cpu;
  if (t == "gpu" || t == "cuda") return Backend::Gpu;
  if (!t.empty()) spdlog::warn("tilus: TILUS_TARGET={} is not 'cpu' or 'gpu'; ignored", t);
  return gpu_available() ? Backend::Gpu : Backend::Cpu;
}

DeviceBuffer::DeviceBuffer(DataType dtype, int64_t n, Backend backend) : dtype_(dtype), n_(n), backend_(backend) {
  size_t bytes = size_t(std::max<int64_t>(1, dtype.storage_bytes(n)));
  if (backend == Backend::Cpu) {
    // Host memory, 128-byte aligned like cudaMalloc's (256), zeroed.
    void* p = std::aligned_alloc(128, (bytes + 127) / 128 * 128);
    if (!p) throw Error(fmt::format("cannot allocate {} bytes of host memory", bytes));
    std::memset(p, 0, bytes);
    ptr_ = reinterpret_cast<DevicePtr>(p);
  } else {
    ptr_ = device_alloc(int64_t(bytes));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (!ptr_) return;
  if (backend_ == Backend::Cpu) {
    std::free(reinterpret_cast<void*>(ptr_));
    return;
  }
  // A destructor must not throw: after a kernel fault every driver call fails, and a buffer
  // freed while that error unwinds the stack would end the process (std::terminate) before
  // the error that says what happened reaches anyone. The first call that saw it reports it.
  try {
    device_free(ptr_);
  } catch (const std::exception&) {
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : dtype_(o.dtype_), n_(o.n_), ptr_(o.ptr_), backend_(o.backend_) {
  o.ptr_ = 0;
}

void DeviceBuffer::upload_bytes(const void* data, size_t bytes) {
  if (backend_ == Backend::Cpu) std::memcpy(reinterpret_cast<void*>(ptr_), data, bytes);
  else copy_to_device(ptr_, data, bytes);
}
void DeviceBuffer::fill_bytes(uint8_t value) {
  if (backend_ == Backend::Cpu) std::memset(reinterpret_cast<void*>(ptr_), value, size_t(bytes()));
  else device_memset(ptr_, value, size_t(bytes()));
}
void DeviceBuffer::download_bytes(void* data, size_t bytes) const {
  if (backend_ == Backend::Cpu) std::memcpy(data, reinterpret_cast<const void*>(ptr_), bytes);
  else copy_to_host(data, ptr_, bytes);
}

namespace {
uint64_t encode(DataType t, double v) {
  if (t.is_float()) return t.encode_float(v);
  if (t.is_bool()) return v != 0.0;
  if (t.is_uint()) return uint64_t(v);
  return uint64_t(int64_t(v));
}
double decode(DataType t, uint64_t bits) {
  if (t.is_float()) return t.decode_float(bits);
  if (t.is_bool()) return bits & 1;
  if (t.is_uint()) return double(bits);
  int b = t.bits();
  if (b < 64 && (bits >> (b - 1)) & 1) bits |= ~((uint64_t(1) << b) - 1);  // sign-extend
  return double(int64_t(bits));
}
}  // namespace

void DeviceBuffer::upload(const std::vector<double>& values) {
  if (int64_t(values.size()) != n_)
    throw InternalError(fmt::format("DeviceBuffer::upload: {} values for {} elements", values.size(), n_));
  std::vector<uint64_t> codes;
  codes.reserve(values.size());
  for (double v : values) codes.push_back(encode(dtype_, v));
  std::vector<uint8_t> bytes = pack_bits(codes, dtype_.bits());
  upload_bytes(bytes.data(), bytes.size());
}

std::vector<double> DeviceBuffer::download() const {
  std::vector<uint8_t> bytes(dtype_.storage_bytes(n_));
  download_bytes(bytes.data(), bytes.size());
  std::vector<double> out;
  out.reserve(n_);
  for (uint64_t c : unpack_bits(bytes, dtype_.bits(), n_)) out.push_back(decode(dtype_, c));
  return out;
}

}  // namespace tilus
