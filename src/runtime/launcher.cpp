#include "tilus/runtime/launcher.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>

#include "tilus/codegen/nvrtc.h"
#include "tilus/ir/tensor.h"
#include "tilus/ir/log.h"

namespace tilus {

namespace {

const char* kind_name(KernelArg::Kind k) {
  switch (k) {
    case KernelArg::Kind::Int: return "an integer";
    case KernelArg::Kind::Float: return "a float";
    case KernelArg::Kind::Pointer: return "a pointer";
    case KernelArg::Kind::Blob: return "by-value bytes";
  }
  return "?";
}

// A JSON string literal.
std::string json(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", int(c));
    else out += c;
  }
  return out + "\"";
}

// A pointer parameter's argument contract: whether (and where) the kernel writes it, and each
// global view's extent and strides over the scalar parameters.
std::string contract_json(const PointerContract& c) {
  std::string views;
  for (const ViewContract& v : c.views) {
    std::string strides;
    for (const Expr& e : v.strides) strides += fmt::format("{}{}", strides.empty() ? "" : ", ", json(to_string(e)));
    views += fmt::format("{}{{\"at\": {}, \"type\": {}, \"extent\": {}, \"strides\": [{}], \"row_major\": {}}}",
                         views.empty() ? "" : ", ", json(v.loc.str()), json(v.type),
                         v.extent.defined() ? json(to_string(v.extent)) : "null", strides, v.row_major);
  }
  return fmt::format("\"writes\": {}, \"views\": [{}]",
                     c.writes() ? json(c.write_inst + " at " + c.write_loc.str()) : "null", views);
}

std::string meta_json(const KernelSource& s, const NvrtcOutput& out) {
  std::string params, grid, options;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const KernelParam& p = s.params[i];
    params += p.is_blob() ? fmt::format("{}{{\"name\": \"{}\", \"bytes\": {}, \"alignment\": {}}}", i ? ", " : "",
                                        p.name, p.blob_bytes, p.blob_alignment)
              : p.dtype.is_pointer()
                  ? fmt::format("{}{{\"name\": \"{}\", \"dtype\": \"{}\", {}}}", i ? ", " : "", p.name,
                                p.dtype.name(), contract_json(p.contract))
                  : fmt::format("{}{{\"name\": \"{}\", \"dtype\": \"{}\"}}", i ? ", " : "", p.name,
                                p.dtype.name());
  }
  for (size_t i = 0; i < s.grid.size(); ++i) grid += fmt::format("{}\"{}\"", i ? ", " : "", to_string(s.grid[i]));
  for (size_t i = 0; i < out.options.size(); ++i) options += fmt::format("{}\"{}\"", i ? ", " : "", out.options[i]);
  // Format 2 added by-value params and the cluster shape, 3 the pointers' argument contracts,
  // 4 ptxas's resources, 5 whether ptxas serialized the wgmma (why; ASCII without quotes).
  const KernelResources& r = out.resources;
  std::string serialized;
  for (char ch : r.wgmma_serialized)
    if (ch != '"' && ch != '\\' && ch >= ' ' && ch <= '~') serialized += ch;
  return fmt::format(
      "{{\n  \"format\": 5,\n  \"kernel\": \"{}\",\n  \"arch\": \"{}\",\n  \"nvrtc_version\": {},\n  \"tilus_version\": "
      "\"{}\",\n  \"options\": [{}],\n  \"params\": [{}],\n  \"grid\": [{}],\n  \"cluster\": [{}],\n  "
      "\"block_threads\": {},\n  \"shared_memory_bytes\": {},\n  \"registers\": {},\n  \"stack_frame_bytes\": {},\n  "
      "\"spill_store_bytes\": {},\n  \"spill_load_bytes\": {},\n  \"wgmma_serialized\": \"{}\"\n}}\n",
      s.name, s.arch, nvrtc_version(), TILUS_VERSION, options, params, grid, fmt::join(s.cluster, ", "),
      s.block_threads, s.shared_memory_bytes, r.registers, r.stack_frame_bytes, r.spill_store_bytes,
      r.spill_load_bytes, serialized);
}

