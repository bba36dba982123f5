// tilus._C: the pybind11 module under the Python package. It binds the tracer core (the
// Builder every C++ Script method drives), data types, scalar expressions, tensors, the pass
// pipeline and both backends' compile-and-launch objects. The Python package
// (python/tilus/) builds the user-facing Script on top of it.
#include "kernels.h"

#include <pybind11/functional.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <execinfo.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <cstring>

#include "tilus/codegen/cuda.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/printer.h"
#include "tilus/lang/builder.h"
#include "tilus/passes/infer_layouts.h"
#include "tilus/passes/pipeline.h"
#include "tilus/runtime/aot.h"
#include "tilus/runtime/autotune.h"
#include "tilus/runtime/jit.h"

namespace py = pybind11;
using namespace tilus;

// Tuning values cross as their text (Python str); C++ ints are accepted too.
template <>
struct pybind11::detail::type_caster<TuneValue> {
  PYBIND11_TYPE_CASTER(TuneValue, const_name("str"));
  bool load(handle src, bool) {
    if (PyUnicode_Check(src.ptr())) {
      value = TuneValue::from_text(src.cast<std::string>());
      return true;
    }
    if (PyLong_Check(src.ptr()) && !PyBool_Check(src.ptr())) {
      value = TuneValue(src.cast<int64_t>());
      return true;
    }
    return false;
  }
  static handle cast(const TuneValue& v, return_value_policy, handle) { return py::str(v.text()).release(); }
};

using namespace tilus::py_detail;