// The resources meta_json recorded (-1 for an entry of an older format, which has none).
KernelResources resources_of(const std::string& meta) {
  auto field = [&](const char* name) -> int64_t {
    std::string key = fmt::format("\"{}\": ", name);
    size_t at = meta.find(key);
    return at == std::string::npos ? -1 : std::strtoll(meta.c_str() + at + key.size(), nullptr, 10);
  };
  KernelResources r;
  r.registers = int(field("registers"));
  r.stack_frame_bytes = field("stack_frame_bytes");
  r.spill_store_bytes = field("spill_store_bytes");
  r.spill_load_bytes = field("spill_load_bytes");
  static const std::string key = "\"wgmma_serialized\": \"";
  if (size_t at = meta.find(key); at != std::string::npos) {
    size_t end = meta.find('"', at + key.size());
    if (end != std::string::npos) r.wgmma_serialized = meta.substr(at + key.size(), end - at - key.size());
  }
  return r;
}

void log_resources(const CompiledKernel& k) {
  if (!k.resources.known()) return;
  spdlog::info("tilus: kernel {} for {}{}: {}, {} bytes shared memory", k.source.name, k.source.arch,
               k.from_cache ? " (cached)" : "", k.resources.str(), k.source.shared_memory_bytes);
  if (!k.resources.wgmma_serialized.empty())
    spdlog::warn("tilus: kernel {} for {}: ptxas serialized its wgmma (each waits for the one before) due to {}; "
                 "the tensor cores idle between them",
                 k.source.name, k.source.arch, k.resources.wgmma_serialized);
}

}  // namespace

std::string device_headers_digest(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string all;
  for (auto& [name, text] : headers) all += fmt::format("{}:{};{}:{};", name.size(), name, text.size(), text);
  return sha256_hex(all);
}

const std::string& device_headers_digest() {
  static const std::string digest = device_headers_digest(device_headers());
  return digest;
}

namespace {
bool env_off(const char* name) {
  const char* env = std::getenv(name);
  if (!env) return false;
  std::string v = env;
  return v == "0" || v == "off" || v == "false" || v == "OFF" || v == "FALSE";
}
}  // namespace

std::string nvrtc_pch_dir(const DiskCache* cache) {
  if (env_off("TILUS_NVRTC_PCH")) return "";
  return cache ? cache->pch_dir() : default_cache().pch_dir();
}

CompiledKernel compile_kernel(const KernelSource& source, DiskCache* cache) {
  apply_log_level();
  CompiledKernel k;
  k.source = source;
  NvrtcCompileOptions options;
  options.pch_dir = nvrtc_pch_dir(cache);
  options.minimal_header = !env_off("TILUS_NVRTC_MINIMAL_HEADER");
  std::string key;
  if (cache) {
    // What decides the cubin: the source, the arch, NVRTC and its options (the device header
    // variant's -D options included), the device header library and (in the key) tilus's
    // version. Not the PCH: a compile with one makes the same cubin as one without.
    std::vector<std::string> key_options = nvrtc_options(source.arch);
    if (options.minimal_header)
      for (auto& d : device_header_defines(source.source)) key_options.push_back(d);
    key_options.push_back("device-headers=" + device_headers_digest());
    key = DiskCache::key(source.source, source.arch, nvrtc_version(), key_options);
  }
  auto cached = [&] {
    auto hit = cache->load(key);
    if (!hit || hit->source != source.source) return false;
    spdlog::debug("tilus: kernel {} loaded from cache entry {}", source.name, key);
    k.cubin = std::move(hit->cubin);
    k.from_cache = true;
    k.resources = resources_of(hit->meta);
    log_resources(k);
    return true;
  };
  if (cache && cached()) return k;
  // Many processes (the ranks of a distributed job) compiling one kernel: the first takes the
  // entry's lock and compiles, the others wait and load what it stored.
  std::unique_ptr<DiskCache::Lock> held = cache ? cache->lock(key) : nullptr;
  if (held && cached()) return k;
  auto t0 = std::chrono::steady_clock::now();
  NvrtcOutput out = nvrtc_compile(source.source, source.name, source.arch, {}, options);
  k.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  k.pch = out.pch;
  if (!out.log.empty()) spdlog::debug("tilus: NVRTC log for {}:\n{}", source.name, out.log);
  spdlog::debug("tilus: compiled kernel {} for {} in {:.1f} ms (precompiled header: {})", source.name, source.arch,
                k.compile_ms, to_string(out.pch));
  k.cubin = std::move(out.cubin);
  k.resources = out.resources;
  log_resources(k);
  if (cache) cache->store(key, CacheEntry{source.source, k.cubin, meta_json(source, out)});
  return k;
}

Launcher::Launcher(CompiledKernel kernel)
    : kernel_(std::move(kernel)), layout_(argument_layout(launch_params(kernel_.source))) {
  maps_.resize(kernel_.source.tensor_maps.size());
}

namespace {

std::string ints(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

// Why an array with these shape and byte strides is not a dense row-major (C-contiguous)
// buffer of `elem` bytes per element; "" when it is one (or is empty).
std::string not_contiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t elem) {
  if (strides.size() != shape.size()) return "";
  for (int64_t n : shape)
    if (n == 0) return "";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (strides[d] < 0) return fmt::format("it has a negative stride in dim {}", d);
    if (strides[d] == 0) return fmt::format("it is broadcast (stride 0 in dim {})", d);
  }
  auto dense = [&](bool row_major) {
    int64_t expected = elem;
    for (size_t k = 0; k < shape.size(); ++k) {
      size_t d = row_major ? shape.size() - 1 - k : k;
      if (shape[d] != 1 && strides[d] != expected) return false;
      expected *= shape[d];
    }
    return true;
  };
  if (dense(true)) return "";
  return dense(false) ? "it is in Fortran (column-major) order" : "it is a strided view";
}

[[noreturn]] void argument_error(const KernelSource& s, size_t i, const std::string& why) {
  const KernelParam& p = s.params[i];
  throw ArgumentError(fmt::format("kernel {}, argument {} ('{}': {}): {}", s.name, i, p.name, p.type_name(), why));
}