namespace {
// TILUS_DEBUG_SIGNALS=1: a native backtrace on SIGSEGV / SIGABRT (for crashes inside
// extensions, where Python's faulthandler shows only Python frames).
void print_backtrace(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  const char msg[] = "tilus: fatal signal, native backtrace:\n";
  (void)!write(2, msg, sizeof msg - 1);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

PYBIND11_MODULE(_C, m) {
  if (const char* e = std::getenv("TILUS_DEBUG_SIGNALS"); e && *e && *e != '0') {
    signal(SIGSEGV, print_backtrace);
    signal(SIGABRT, print_backtrace);
  }
  m.doc() = "tilus core (C++): tracer, IR, passes, CUDA and CPU backends";
  m.attr("__version__") = TILUS_VERSION;

  // --- errors ---------------------------------------------------------------------------------
  static py::exception<Error> error(m, "Error");
  static py::exception<CompileError> compile_error(m, "CompileError", error.ptr());
  static py::exception<ArgumentError> argument_error(m, "ArgumentError", error.ptr());
  static py::exception<CpuCheckError> cpu_check_error(m, "CpuCheckError", error.ptr());
  static py::exception<InternalError> internal_error(m, "InternalError", error.ptr());
  error.attr("__doc__") = "Base class of every error tilus raises.";
  compile_error.attr("__doc__") =
      "A mistake in a kernel: tracing, shapes, dtypes, options, passes or code generation.\n\n"
      "The message starts with the user's file:line of the instruction and names the shapes and dtypes involved.";
  argument_error.attr("__doc__") =
      "A launch argument that does not fit the kernel: count, dtype, device, range, or the argument contract "
      "(layout, size, writability, byte order). The message names the kernel and the parameter.";
  cpu_check_error.attr("__doc__") =
      "An out-of-bounds access found by the CPU backend's checked mode (TILUS_CPU_CHECK=1).";
  internal_error.attr("__doc__") = "A broken invariant inside tilus itself: a bug, never the user's fault.";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CompileError& e) {
      PyErr_SetString(compile_error.ptr(), e.what());
    } catch (const ArgumentError& e) {
      PyErr_SetString(argument_error.ptr(), e.what());
    } catch (const CpuCheckError& e) {
      PyErr_SetString(cpu_check_error.ptr(), e.what());
    } catch (const InternalError& e) {
      PyErr_SetString(internal_error.ptr(), e.what());
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  bind_ir(m);

  bind_builder(m);

  // --- compiling and launching ------------------------------------------------------------------
  py::class_<GpuKernel> gpu_kernel(m, "GpuKernel",
                        "A compiled GPU kernel (Script.compiled returns one): its CUDA source, cubin, target arch "
                        "and ptxas's resource report.");
  gpu_kernel
      .def("launch", &GpuKernel::launch, py::arg("args"), py::arg("stream") = 0,
           "Launches the kernel with runtime arguments (KernelArgs and numbers) on a CUDA stream handle (0: the "
           "default stream); the arguments are checked first.")
      .def("launch_fast", &GpuKernel::launch_fast, "The torch fast path's launch (internal).")
      .def_property_readonly("source", [](const GpuKernel& k) { return k.launcher->kernel().source.source; },
                             "The CUDA C++ source.")
      .def_property_readonly("from_cache", [](const GpuKernel& k) { return k.launcher->kernel().from_cache; },
                             "Whether the cubin came from the disk cache (no NVRTC run).")
      .def_property_readonly("cubin", [](const GpuKernel& k) {
        const auto& c = k.launcher->kernel().cubin;
        return py::bytes(c.data(), c.size());
      }, "The compiled cubin, as bytes.")
      .def_property_readonly("arch", [](const GpuKernel& k) { return k.launcher->kernel().source.arch; },
                             "The GPU target, e.g. \"sm_90a\".")
      .def_property_readonly("wgmma_serialized",
                             [](const GpuKernel& k) { return k.launcher->kernel().resources.wgmma_serialized; },
                             "ptxas's reason when it serialized the kernel's wgmma (each waits for the one "
                             "before), else \"\" (also \"\" when not reported).")
      .def("grid", [](const GpuKernel& k, const py::sequence& values) {
        return k.launcher->grid(to_args(k.launcher->kernel().source.params, values, {}));
      }, "The grid (blocks in x, y, z) a launch with these runtime arguments would use.");

  // ptxas's report (-1: not reported): registers per thread, bytes per thread of the rest.
  using Report = int64_t (*)(const KernelResources&);
  static const std::tuple<const char*, Report, const char*> reports[] = {
      {"registers", [](const KernelResources& r) { return int64_t(r.registers); }, "Registers per thread"},
      {"stack_frame_bytes", [](const KernelResources& r) { return r.stack_frame_bytes; }, "Stack frame bytes per thread"},
      {"spill_store_bytes", [](const KernelResources& r) { return r.spill_store_bytes; }, "Register spill store bytes per thread"},
      {"spill_load_bytes", [](const KernelResources& r) { return r.spill_load_bytes; }, "Register spill load bytes per thread"}};
  for (auto& [name, report, what] : reports)
    gpu_kernel.def_property_readonly(name, [report](const GpuKernel& k) { return report(k.launcher->kernel().resources); },
                                     (std::string(what) + ", from ptxas's report (-1: not reported).").c_str());

  bind_script_call(m);
  bind_fast_path(m);
  py::class_<AotBundle>(m, "AotBundle", "An ahead-of-time bundle being built (tilus.aot.Bundle wraps it).")
      .def(py::init<std::string>(), py::arg("name"))
      .def("add", [](AotBundle& b, const std::string& name, const Program& p, const std::vector<std::string>& archs,
                     std::vector<AotFacts> specializations,
                     const std::vector<std::tuple<int, std::optional<int64_t>, std::optional<int64_t>>>& when) {
        std::vector<AotRange> ranges;
        for (auto& [param, lo, hi] : when) {
          AotRange r;
          r.param = param;
          if (lo) r.lo = *lo;
          if (hi) r.hi = *hi;
          ranges.push_back(r);
        }
        py::gil_scoped_release release;  // NVRTC runs for each arch and specialization
        b.add(name, p, archs, std::move(specializations), &default_cache(), std::move(ranges));
      }, py::arg("name"), py::arg("program"), py::arg("archs"), py::arg("specializations"),
         py::arg("when") = std::vector<std::tuple<int, std::optional<int64_t>, std::optional<int64_t>>>{},
         "Compiles a traced program for each arch and specialization ({parameter index: 16}); [] gives all "
         "specialized, then none. `when`: (parameter index, lo or None, hi or None) ranges of a size bucket.")
      .def("header", &AotBundle::header, "The bundle's C header.")
      .def("source", &AotBundle::source, "The bundle's C source (cubins and launch functions).")
      .def("write", &AotBundle::write, py::arg("directory"),
           "Writes the header, the source, the runtime's two headers and a CMakeLists.txt; returns their paths.")
      .def_property_readonly("name", &AotBundle::name);
  m.def("compile_gpu", [](const Program& p, const std::string& arch, bool cache) {
    std::string a = arch.empty() ? current_device().arch() : arch;
    CompiledKernel k;
    {
      // NVRTC is thread-safe: other Python threads (compiling too, perhaps) run meanwhile.
      py::gil_scoped_release release;
      k = compile_program(p, a, cache ? &default_cache() : nullptr);
    }
    GpuKernel g;
    g.launcher = std::make_unique<Launcher>(std::move(k));
    for (const Expr& e : g.launcher->kernel().source.grid)
      for (const Var& v : free_vars(e)) g.grid_uses_pointers |= v.dtype().is_pointer();
    return g;
  }, py::arg("program"), py::arg("arch") = "", py::arg("cache") = true,
     "Compiles a traced Program for a GPU arch (\"\": the current GPU's) with NVRTC, through the disk cache "
     "unless cache=False; returns a GpuKernel.");
  // What a traced program becomes, without launching: the CUDA source and its PTX (the emitter's
  // options as a launch would have them; debug_bounds None: TILUS_DEBUG_BOUNDS decides).
  auto cuda_options = [](std::optional<bool> debug_bounds) {
    CudaOptions o = CudaOptions::from_env();
    if (debug_bounds) o.debug_bounds = *debug_bounds;
    return o;
  };
  m.def("compile_cuda_source", [=](const Program& p, const std::string& arch, std::optional<bool> debug_bounds) {
    return cuda_source(p, arch, cuda_options(debug_bounds)).source;
  }, py::arg("program"), py::arg("arch"), py::arg("debug_bounds") = py::none(),
     "The CUDA source of a traced Program after the pass pipeline for a GPU arch (no GPU or NVRTC needed); "
     "debug_bounds None: TILUS_DEBUG_BOUNDS decides.");
  m.def("cuda_ptx", [=](const Program& p, const std::string& arch) {
    KernelSource src = cuda_source(p, arch, cuda_options(std::nullopt));
    py::gil_scoped_release release;
    return nvrtc_compile(src.source, src.name, src.arch).ptx;
  }, "The PTX NVRTC makes of a traced Program's CUDA source for a GPU arch (needs NVRTC, not a GPU).");
  // NVRTC on a CUDA source, with its compile options: bench/compile_time.py and the PCH tests.
  m.def("nvrtc_compile", [](const std::string& source, const std::string& name, const std::string& arch,
                            const std::string& pch_dir, bool minimal_header, bool time_phases,
                            const std::vector<std::string>& extra_options) {
    NvrtcCompileOptions o;
    o.pch_dir = pch_dir;
    o.minimal_header = minimal_header;
    o.time_phases = time_phases;
    NvrtcOutput out;
    {
      py::gil_scoped_release release;
      out = nvrtc_compile(source, name, arch, extra_options, o);
    }
    py::dict d;
    d["cubin"] = py::bytes(out.cubin.data(), out.cubin.size());
    d["log"] = out.log;
    d["options"] = out.options;
    d["pch"] = std::string(to_string(out.pch));
    d["pch_file"] = out.pch_file;
    d["wall_ms"] = out.wall_ms;
    d["front_end_ms"] = out.timing.front_end_ms;
    d["optimizer_ms"] = out.timing.optimizer_ms;
    d["ptxas_ms"] = out.timing.ptxas_ms;
    d["phases"] = out.timing.phases;
    d["registers"] = out.resources.registers;
    d["wgmma_serialized"] = out.resources.wgmma_serialized;
    return d;
  }, py::arg("source"), py::arg("name"), py::arg("arch"), py::arg("pch_dir") = "", py::arg("minimal_header") = true,
     py::arg("time_phases") = false, py::arg("extra_options") = std::vector<std::string>{},
     "Compiles a CUDA source with NVRTC (the device header library available as tilus/device.h); pch_dir: where "
     "precompiled device headers live (\"\": none); time_phases: NVRTC's --time report; extra_options: more NVRTC "
     "options (after tilus's, before the header variant's defines). Returns a dict: cubin, log, "
     "options, pch (\"none\", \"created\", \"used\"), pch_file, wall_ms, front_end_ms, optimizer_ms, ptxas_ms "
     "(-1: not timed), phases, registers, wgmma_serialized (ptxas's reason, or \"\").");
  m.def("nvrtc_pch_dir", [] { return nvrtc_pch_dir(nullptr); },
        "Where compiles keep precompiled device headers: <cache dir>/pch (\"\" when TILUS_NVRTC_PCH=0).");
  m.def("nvrtc_pch_files", &nvrtc_pch_files, "The precompiled device headers this process made and keeps.");
  m.def("device_header_defines", &device_header_defines,
        "The -D options that select the device header variant a CUDA source needs.");
  m.def("pass_names", &pass_names, "The tile-level passes in pipeline order.");
  m.def("pass_stages", [](const Program& p, const std::string& arch) {
    PipelineOptions o;
    o.target = arch == "cpu" ? Target::cpu() : Target::from_arch(arch);
    std::vector<std::pair<std::string, std::string>> stages = {{"traced", print(p)}};
    o.after_pass = [&](const std::string& name, const Program& q) { stages.emplace_back(name, print(q)); };
    run_pipeline(p, o);
    return stages;
  }, "The IR of a traced Program after every pass, as (stage, text) pairs, \"traced\" first, for a GPU arch or "
     "\"cpu\".");

  py::class_<CpuKernelHandle>(m, "CpuKernel", "A kernel compiled for the CPU backend (LLVM ORC JIT).")
      .def("launch", &CpuKernelHandle::launch, py::arg("args"), py::arg("extents") = std::vector<int64_t>{},
           "Runs every block with runtime arguments (KernelArgs and numbers; pointers given as ints take their byte "
           "extent from extents), checked first; Ctrl-C stops it.")
      .def_property_readonly("llvm_ir", [](const CpuKernelHandle& k) { return k.kernel->llvm_ir(); },
                             "The kernel's LLVM IR before optimization.")
      .def_property_readonly("checked", [](const CpuKernelHandle& k) { return k.kernel->checked(); },
                             "Whether it was compiled in checked mode (every global access checked).")
      .def_property_readonly("fast_compiled", [](const CpuKernelHandle& k) { return k.kernel->fast_compiled(); },
                             "Whether it was compiled for compile time (a large kernel: a shorter pass pipeline).")
      .def_property_readonly("from_cache", [](const CpuKernelHandle& k) { return k.kernel->from_cache(); },
                             "Whether its machine code came from the disk cache (or an identical kernel compiled "
                             "earlier in the process) instead of LLVM's code generator.")
      .def_property_readonly("compile_ms", [](const CpuKernelHandle& k) { return k.kernel->compile_ms(); },
                             "Milliseconds spent compiling (pass pipeline, lowering and JIT).")
      .def_property_readonly("gpu_warnings", [](const CpuKernelHandle& k) { return k.kernel->gpu_warnings(); },
                             "Why the kernel could not run (well) on a GPU although it runs here (more shared memory "
                             "than a GPU allows, register spills).");
  m.def("compile_cpu", [](const Program& p, bool checked, int threads) {
    CpuOptions o;
    o.checked = checked;
    o.threads = threads;
    std::shared_ptr<const CpuKernel> k;
    {
      py::gil_scoped_release release;  // LLVM takes a while; other Python threads run meanwhile
      k = CpuKernel::compile(p, o);
    }
    CpuKernelHandle h{std::move(k), {}};
    for (const Var& v : h.kernel->kernel().params) h.params.push_back(KernelParam{v.name(), v.dtype()});
    return h;
  }, py::arg("program"), py::arg("checked") = false, py::arg("threads") = 0,
     "Compiles a traced Program for the CPU backend (checked: checked mode; threads: worker threads for the blocks, "
     "0: the hardware's); returns a CpuKernel.");

  // --- launch arguments -------------------------------------------------------------------------
  py::class_<KernelArg>(m, "KernelArg",
                        "A launch argument as the core takes it (internal: tilus/arguments.py makes them of arrays).")
      // An array argument as the front end sees it: its address, element dtype, byte extent,
      // device, and what the argument contract checks (tilus/runtime/launcher.h): read-only,
      // byte order, shape and byte strides (None: a dense row-major buffer).
      .def_static("pointer", [](uint64_t address, DataType pointee, int64_t bytes, const std::string& device,
                                bool read_only, bool foreign_byte_order, std::vector<int64_t> shape,
                                std::vector<int64_t> byte_strides) {
        KernelArg a = KernelArg::typed_pointer(DevicePtr(address), pointee);
        a.bytes = bytes;
        a.memory = device == "cuda" ? KernelArg::Memory::Device
                   : device == "cpu" ? KernelArg::Memory::Host
                                     : KernelArg::Memory::Unknown;
        a.read_only = read_only;
        a.foreign_byte_order = foreign_byte_order;
        a.shape = std::move(shape);
        a.byte_strides = std::move(byte_strides);
        return a;
      }, py::arg("address"), py::arg("pointee"), py::arg("bytes"), py::arg("device"), py::arg("read_only") = false,
         py::arg("foreign_byte_order") = false, py::arg("shape") = std::vector<int64_t>{},
         py::arg("byte_strides") = std::vector<int64_t>{},
         "An array argument: address, element dtype, byte extent, device (\"cuda\", \"cpu\" or other), and what the "
         "argument contract checks (read-only, foreign byte order, shape and byte strides; empty: dense row-major).")
      .def_property_readonly("address", [](const KernelArg& a) { return uint64_t(a.ptr); }, "The array's address.")
      .def_property_readonly("bytes", [](const KernelArg& a) { return a.bytes; }, "The array's bytes (-1: unknown).")
      .def_property_readonly("shape", [](const KernelArg& a) { return a.shape; }, "The array's shape (elements).")
      .def_property_readonly("byte_strides", [](const KernelArg& a) { return a.byte_strides; },
                             "The array's strides in bytes.")
      .def_property_readonly("device", [](const KernelArg& a) {
        return a.memory == KernelArg::Memory::Device ? "cuda" : a.memory == KernelArg::Memory::Host ? "cpu" : "unknown";
      }, "Where the array is: 'cuda', 'cpu' or 'unknown'.");
  py::class_<ArgList>(m, "ArgList",
                      "A call's runtime arguments as the general path checked them (internal: FastPath.check_call "
                      "makes them; a launch takes them as they are): a sequence of KernelArgs and numbers.")
      .def("__len__", [](const ArgList& l) { return l.args.size(); })
      .def("__getitem__", [](const ArgList& l, Py_ssize_t i) {
        Py_ssize_t n = Py_ssize_t(l.args.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw py::index_error("ArgList index out of range");
        return l.item(size_t(i));
      })
      .def_property_readonly("facts", [](const ArgList& l) { return l.facts; },
                             "The specialization facts of the arguments (what a compile specializes on).");
  py::class_<KernelSignature>(m, "KernelSignature",
                              "A Script's kernel before it is traced, its name and runtime parameters (internal): "
                              "check() checks a call's arguments as every launch does.")
      .def(py::init([](const std::string& name, const std::vector<std::pair<std::string, DataType>>& params) {
        KernelSignature s;
        s.source.name = name;
        for (auto& [n, t] : params) s.source.params.push_back(KernelParam{n, t});
        return s;
      }))
      .def("check", &KernelSignature::check,
           "Checks a call's runtime arguments; returns (per argument True / False / None: specialized or not, "
           "None for floats; the backend, \"gpu\" or \"cpu\"; the specialization facts).");

  // --- autotuning -------------------------------------------------------------------------------
  py::class_<TuneSpace>(m, "TuneSpace",
                        "An autotuning space (internal: @tilus.autotune builds one): named dimensions of value texts.")
      .def(py::init<>())
      .def(py::init<const TuneSpace&>())
      .def("add", [](TuneSpace& s, const std::string& names, std::vector<std::vector<TuneValue>> points, L loc) {
        s.add(names, std::move(points), loc_of(loc));
      }, "Adds a dimension: names (\"a, b\") and their points (value texts); CompileError at loc for a bad one.")
      .def("configs", &TuneSpace::configs, py::arg("fixed") = TuneConfig{},
           "The product of the dimensions, the first added varying fastest; fixed names are projected out.")
      .def_property_readonly("names", &TuneSpace::names, "Every tuned name, in the order added.");
  py::class_<TuneEntry>(m, "TuneEntry",
                        "The result of tuning one key (tilus.autotune_report returns them); str() is a table of "
                        "configs and times.")
      .def_readonly("key", &TuneEntry::key, "The tuning key's full text.")
      .def_readonly("winner", &TuneEntry::winner, "The fastest config, {name: value text}.")
      .def_readonly("compile_s", &TuneEntry::compile_s, "Seconds spent tracing and compiling every config.")
      .def_readonly("tuning_s", &TuneEntry::tuning_s, "Seconds the whole tuning took.")
      .def_property_readonly("results", [](const TuneEntry& e) {
        py::list out;
        for (auto& r : e.results) out.append(py::make_tuple(r.config, r.ms, r.error));
        return out;
      }, "Every config's (config, milliseconds or None when skipped, why it was skipped).")
      .def("__str__", &tune_report);
  m.def("tune_bucket", &tune_bucket, "The tuning bucket of an integer size: the next power of two (0 and 1 stay).");
  m.def("tune_space_id", &tune_space_id, "A hash of a space's configs, part of the tuning key.");
  m.def("tune_key", [](const std::string& script, const py::sequence& values, const std::string& arch,
                       const std::string& space, const TuneConfig& fixed, const TuneConfig& constants) {
    return tune_key(script, to_args({}, values, {}), arch, space, fixed, constants);
  }, "The tuning key text of a call (internal: tilus/tuning.py).");
  m.def("store_tune_entry", &store_tune_entry,
        "Writes a TuneEntry to <cache dir>/autotune/<hash of key>.txt (atomically).");
  m.def("load_tune_entry", &load_tune_entry,
        "The TuneEntry stored for a key in a cache dir; None when missing, corrupt, truncated or stale.");
  // Tunes with the C++ tuner: `trace(config)` returns the config's traced Program (called from
  // the compile threads, which hold the GIL only for it); `timer(config)`, when given, replaces
  // the timing (tests). A tilus error raised in `trace` skips the config like any other.
  m.def("tune", [](const std::string& key, const std::vector<TuneConfig>& configs, const py::function& trace,
                   const py::sequence& values, const std::string& arch, int repeat, const py::object& timer,
                   const std::string& name, L where) {
    TuneOptions o;
    o.arch = arch;
    o.repeat = repeat;
    o.name = name;
    o.where = loc_of(where);
    if (!timer.is_none())
      o.timer = [timer](const TuneConfig& c) {
        py::gil_scoped_acquire gil;
        return timer(c).cast<double>();
      };
    TraceConfig traced = [trace](const TuneConfig& c) {
      py::gil_scoped_acquire gil;
      try {
        return trace(c).cast<Program>();
      } catch (py::error_already_set& e) {
        if (e.matches(error.ptr()) || e.matches(PyExc_RuntimeError)) throw CompileError(py::str(e.value()));
        throw;
      }
    };
    std::vector<KernelArg> args = to_args({}, values, {});
    py::gil_scoped_release release;
    return tune(key, configs, traced, args, o);
  }, "Tunes configs with the C++ tuner (internal: tilus/tuning.py); returns the TuneEntry.");
  m.def("tune_report", &tune_report, "A TuneEntry as a table of configs and times, fastest first, the winner marked *.");

  m.def("device_info", [] {
    const DeviceInfo& d = current_device();
    return py::dict(py::arg("name") = d.name, py::arg("arch") = d.arch(), py::arg("driver_version") = d.driver_version);
  }, "The current GPU: {\"name\", \"arch\" (e.g. \"sm_90a\"), \"driver_version\"}.");
  m.def("nvrtc_version", [] { return nvrtc_available() ? nvrtc_version() : 0; },
        "NVRTC's version as major * 1000 + minor * 10 (e.g. 13000); 0 without NVRTC.");
  m.def("cache_dir", [] { return default_cache().dir(); }, "The disk cache's root directory ($TILUS_CACHE_DIR or ~/.cache/tilus).");
  m.def("set_cache_dir", &set_default_cache_dir, py::arg("dir"),
        "Moves the process-wide disk cache to `dir` (empty: $TILUS_CACHE_DIR or ~/.cache/tilus) for later compiles.");
  m.def("gpu_available", &gpu_available, "True when libcuda loads and at least one device is present.");
  m.def("gpu_unavailable_reason", &gpu_unavailable_reason, "Why gpu_available() is False (\"\" when it is True).");
  m.def("cpu_backend_available", &cpu_backend_available, "True when tilus was built with LLVM (the CPU backend).");
  m.def("cpu_unavailable_reason", &cpu_unavailable_reason,
        "Why cpu_backend_available() is False (\"\" when it is True).");
  m.def("nvrtc_available", &nvrtc_available, "True when tilus was built with NVRTC.");
  m.def("default_backend", [] { return std::string(to_string(default_backend())); },
        "\"gpu\" when a GPU can be used, else \"cpu\"; TILUS_TARGET=cpu / gpu overrides.");
  m.def("synchronize", &synchronize, "Waits until the current CUDA context has finished all work (cuCtxSynchronize).");
}