// Expressions over the parameters evaluated for a launch (nullopt when one cannot be).
std::optional<std::vector<int64_t>> evaluate_all(const KernelSource& s, const std::vector<KernelArg>& args,
                                                 const std::vector<Expr>& es) {
  std::vector<int64_t> out;
  for (const Expr& e : es) {
    auto v = evaluate_int(s, args, e);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

// Argument i (a pointer) against its parameter's contract (ir/contract.h).
void check_contract(const KernelSource& s, const std::vector<KernelArg>& args, size_t i) {
  const KernelParam& p = s.params[i];
  const KernelArg& a = args[i];
  const PointerContract& c = p.contract;
  auto fail = [&](const std::string& why) { argument_error(s, i, why); };
  if (c.views.empty() && !c.writes()) return;
  if (a.foreign_byte_order)
    fail(fmt::format("its elements are not in the host's byte order (big-endian data); the kernel reads {} in the "
                     "host's: convert it first (numpy: a.astype(a.dtype.newbyteorder('=')))",
                     p.dtype.pointee().name()));
  if (a.read_only && c.writes())
    fail(fmt::format("the array is read-only, but the kernel writes it ({} at {})", c.write_inst, c.write_loc.str()));
  for (const ViewContract& v : c.views) {
    // The array's elements (its contiguity) and the view's (its declared strides); sub-byte
    // data has no byte strides.
    auto bytes_of = [](DataType t) { return t.bits() % 8 == 0 ? int64_t(t.bits() / 8) : int64_t(0); };
    DataType elem_t = a.typed && !a.pointee.is_void() ? a.pointee : v.dtype;
    int64_t elem = bytes_of(elem_t), view_elem = bytes_of(v.dtype);
    bool has_layout = elem > 0 && !a.byte_strides.empty() && a.byte_strides.size() == a.shape.size();
    std::string why = has_layout ? not_contiguous(a.shape, a.byte_strides, elem) : "";
    bool contiguous = why.empty();
    // The texts of a failure, built only when one is reported (a launch is on the hot path).
    auto view = [&] { return fmt::format("the kernel's global_view at {} ({})", v.loc.str(), v.type); };
    auto layout = [&] { return fmt::format("shape {}, strides {} bytes", ints(a.shape), ints(a.byte_strides)); };
    auto shape = evaluate_all(s, args, v.shape);
    auto shape_text = [&] { return shape ? fmt::format(" is {} for these arguments and", ints(*shape)) : ""; };
    // Row-major views read a dense buffer; views with declared strides read an array of their
    // rank with exactly those strides (a contiguous array of another rank is a dense buffer).
    if (v.row_major) {
      if (!contiguous)
        fail(fmt::format("the array is not C-contiguous: {} ({}); {} reads it as a dense row-major array: pass a "
                         "contiguous copy (numpy.ascontiguousarray, torch's .contiguous())",
                         why, layout(), view()));
    } else if (auto declared = evaluate_all(s, args, v.strides); declared && has_layout && view_elem > 0) {
      if (a.shape.size() == declared->size()) {
        for (size_t d = 0; d < declared->size(); ++d)
          if (a.shape[d] > 1 && a.byte_strides[d] != (*declared)[d] * view_elem)
            fail(fmt::format("the array has {}, but {} declares strides {} = {} elements for these arguments "
                             "(dim {} differs)",
                             layout(), view(), shape_str(v.strides), ints(*declared), d));
      } else if (!contiguous) {
        fail(fmt::format("the array is not C-contiguous ({}; {}) and has {} dims, but {} declares {}-dim strides "
                         "{}: pass an array of the view's rank with those strides, or a contiguous one",
                         why, layout(), a.shape.size(), view(), declared->size(), shape_str(v.strides)));
      }
    } else if (!contiguous) {
      continue;  // strides that cannot be evaluated from the arguments: nothing more is known
    }
    // Size: a strided array (its strides matched above) must hold the view dim by dim; any
    // other array, a dense buffer, must hold every element the view may reach.
    if (!contiguous) {
      for (size_t d = 0; shape && d < shape->size(); ++d)
        if ((*shape)[d] > a.shape[d])
          fail(fmt::format("the array has {}, but {}{} dim {} is {} > {}", layout(), view(), shape_text(), d, (*shape)[d],
                           a.shape[d]));
      continue;
    }
    if (!v.extent.defined() || a.bytes < 0) continue;
    auto reach = evaluate_int(s, args, v.extent);
    if (!reach) continue;
    int64_t need = *reach > 0 ? v.dtype.storage_bytes(*reach) : 0;
    if (need > a.bytes)
      fail(fmt::format("the array has {} bytes{}, but {}{} reaches {} elements ({} bytes) from the pointer", a.bytes,
                       elem > 0 ? fmt::format(" ({} {} element{})", a.bytes / elem, elem_t.name(),
                                              a.bytes / elem == 1 ? "" : "s")
                                : "",
                       view(), shape_text(), *reach, need));
  }
}

}  // namespace

void check_arguments(const KernelSource& s, const std::vector<KernelArg>& args) {
  if (args.size() != s.params.size()) {
    std::string names;
    for (size_t i = 0; i < s.params.size(); ++i)
      names += fmt::format("{}{}: {}", i ? ", " : "", s.params[i].name, s.params[i].type_name());
    throw ArgumentError(fmt::format("kernel {} takes {} arguments ({}), got {}", s.name, s.params.size(), names,
                                    args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelParam& p = s.params[i];
    const KernelArg& a = args[i];
    auto fail = [&](const std::string& why) { argument_error(s, i, why); };
    if (p.is_blob()) {
      if (a.kind != KernelArg::Kind::Blob)
        fail(fmt::format("expected {} bytes by value, got {}", p.blob_bytes, kind_name(a.kind)));
      if (int64_t(a.blob.size()) != p.blob_bytes)
        fail(fmt::format("expected {} bytes by value, got {}", p.blob_bytes, a.blob.size()));
    } else if (p.dtype.is_pointer()) {
      if (a.kind != KernelArg::Kind::Pointer) fail(fmt::format("expected a pointer, got {}", kind_name(a.kind)));
      if (a.ptr == 0) fail("null pointer");
      DataType want = p.dtype.pointee();
      if (a.typed && !want.is_void() && a.pointee != want)
        fail(fmt::format("points to {} data, the kernel reads {}", a.pointee.name(), want.name()));
    } else if (p.dtype.is_float()) {
      if (a.kind != KernelArg::Kind::Int && a.kind != KernelArg::Kind::Float)
        fail(fmt::format("expected a float, got {}", kind_name(a.kind)));
    } else {
      if (a.kind != KernelArg::Kind::Int) fail(fmt::format("expected an integer, got {}", kind_name(a.kind)));
      if (p.dtype.is_integer()) {
        bool in_range = p.dtype.is_uint() ? a.i >= 0 && uint64_t(a.i) <= p.dtype.int_max()
                                          : a.i >= p.dtype.int_min() && (a.i < 0 || uint64_t(a.i) <= p.dtype.int_max());
        if (!in_range) fail(fmt::format("{} is out of the range of {}", a.i, p.dtype.name()));
      }
    }
  }
  // The arrays, once every scalar their contracts are evaluated from is known to be valid.
  for (size_t i = 0; i < args.size(); ++i) {
    if (s.params[i].dtype.is_pointer()) check_contract(s, args, i);
  }
  // The kernel was compiled trusting its assumptions: a launch that breaks one is refused.
  for (const Assumption& a : s.assumptions) {
    auto holds = evaluate_int(s, args, a.cond);
    if (holds && *holds == 0) {
      std::string values;
      for (const Var& v : free_vars(a.cond))
        for (size_t i = 0; i < s.param_vars.size(); ++i)
          if (s.param_vars[i].same_as(v) && args[i].kind == KernelArg::Kind::Int)
            values += fmt::format("{}{} = {}", values.empty() ? "" : ", ", v.name(), args[i].i);
      throw ArgumentError(fmt::format("kernel {}: assume({}) at {} does not hold for these arguments ({}); the kernel "
                                      "was compiled trusting it",
                                      s.name, to_string(a.cond), a.loc.str(), values));
    }
  }
}

std::array<uint32_t, 3> Launcher::grid(const std::vector<KernelArg>& args) const {
  return launch_grid(kernel_.source, args);
}

std::optional<int64_t> evaluate_int(const KernelSource& s, const std::vector<KernelArg>& args, const Expr& e) {
  auto env = [&](const Var& v) -> std::optional<EvalValue> {
    for (size_t i = 0; i < s.param_vars.size() && i < args.size(); ++i)
      if (s.param_vars[i].same_as(v)) {
        EvalValue e;
        e.dtype = v.dtype();
        if (args[i].kind == KernelArg::Kind::Float) e.f = args[i].f;
        else e.i = args[i].kind == KernelArg::Kind::Pointer ? int64_t(args[i].ptr) : args[i].i;
        return e;
      }
    return std::nullopt;
  };
  auto v = evaluate(e, env);
  if (!v) return std::nullopt;
  return v->dtype.is_float() ? int64_t(v->f) : v->i;
}

std::array<uint32_t, 3> launch_grid(const KernelSource& s, const std::vector<KernelArg>& args) {
  std::array<uint32_t, 3> g = {1, 1, 1};
  const int64_t limits[3] = {(int64_t(1) << 31) - 1, 65535, 65535};
  for (size_t d = 0; d < s.grid.size() && d < 3; ++d) {
    auto v = evaluate_int(s, args, s.grid[d]);
    if (!v) throw ArgumentError(fmt::format("kernel {}: grid dimension {} ({}) cannot be evaluated from the arguments",
                                            s.name, d, to_string(s.grid[d])));
    int64_t n = *v;
    if (n < 0 || n > limits[d])
      throw ArgumentError(fmt::format("kernel {}: grid dimension {} ({}) is {}, outside [0, {}]", s.name, d,
                                      to_string(s.grid[d]), n, limits[d]));
    g[d] = uint32_t(n);
  }
  // The driver would reject the launch too, but without saying which kernel or dimension.
  for (size_t d = 0; d < 3; ++d)
    if (s.cluster[d] < 1 || g[d] % s.cluster[d] != 0)
      throw ArgumentError(fmt::format(
          "kernel {}: grid dimension {} ({}) is {}, not a multiple of the cluster's {} (cluster_blocks {})", s.name, d,
          d < s.grid.size() ? to_string(s.grid[d]) : "1", g[d], s.cluster[d], fmt::join(s.cluster, "x")));
  return g;
}

ArgumentLayout argument_layout(const std::vector<KernelParam>& params) {
  ArgumentLayout l;
  size_t offset = 0;
  for (const KernelParam& p : params) {
    size_t bytes = 8, alignment = 8;
    if (p.is_blob()) {
      bytes = size_t(p.blob_bytes);
      alignment = size_t(std::max<int64_t>(1, p.blob_alignment));
      if (alignment & (alignment - 1))
        throw InternalError(fmt::format("kernel parameter {}: alignment {} is not a power of two", p.name, alignment));
      l.slots_only = false;
    }
    offset = (offset + alignment - 1) / alignment * alignment;
    l.offsets.push_back(uint32_t(offset));
    offset += bytes;
    l.alignment = std::max(l.alignment, alignment);
  }
  l.bytes = offset;
  return l;
}

ArgumentBuffer::ArgumentBuffer(const ArgumentLayout& layout) {
  if (layout.bytes <= kInlineBytes && layout.alignment <= kInlineAlignment) return;
  heap_.reset(new uint8_t[layout.bytes + layout.alignment]);
  auto address = reinterpret_cast<uintptr_t>(heap_.get());
  data_ = heap_.get() + ((address + layout.alignment - 1) / layout.alignment * layout.alignment - address);
}

void pack_arguments(const KernelSource& s, const std::vector<KernelArg>& args, const ArgumentLayout& layout,
                    uint8_t* buffer) {
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelParam& p = s.params[i];
    const KernelArg& a = args[i];
    if (p.is_blob()) {
      std::memcpy(buffer + layout.offsets[i], a.blob.data(), size_t(p.blob_bytes));
      continue;
    }
    DataType t = p.dtype;
    uint64_t bits = 0;
    if (t.is_pointer()) bits = a.ptr;
    else if (t.is_float()) bits = t.encode_float(a.kind == KernelArg::Kind::Float ? a.f : double(a.i));
    else if (t.is_bool()) bits = a.i != 0;
    else bits = uint64_t(a.i);
    std::memcpy(buffer + layout.offsets[i], &bits, 8);  // little-endian: the low bytes are a narrower type's value
  }
}

void kernel_param_pointers(const ArgumentLayout& layout, uint8_t* buffer, void** out) {
  for (size_t i = 0; i < layout.offsets.size(); ++i) out[i] = buffer + layout.offsets[i];
}

void Launcher::launch_raw(const std::array<uint32_t, 3>& g, uint8_t* arguments, Stream stream) const {
  if (g[0] == 0 || g[1] == 0 || g[2] == 0) return;  // nothing to run (e.g. n = 0)
  const KernelSource& s = kernel_.source;
  std::call_once(loaded_, [&] {
    module_ = std::make_unique<LoadedModule>(kernel_.cubin, s.name, s.shared_memory_bytes, s.cluster, s.cooperative);
    if (s.cooperative) resident_blocks_ = module_->resident_blocks(uint32_t(s.block_threads));
  });
  // A grid barrier waits for every block: they must all be resident at once.
  if (s.cooperative && int64_t(g[0]) * g[1] * g[2] > resident_blocks_)
    throw ArgumentError(fmt::format("kernel {} synchronizes its whole grid (sync_grid), so all its blocks must be "
                                    "resident on the GPU at once, but the grid {}x{}x{} has {} blocks and {} holds {} "
                                    "of them ({} threads and {} bytes of shared memory each): launch fewer blocks",
                                    s.name, g[0], g[1], g[2], int64_t(g[0]) * g[1] * g[2], current_device().name,
                                    resident_blocks_, s.block_threads, s.shared_memory_bytes));
  void* pointers[64];
  std::vector<void*> many;
  void** p = pointers;
  if (layout_.offsets.size() > 64) {
    many.resize(layout_.offsets.size());
    p = many.data();
  }
  if (!s.global_tensors.empty() || !s.tensor_maps.empty()) {
    std::vector<KernelArg> args = arguments_of(arguments);
    if (!s.global_tensors.empty()) fill_global_tensors(args, arguments, stream);
    if (!s.tensor_maps.empty()) fill_tensor_maps(args, arguments);
  }
  kernel_param_pointers(layout_, arguments, p);
  module_->launch(g.data(), uint32_t(s.block_threads), p, stream);
}

std::vector<KernelParam> launch_params(const KernelSource& s) {
  std::vector<KernelParam> all = s.params;
  for (const GlobalScratch& g : s.global_tensors) all.push_back(KernelParam{g.ptr.name(), g.ptr.dtype(), 0, 0, {}});
  for (size_t i = 0; i < s.tensor_maps.size(); ++i)
    all.push_back(KernelParam::blob(fmt::format("tensor_map_{}", i), 128, 64));
  return all;
}

namespace {

// Memory for kernels' global tensors: one buffer per (stream, requires_clean), grown when a
// launch needs more and kept for the process. A clean buffer is zeroed when it is allocated;
// every kernel leaves its part of it zero.
DevicePtr scratch_memory(Stream stream, bool clean, size_t bytes) {
  struct Buffer {
    DevicePtr ptr = 0;
    size_t bytes = 0;
  };
  static std::mutex mutex;
  static auto* buffers = new std::map<std::pair<Stream, bool>, Buffer>;  // freed with the context
  std::lock_guard<std::mutex> lock(mutex);
  Buffer& b = (*buffers)[{stream, clean}];
  if (b.bytes >= bytes) return b.ptr;
  // Launches in flight may still use the old buffer: wait for them before replacing it.
  synchronize();
  if (b.ptr) device_free(b.ptr);
  b.ptr = 0;
  size_t n = std::max(bytes, 2 * b.bytes);
  n = (n + 65535) / 65536 * 65536;
  b.ptr = device_alloc(n);
  b.bytes = n;
  if (clean) {
    device_memset(b.ptr, 0, n);
    synchronize();
  }
  return b.ptr;
}

}  // namespace

int64_t global_tensor_bytes(const KernelSource& s, const std::vector<KernelArg>& args, const GlobalScratch& g) {
  auto bytes = evaluate_int(s, args, g.bytes());
  if (!bytes || *bytes < 0)
    throw ArgumentError(fmt::format("kernel {}: global_tensor at {} ({}{}): {} for these arguments", s.name, g.loc.str(),
                                    g.dtype().name(), shape_str(g.shape),
                                    bytes ? fmt::format("its size is {} bytes", *bytes)
                                          : std::string("its size cannot be evaluated")));
  return *bytes;
}

void Launcher::fill_global_tensors(const std::vector<KernelArg>& args, uint8_t* arguments, Stream stream) const {
  const KernelSource& s = kernel_.source;
  // Each tensor at a 128-byte multiple of its kind's buffer, in call order.
  std::vector<int64_t> offsets;
  int64_t total[2] = {0, 0};
  for (const GlobalScratch& g : s.global_tensors) {
    int64_t bytes = global_tensor_bytes(s, args, g);
    int64_t& t = total[g.requires_clean ? 1 : 0];
    offsets.push_back(t);
    t += (std::max<int64_t>(bytes, 1) + 127) / 128 * 128;
  }
  DevicePtr base[2] = {0, 0};
  for (int clean = 0; clean < 2; ++clean)
    if (total[clean] > 0) base[clean] = scratch_memory(stream, clean == 1, size_t(total[clean]));
  for (size_t i = 0; i < s.global_tensors.size(); ++i) {
    DevicePtr address = base[s.global_tensors[i].requires_clean ? 1 : 0] + uint64_t(offsets[i]);
    std::memcpy(arguments + layout_.offsets[s.params.size() + i], &address, 8);
  }
}

std::vector<KernelArg> Launcher::arguments_of(const uint8_t* arguments) const {
  const KernelSource& s = kernel_.source;
  std::vector<KernelArg> args;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const KernelParam& p = s.params[i];
    if (p.is_blob()) {
      args.emplace_back().kind = KernelArg::Kind::Blob;
      continue;
    }
    uint64_t bits;
    std::memcpy(&bits, arguments + layout_.offsets[i], 8);
    if (p.dtype.is_pointer()) args.push_back(KernelArg::pointer(bits));
    else if (p.dtype.is_float()) args.emplace_back(p.dtype.decode_float(bits));
    else if (p.dtype.is_bool()) args.emplace_back(int64_t(bits & 1));
    else {
      int bitsz = p.dtype.bits();
      int64_t v = bitsz >= 64 ? int64_t(bits)
                  : p.dtype.is_uint() ? int64_t(bits & ((uint64_t(1) << bitsz) - 1))
                                      : int64_t(bits << (64 - bitsz)) >> (64 - bitsz);
      args.emplace_back(v);
    }
  }
  return args;
}

void Launcher::fill_tensor_maps(const std::vector<KernelArg>& args, uint8_t* arguments) const {
  const KernelSource& s = kernel_.source;
  std::lock_guard<std::mutex> lock(maps_mutex_);
  for (size_t m = 0; m < s.tensor_maps.size(); ++m) {
    const TensorMapSpec& spec = s.tensor_maps[m];
    auto fail = [&](const std::string& why) {
      throw ArgumentError(fmt::format("kernel {}: {} at {}: parameter '{}' cannot be copied by TMA: {}", s.name,
                                      spec.inst, spec.loc.str(), s.params[size_t(spec.param)].name, why));
    };
    auto value = [&](const Expr& e, const char* what) {
      auto v = evaluate_int(s, args, e);
      if (!v) fail(fmt::format("its {} ({}) cannot be evaluated from the arguments", what, to_string(e)));
      return *v;
    };
    int rank = int(spec.shape.size());
    int64_t eb = spec.dtype.storage_bytes(1);
    DevicePtr address = args[size_t(spec.param)].ptr + uint64_t(value(spec.offset, "offset"));
    std::vector<uint64_t> dims, strides;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t n = value(spec.shape[size_t(d)], "shape");
      if (n < 1 || n > (int64_t(1) << 32)) fail(fmt::format("dim {} has {} elements, TMA takes 1 to 2^32", d, n));
      dims.push_back(uint64_t(n));
      if (d == rank - 1) continue;
      int64_t stride = value(spec.strides[size_t(d)], "stride") * eb;
      if (stride <= 0 || stride % 16 || stride >= (int64_t(1) << 40))
        fail(fmt::format("the stride of dim {} is {} bytes; TMA needs a positive multiple of 16 below 2^40 (a row of a "
                         "row-major tensor holding a multiple of {} elements)",
                         d, stride, 16 / std::max<int64_t>(1, std::gcd(eb, int64_t(16)))));
      strides.push_back(uint64_t(stride));
    }
    if (address % 16) fail(fmt::format("its address {:#x} is not 16-byte aligned", address));
    EncodedMap& cached = maps_[m];
    if (!cached.valid || cached.address != address || cached.dims != dims || cached.strides != strides) {
      std::vector<uint32_t> box;
      if (!spec.im2col)  // an im2col map's box is {pixels, channels}
        for (int d = rank - 1; d >= 0; --d) box.push_back(uint32_t(spec.box[size_t(d)]));
      try {
        Im2colBox im2col{spec.box[0], spec.im2col ? spec.box[1] : 0, spec.lower, spec.upper, spec.traversal_stride};
        encode_tensor_map(cached.bytes.data(), int(eb), dims, strides, box, spec.swizzle_bytes, address,
                          spec.im2col ? &im2col : nullptr);
      } catch (const RuntimeError& e) {
        fail(e.what());
      }
      cached.valid = true;
      cached.address = address;
      cached.dims = std::move(dims);
      cached.strides = std::move(strides);
    }
    std::memcpy(arguments + layout_.offsets[s.params.size() + s.global_tensors.size() + m], cached.bytes.data(), 128);
  }
}

void Launcher::launch(const std::vector<KernelArg>& args, Stream stream) const {
  // Raw device addresses (no extent given): the extent is the rest of their driver allocation,
  // so the size checks cover them too.
  // A raw address said to be device memory (the Python front end's ints) must lie in one.
  auto raw = [](const KernelArg& a) { return a.kind == KernelArg::Kind::Pointer && a.bytes < 0 && a.ptr; };
  if (std::any_of(args.begin(), args.end(), raw)) {
    std::vector<KernelArg> sized = args;
    for (size_t i = 0; i < sized.size(); ++i) {
      KernelArg& a = sized[i];
      if (!raw(a)) continue;
      if (auto n = device_bytes_from(a.ptr)) a.bytes = *n;
      else if (a.memory == KernelArg::Memory::Device && i < kernel_.source.params.size())
        throw ArgumentError(fmt::format("kernel {}, argument {} ('{}'): the address {:#x} is not in a CUDA device "
                                        "allocation of the current context (cuMemGetAddressRange)",
                                        kernel_.source.name, i, kernel_.source.params[i].name, a.ptr));
    }
    check_arguments(kernel_.source, sized);
  } else {
    check_arguments(kernel_.source, args);
  }
  std::array<uint32_t, 3> g = grid(args);
  ArgumentBuffer buffer(layout_);
  pack_arguments(kernel_.source, args, layout_, buffer.data());
  launch_raw(g, buffer.data(), stream);
}

}  // namespace tilus
