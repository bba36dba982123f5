// tilus._C: the pybind11 module under the Python package. It binds the tracer core (the
// Builder every C++ Script method drives), data types, scalar expressions, tensors, the pass
// pipeline and both backends' compile-and-launch objects. The Python package
// (python/tilus/) builds the user-facing Script on top of it.
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

namespace {

// Python scalars as IR expressions: bool -> bool, int -> int32 (int64 when out of range),
// float -> float32, Expr as is.
Expr to_expr(const py::handle& h) {
  if (py::isinstance<Expr>(h)) return h.cast<Expr>();
  if (py::isinstance<py::bool_>(h)) return Expr(h.cast<bool>());
  if (py::isinstance<py::int_>(h)) return Expr(h.cast<int64_t>());
  if (py::isinstance<py::float_>(h)) return Expr(h.cast<double>());
  // numpy scalars and the like
  if (py::hasattr(h, "__index__")) return Expr(h.attr("__index__")().cast<int64_t>());
  if (py::hasattr(h, "__float__")) return Expr(h.attr("__float__")().cast<double>());
  throw CompileError(fmt::format("expected a scalar (int, float, bool or tilus expression), got {}",
                                 std::string(py::str(py::type::of(h).attr("__name__")))));
}

std::vector<Expr> to_exprs(const py::iterable& xs) {
  std::vector<Expr> out;
  for (auto x : xs) out.push_back(to_expr(x));
  return out;
}

SourceLoc loc_of(const py::tuple& t) {
  SourceLoc l;
  if (t.size() >= 2) {
    l.file = t[0].cast<std::string>();
    l.line = t[1].cast<int>();
  }
  if (t.size() >= 3) l.function = t[2].cast<std::string>();
  return l;
}

// Expr binary operators in both orders. An operand that is no scalar gives NotImplemented, so
// that Python tries the other operand's operator (a register tensor's: `n * r`) and otherwise
// raises its usual TypeError naming the operator.
bool is_scalar(const py::handle& h) {
  return py::isinstance<Expr>(h) || py::isinstance<py::bool_>(h) || py::isinstance<py::int_>(h) ||
         py::isinstance<py::float_>(h) ||
         (!py::isinstance<py::str>(h) && (py::hasattr(h, "__index__") || py::hasattr(h, "__float__")));
}

template <class F>
void def_binary(py::class_<Expr>& c, const char* name, const char* rname, F f) {
  auto not_implemented = [] { return py::reinterpret_borrow<py::object>(Py_NotImplemented); };
  c.def(name, [f, not_implemented](const Expr& a, const py::object& b) -> py::object {
    return is_scalar(b) ? py::cast(f(a, to_expr(b))) : not_implemented();
  });
  if (rname)
    c.def(rname, [f, not_implemented](const Expr& a, const py::object& b) -> py::object {
      return is_scalar(b) ? py::cast(f(to_expr(b), a)) : not_implemented();
    });
}

// A launch's argument list from Python values: KernelArgs (the front end's pointers), pointers
// as ints, scalars as int/float.
std::vector<KernelArg> to_args(const std::vector<KernelParam>& params, const py::sequence& values,
                               const std::vector<int64_t>& extents) {
  std::vector<KernelArg> args;
  size_t n = py::len(values);
  args.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    py::handle v = values[i];
    if (py::isinstance<KernelArg>(v)) {
      args.push_back(v.cast<const KernelArg&>());
      continue;
    }
    bool pointer = i < params.size() && params[i].dtype.is_pointer();
    if (i < params.size() && params[i].is_blob()) {
      // A by-value parameter's value: a contiguous bytes-like object (anything else is taken
      // as a number below, which check_arguments reports).
      Py_buffer bytes;
      if (PyObject_GetBuffer(v.ptr(), &bytes, PyBUF_SIMPLE) == 0) {
        args.push_back(KernelArg::by_value(bytes.buf, size_t(bytes.len)));
        PyBuffer_Release(&bytes);
        continue;
      }
      PyErr_Clear();
    }
    if (pointer) {
      KernelArg a = KernelArg::pointer(DevicePtr(v.cast<uint64_t>()));
      if (i < extents.size()) a.bytes = extents[i];
      args.push_back(a);
    } else if (py::isinstance<py::float_>(v)) {
      args.emplace_back(v.cast<double>());
    } else {
      args.emplace_back(v.cast<int64_t>());
    }
  }
  return args;
}

struct GpuKernel {
  std::unique_ptr<Launcher> launcher;
  // The fast path's grid cache: the scalar arguments the last grid was evaluated for.
  std::vector<uint64_t> grid_args;
  std::array<uint32_t, 3> grid{0, 0, 0};
  bool grid_valid = false;
  bool grid_uses_pointers = false;  // then never cached
  // The argument contract of each pointer parameter for those scalars, as the torch fast path
  // checks it (check_arguments' rules, on what a torch tensor says cheaply).
  struct FastContract {
    int64_t bytes = 0;        // a contiguous array must hold this many
    bool strided_ok = false;  // a strided one may do: every view declares strides it can match
    // Per view with declared strides: those strides and the view's shape (elements). An array
    // of the view's rank must have exactly those strides, and a strided one that shape.
    std::vector<std::vector<int64_t>> strides, shapes;
  };
  std::vector<FastContract> contracts;

  void launch(const py::sequence& values, uint64_t stream) const {
    launcher->launch(to_args(launcher->kernel().source.params, values, {}), reinterpret_cast<Stream>(stream));
  }

  // A scalar argument `o` of parameter i in its C type's bits; false for anything unusual (a
  // non-number, an overflow, an out-of-range integer), which launch() then reports.
  bool pack_scalar(size_t i, PyObject* o, uint64_t& slot) const {
    DataType t = launcher->kernel().source.params[i].dtype;
    if (t.is_float()) {
      double v = PyFloat_AsDouble(o);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      if (t == dtypes::float32) {
        float f = float(v);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        slot = bits;
      } else {
        slot = t.encode_float(v);
      }
      return true;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    bool in_range = t.is_bool() || (t.is_uint() ? v >= 0 && uint64_t(v) <= t.int_max()
                                                : v >= t.int_min() && (v < 0 || uint64_t(v) <= t.int_max()));
    slot = t.is_bool() ? uint64_t(v != 0) : uint64_t(v);
    return in_range;
  }

  // The bytes of a by-value parameter from a bytes-like object (bytes, bytearray, a contiguous
  // array); false when `o` is none or has another size, which launch() then reports.
  static bool pack_blob(const KernelParam& p, PyObject* o, uint8_t* at) {
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      return false;
    }
    bool fits = view.len == p.blob_bytes;
    if (fits) std::memcpy(at, view.buf, size_t(view.len));
    PyBuffer_Release(&view);
    return fits;
  }

  // Parameter i's 8-byte slot in a buffer laid out by the launcher's layout().
  void put_slot(size_t i, uint64_t bits, uint8_t* buffer) const {
    std::memcpy(buffer + launcher->layout().offsets[i], &bits, 8);
  }
  uint64_t slot(size_t i, const uint8_t* buffer) const {
    uint64_t bits;
    std::memcpy(&bits, buffer + launcher->layout().offsets[i], 8);
    return bits;
  }

  // Argument `o` of parameter i (a pointer as an int, a number, or bytes for a by-value
  // parameter) into the buffer; false for anything unusual, which launch() then reports.
  bool pack(size_t i, PyObject* o, uint8_t* buffer) const {
    const KernelParam& p = launcher->kernel().source.params[i];
    if (p.is_blob()) return pack_blob(p, o, buffer + launcher->layout().offsets[i]);
    uint64_t bits = 0;
    if (p.dtype.is_pointer()) {
      bits = PyLong_AsUnsignedLongLong(o);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
    } else if (!pack_scalar(i, o, bits)) {
      return false;
    }
    put_slot(i, bits, buffer);
    return true;
  }

  // Evaluates the grid and the contract's numbers for packed arguments, only when a scalar
  // changed.
  void refresh(const uint8_t* buffer) {
    const KernelSource& source = launcher->kernel().source;
    const auto& params = source.params;
    size_t n = params.size();
    auto scalar = [&](size_t i) { return !params[i].dtype.is_pointer() && !params[i].is_blob(); };
    bool same = grid_valid && !grid_uses_pointers;
    for (size_t i = 0; i < n && same; ++i)
      if (scalar(i)) same = grid_args[i] == slot(i, buffer);
    if (same) return;
    std::vector<KernelArg> args;
    grid_args.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      DataType t = params[i].dtype;
      if (params[i].is_blob()) {
        args.emplace_back().kind = KernelArg::Kind::Blob;  // a grid never reads one
        continue;
      }
      uint64_t bits = grid_args[i] = slot(i, buffer);
      if (t.is_pointer()) args.push_back(KernelArg::pointer(bits));
      else if (t.is_float()) args.emplace_back(t.decode_float(bits));
      else args.emplace_back(int64_t(bits));
    }
    grid = launch_grid(source, args);
    contracts.assign(n, {});
    auto evaluate_all = [&](const std::vector<Expr>& es, std::vector<int64_t>& out) {
      for (const Expr& e : es)
        if (auto x = evaluate_int(source, args, e)) out.push_back(*x);
      return out.size() == es.size();
    };
    for (size_t i = 0; i < n; ++i) {
      FastContract& c = contracts[i];
      c.strided_ok = !params[i].contract.views.empty();
      for (const ViewContract& v : params[i].contract.views) {
        if (v.extent.defined())
          if (auto reach = evaluate_int(source, args, v.extent); reach && *reach > 0)
            c.bytes = std::max(c.bytes, v.dtype.storage_bytes(*reach));
        std::vector<int64_t> strides, shape;
        bool known = !v.row_major && evaluate_all(v.strides, strides) && evaluate_all(v.shape, shape);
        c.strided_ok = c.strided_ok && known;
        if (!known) continue;
        c.strides.push_back(std::move(strides));
        c.shapes.push_back(std::move(shape));
      }
    }
    grid_valid = true;
  }

  // Launches packed arguments (raw pointers: nothing is known of their arrays to check).
  void launch_packed(uint8_t* buffer, uint64_t stream) {
    refresh(buffer);
    launcher->launch_raw(grid, buffer, reinterpret_cast<Stream>(stream));
  }

  // The hot path of Python launches: `values` is a list the front end has checked (pointers
  // as ints of the right dtype and device). Anything unusual takes launch(), which reports it.
  void launch_fast(const py::list& values, uint64_t stream) {
    size_t n = launcher->kernel().source.params.size();
    PyObject* list = values.ptr();
    if (size_t(PyList_GET_SIZE(list)) != n) return launch(values, stream);
    ArgumentBuffer buffer(launcher->layout());
    for (size_t i = 0; i < n; ++i)
      if (!pack(i, PyList_GET_ITEM(list, Py_ssize_t(i)), buffer.data())) return launch(values, stream);
    launch_packed(buffer.data(), stream);
  }
};

// A Python Script's kernel before it is traced (its name and runtime parameters): checks a
// call's arguments with check_arguments, as every launch does, and says what the call is
// specialized on: per argument True / False (integers and pointers) or None (floats), the facts
// for the traced program, and the backend the arguments ask for.
struct KernelSignature {
  KernelSource source;  // the name and the params only

  py::tuple check(const py::sequence& values) const {
    std::vector<KernelArg> args = to_args(source.params, values, {});
    check_arguments(source, args);
    std::map<int, int64_t> facts = specialization_of(args);
    py::tuple flags(args.size());
    for (size_t i = 0; i < args.size(); ++i)
      flags[i] = args[i].kind == KernelArg::Kind::Float ? py::object(py::none()) : py::bool_(facts.count(int(i)) > 0);
    return py::make_tuple(flags, to_string(backend_for(source.name, args)), facts);
  }
};

struct CpuKernelHandle {
  std::shared_ptr<const CpuKernel> kernel;
  std::vector<KernelParam> params;
  // Runs without the GIL; Python's signal handlers run meanwhile (every 50 ms, in the main
  // thread), and an exception they raise (KeyboardInterrupt on Ctrl-C) stops the blocks and
  // propagates from here.
  void launch(const py::sequence& values, const std::vector<int64_t>& extents) const {
    std::vector<KernelArg> args = to_args(params, values, extents);
    try {
      py::gil_scoped_release release;
      kernel->launch(args, [] {
        py::gil_scoped_acquire gil;
        return PyErr_CheckSignals() != 0;  // leaves the handler's exception set
      });
    } catch (const CpuInterrupted&) {
      if (PyErr_Occurred()) throw py::error_already_set();
      throw;
    }
  }
};

// The whole fast launch path of one Script instance in C++ (Python's interpreter costs more
// than the checks): arguments are contiguous CUDA torch tensors of the parameters' dtypes and
// Python numbers. It checks each tensor's type, dtype, device and contiguity, builds the bit
// mask of 16-byte aligned pointers and 16-divisible ints, finds the kernel compiled for that
// mask, checks each tensor's bytes (and the strides of views that declare them) against the
// kernel's argument contract, asks torch for its current stream and launches. Returns False
// for anything else, and for anything it cannot prove fine (the general Python path then
// validates and reports, compiles, and registers the new kernel here). Torch tensors are never
// read-only and always in the host's byte order.
struct TorchFastPath {
  std::vector<int> kinds;              // 0 pointer, 1 int, 2 float, 3 by-value bytes
  std::vector<py::object> dtypes;      // torch dtype per pointer parameter (None for void*)
  py::object tensor_type;              // torch.Tensor
  py::object raw_stream;               // torch._C._cuda_getCurrentRawStream
  std::map<uint64_t, GpuKernel*> kernels;
  std::vector<py::object> keep;        // the GpuKernel objects (owned by Python)

  bool call(const py::tuple& args) {
    size_t n = kinds.size();
    if (size_t(PyTuple_GET_SIZE(args.ptr())) != n || n > 64) return false;
    static PyObject* s_dtype = PyUnicode_InternFromString("dtype");
    static PyObject* s_is_cuda = PyUnicode_InternFromString("is_cuda");
    static PyObject* s_data_ptr = PyUnicode_InternFromString("data_ptr");
    static PyObject* s_get_device = PyUnicode_InternFromString("get_device");
    static PyObject* s_is_contiguous = PyUnicode_InternFromString("is_contiguous");
    static PyObject* s_nbytes = PyUnicode_InternFromString("nbytes");
    static PyObject* s_stride = PyUnicode_InternFromString("stride");
    static PyObject* s_shape = PyUnicode_InternFromString("shape");
    uint64_t addresses[64];
    int64_t bytes[64];  // a contiguous tensor's (-1: not contiguous)
    uint64_t mask = 0;
    PyObject* last_tensor = nullptr;
    for (size_t i = 0; i < n; ++i) {
      PyObject* a = PyTuple_GET_ITEM(args.ptr(), Py_ssize_t(i));
      if (kinds[i] == 0) {
        if (PyObject_IsInstance(a, tensor_type.ptr()) != 1) return false;
        PyObject* dt = PyObject_GetAttr(a, s_dtype);
        if (!dt) { PyErr_Clear(); return false; }
        bool same = dtypes[i].is_none() || dt == dtypes[i].ptr();  // None: a void* takes any dtype
        Py_DECREF(dt);
        if (!same) return false;
        PyObject* cuda = PyObject_GetAttr(a, s_is_cuda);
        if (!cuda) { PyErr_Clear(); return false; }
        bool on_gpu = cuda == Py_True;
        Py_DECREF(cuda);
        if (!on_gpu) return false;
        PyObject* ptr = PyObject_CallMethodNoArgs(a, s_data_ptr);
        if (!ptr) { PyErr_Clear(); return false; }
        unsigned long long addr = PyLong_AsUnsignedLongLong(ptr);
        Py_DECREF(ptr);
        if (addr == 0 || PyErr_Occurred()) {
          PyErr_Clear();
          return false;
        }
        PyObject* contiguous = PyObject_CallMethodNoArgs(a, s_is_contiguous);
        if (!contiguous) { PyErr_Clear(); return false; }
        bool dense = contiguous == Py_True;
        Py_DECREF(contiguous);
        bytes[i] = -1;
        if (dense) {
          PyObject* nbytes = PyObject_GetAttr(a, s_nbytes);
          if (!nbytes) { PyErr_Clear(); return false; }
          bytes[i] = PyLong_AsLongLong(nbytes);
          Py_DECREF(nbytes);
          if (bytes[i] < 0 || PyErr_Occurred()) {
            PyErr_Clear();
            return false;
          }
        }
        if (is_specialized(addr)) mask |= uint64_t(1) << i;
        addresses[i] = addr;
        last_tensor = a;
      } else if (kinds[i] == 1) {
        if (!PyLong_CheckExact(a)) return false;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
        if (!overflow && is_specialized(uint64_t(v))) mask |= uint64_t(1) << i;
      } else if (kinds[i] == 3) {
        if (!PyObject_CheckBuffer(a)) return false;
      } else if (!PyFloat_CheckExact(a) && !PyLong_CheckExact(a)) {
        return false;
      }
    }
    auto it = kernels.find(mask);
    if (it == kernels.end()) return false;
    GpuKernel& kernel = *it->second;
    if (kernel.launcher->kernel().source.params.size() != n) return false;
    ArgumentBuffer buffer(kernel.launcher->layout());
    for (size_t i = 0; i < n; ++i) {
      if (kinds[i] == 0) kernel.put_slot(i, addresses[i], buffer.data());
      else if (!kernel.pack(i, PyTuple_GET_ITEM(args.ptr(), Py_ssize_t(i)), buffer.data())) return false;
    }
    kernel.refresh(buffer.data());
    for (size_t i = 0; i < n; ++i) {
      if (kinds[i] != 0) continue;
      const GpuKernel::FastContract& c = kernel.contracts[i];
      bool dense = bytes[i] >= 0;
      if (dense ? bytes[i] < c.bytes : !c.strided_ok) return false;
      if (!c.strides.empty() &&
          !declared_strides_hold(PyTuple_GET_ITEM(args.ptr(), Py_ssize_t(i)), c, dense, s_stride, s_shape))
        return false;
    }
    uint64_t stream = 0;
    if (last_tensor) {
      PyObject* dev = PyObject_CallMethodNoArgs(last_tensor, s_get_device);
      if (!dev) { PyErr_Clear(); return false; }
      PyObject* st = PyObject_CallOneArg(raw_stream.ptr(), dev);
      Py_DECREF(dev);
      if (!st) { PyErr_Clear(); return false; }
      stream = PyLong_AsUnsignedLongLong(st);
      Py_DECREF(st);
    }
    kernel.launcher->launch_raw(kernel.grid, buffer.data(), reinterpret_cast<Stream>(stream));
    return true;
  }

  // A tensor's strides against the declared strides of its parameter's views (as
  // check_arguments decides, where it can tell cheaply): a contiguous tensor of another rank
  // is a dense buffer, one of the view's rank needs exactly those strides; a strided tensor
  // needs the view's rank and strides, and holds the view dim by dim.
  static bool declared_strides_hold(PyObject* tensor, const GpuKernel::FastContract& c, bool dense,
                                    PyObject* s_stride, PyObject* s_shape) {
    PyObject* strides = PyObject_CallMethodNoArgs(tensor, s_stride);
    if (!strides) { PyErr_Clear(); return false; }
    PyObject* shape = dense ? nullptr : PyObject_GetAttr(tensor, s_shape);
    bool ok = PyTuple_Check(strides) && (dense || (shape && PyTuple_Check(shape)));
    size_t rank = ok ? size_t(PyTuple_GET_SIZE(strides)) : 0;
    for (size_t v = 0; ok && v < c.strides.size(); ++v) {
      if (rank != c.strides[v].size()) {
        ok = dense;
        continue;
      }
      for (size_t d = 0; ok && d < rank; ++d) {
        ok = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, Py_ssize_t(d))) == c.strides[v][d];
        if (ok && !dense) ok = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, Py_ssize_t(d))) >= c.shapes[v][d];
      }
    }
    Py_DECREF(strides);
    Py_XDECREF(shape);
    PyErr_Clear();
    return ok;
  }
};

}  // namespace

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

// A numeric type's largest (or smallest) finite value, as a Python int or float.
py::object type_limit(const DataType& t, bool largest) {
  if (t.is_bool()) return py::int_(largest ? 1 : 0);
  if (t.is_integer()) {
    int bits = t.bits();
    if (t.is_uint()) return largest ? py::int_(bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1) : py::int_(0);
    int64_t hi = bits >= 64 ? INT64_MAX : (int64_t(1) << (bits - 1)) - 1;
    return largest ? py::int_(hi) : py::int_(-hi - 1);
  }
  if (!t.is_float()) throw CompileError(fmt::format("{} has no numeric range", t.name()));
  double m = 0;
  if (t.bits() > 16) {
    m = t == dtypes::float64 ? std::numeric_limits<double>::max() : double(std::numeric_limits<float>::max());
  } else {  // every pattern of the small formats
    for (uint64_t bits = 0; bits < (uint64_t(1) << t.bits()); ++bits) {
      double v = t.decode_float(bits);
      if (std::isfinite(v)) m = std::max(m, v);
    }
  }
  return py::float_(largest ? m : -m);
}

namespace {

// The fast path's entry as a CPython METH_FASTCALL function (issue 18: no pybind11 dispatcher
// on the hot path): `entry(args)` with a call's positional-argument tuple, True when it
// launched. Its `self` is a capsule of the TorchFastPath, which holds the Python object that
// owns it. A C++ exception (a launch the driver refused) answers False: the general path then
// launches again and raises the error with its Python type.
constexpr const char* kFastPathCapsule = "tilus.TorchFastPath";

PyObject* torch_fast_path_entry(PyObject* capsule, PyObject* const* argv, Py_ssize_t nargs) {
  auto* fast = static_cast<TorchFastPath*>(PyCapsule_GetPointer(capsule, kFastPathCapsule));
  if (!fast) return nullptr;
  if (nargs != 1 || !PyTuple_Check(argv[0])) {
    PyErr_SetString(PyExc_TypeError, "the launch fast path takes one argument: the call's argument tuple");
    return nullptr;
  }
  bool launched = false;
  try {
    launched = fast->call(py::reinterpret_borrow<py::tuple>(argv[0]));
  } catch (py::error_already_set&) {
    launched = false;  // its Python error is cleared as the object goes
  } catch (const std::exception&) {
    launched = false;
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return PyBool_FromLong(launched);
}

py::object torch_fast_path_function(py::object owner) {
  static PyMethodDef def = {"torch_fast_path", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(torch_fast_path_entry)),
                            METH_FASTCALL, "The launch fast path (internal): entry(args) -> True when launched."};
  TorchFastPath& fast = owner.cast<TorchFastPath&>();
  PyObject* capsule = PyCapsule_New(&fast, kFastPathCapsule, [](PyObject* c) {
    Py_XDECREF(static_cast<PyObject*>(PyCapsule_GetContext(c)));
  });
  if (!capsule) throw py::error_already_set();
  Py_INCREF(owner.ptr());
  PyCapsule_SetContext(capsule, owner.ptr());
  PyObject* fn = PyCFunction_NewEx(&def, capsule, nullptr);
  Py_DECREF(capsule);
  if (!fn) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
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

  // --- data types -----------------------------------------------------------------------------
  py::class_<DataType>(m, "DataType",
                       "A tilus data type: tilus.float16, tilus.int4, tilus.float6_e3m2, ... (tilus.dtype(name) parses "
                       "a name).\n\n``~dtype`` is the pointer type: ``a: ~float16`` annotates an array parameter of a "
                       "kernel.")
      .def("__call__",
           [](const DataType& t, const py::object& v) -> Expr {
             if (py::isinstance<Expr>(v)) return cast(v.cast<Expr>(), t);
             if (py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v))
               return make_const(t, v.cast<double>());
             throw CompileError(fmt::format("{}(...) takes a number or a kernel scalar, got {}", t.name(),
                                            std::string(py::str(py::type::of(v).attr("__name__")))));
           },
           "dtype(x): a kernel scalar x converted to this type, or the constant of a number (NVIDIA Tilus's "
           "float32(x)).")
      .def_static("from_name", [](const std::string& n) {
        auto t = DataType::from_name(n);
        if (!t) throw CompileError(fmt::format("unknown data type '{}'", n));
        return *t;
      }, "The data type of a name (\"float16\", \"bf16\", \"int4\", \"float6_e3m2\", \"tf32\", \"float16*\", ...); "
         "CompileError for an unknown name.")
      .def_property_readonly("name", &DataType::name, "The canonical name: \"float16\", \"int4\", \"float16*\", ...")
      .def_property_readonly("bits", &DataType::bits, "The storage bits of one element (64 for a pointer).")
      .def_property_readonly("nbits", &DataType::bits, "The storage bits of one element (NVIDIA Tilus's name of bits).")
      .def_property_readonly("short_name", [](const DataType& t) {
             // hidet's short names: f16, bf16, tf32, f8e4m3, f6e3m2, i8, u4, bool.
             std::string n = t.name();
             if (t.is_float() && n.rfind("float", 0) == 0) {
               n = "f" + n.substr(5);
               n.erase(std::remove(n.begin(), n.end(), '_'), n.end());
             } else if (n == "bfloat16" || n == "tfloat32") {
               n = n == "bfloat16" ? "bf16" : "tf32";
             } else if (t.is_integer() && n.rfind("uint", 0) == 0) {
               n = "u" + n.substr(4);
             } else if (t.is_integer() && n.rfind("int", 0) == 0) {
               n = "i" + n.substr(3);
             }
             return n;
           }, "NVIDIA Tilus's (hidet's) short name: f16, bf16, f8e4m3, f6e3m2, i8, u4, ...")
      .def_property_readonly("nbytes", [](const DataType& t) { return t.storage_bytes(1); },
                             "The bytes one element occupies (1 for a sub-byte type).")
      // The predicates are methods, as in NVIDIA Tilus (hidet's DataType).
      .def("is_float", &DataType::is_float, "Whether it is a floating-point type.")
      .def("is_integer", &DataType::is_integer, "Whether it is a signed or unsigned integer type.")
      .def("is_signed", &DataType::is_signed, "Whether it is a signed integer or a float type.")
      .def("is_unsigned", &DataType::is_uint, "Whether it is an unsigned integer type.")
      .def("is_boolean", &DataType::is_bool, "Whether it is the bool type (tilus.boolean).")
      .def("is_bool", &DataType::is_bool, "Whether it is the bool type (tilus.boolean).")
      .def("is_pointer", &DataType::is_pointer, "Whether it is a pointer type (~dtype).")
      .def("is_void", &DataType::is_void, "Whether it is void (the pointee of tilus.void_p).")
      .def("is_subbyte", &DataType::is_subbyte, "Whether an element takes fewer than 8 bits.")
      .def("is_integer_subbyte", [](const DataType& t) { return t.is_integer() && t.is_subbyte(); },
           "Whether it is an integer type of fewer than 8 bits.")
      .def("is_float_subbyte", [](const DataType& t) { return t.is_float() && t.is_subbyte(); },
           "Whether it is a float type of fewer than 8 bits.")
      .def("is_any_float16", [](const DataType& t) { return t == dtypes::float16 || t == dtypes::bfloat16; },
           "Whether it is float16 or bfloat16.")
      .def_property_readonly("min_value", [](const DataType& t) { return type_limit(t, false); },
                             "The smallest finite value (an int for integer types, a float for float types).")
      .def_property_readonly("max_value", [](const DataType& t) { return type_limit(t, true); },
                             "The largest finite value (an int for integer types, a float for float types).")
      .def_property_readonly("pointee", &DataType::pointee, "The type a pointer type points to.")
      .def("pointer_to", &DataType::pointer_to, "The pointer type to this type (the same as ~dtype).")
      .def("__invert__", &DataType::pointer_to)  // ~float16: a pointer to float16 (Tilus' spelling)
      .def("storage_bytes", &DataType::storage_bytes, "The bytes that n densely packed elements occupy.")
      .def("encode_float", &DataType::encode_float,
           "The bit pattern of a float value in this float type (round to nearest even), in the low bits of an int.")
      .def("decode_float", &DataType::decode_float,
           "The float value of a bit pattern (in the low bits of an int) of this float type; NaN patterns give NaN.")
      .def("encode_floats", [](const DataType& t, const py::buffer& values) {
             py::buffer_info v = values.request();
             if (v.format != py::format_descriptor<double>::format() || v.ndim != 1 || v.strides[0] != 8)
               throw py::value_error("encode_floats: values must be a contiguous 1-D float64 buffer");
             if (!t.is_float() || t.bits() > 64) throw py::value_error("encode_floats: " + t.name() + " is not a float type");
             std::vector<uint64_t> codes(size_t(v.size));
             auto* x = static_cast<const double*>(v.ptr);
             std::vector<uint8_t> packed;
             {
               py::gil_scoped_release unlocked;
               for (size_t i = 0; i < codes.size(); ++i) codes[i] = t.encode_float(x[i]);
               packed = pack_bits(codes, t.bits());
             }
             return py::bytes(reinterpret_cast<const char*>(packed.data()), packed.size());
           }, py::arg("values"),
           "The values (a contiguous float64 buffer) in this float type, round to nearest even, densely bit-packed "
           "little-endian as tilus stores them (bytes).")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__hash__", [](const DataType& t) { return std::hash<std::string>()(t.name()); })
      .def("__repr__", [](const DataType& t) { return t.name(); });
  m.def("instruction_defs", []() {
    // "shared", "shared|tmem", "any" (global, shared and register), ...
    auto scopes = [](uint8_t bits) {
      if ((bits & kAnyScope) == kAnyScope) return std::string("any");
      std::string s;
      for (auto [bit, name] : {std::pair<uint8_t, const char*>{kGlobal, "global"}, {kShared, "shared"},
                               {kRegister, "register"}, {kTensorMemory, "tmem"}})
        if (bits & bit) s += (s.empty() ? "" : "|") + std::string(name);
      return s;
    };
    py::list out;
    for (const InstDef* d : inst_defs()) {
      py::dict r;
      r["name"] = d->name;
      r["group"] = d->group;
      r["method"] = d->method();
      r["defined"] = d->kind == InstKind::Defined;
      r["summary"] = d->summary;
      r["role"] = to_string(d->traits.role);
      r["completion"] = to_string(d->traits.completion);
      r["proxy"] = d->traits.proxy == Proxy::Async ? "async" : "generic";
      r["min_sm"] = d->traits.min_sm;
      py::list attrs, operands, scalars;
      for (auto& a : d->attrs)
        attrs.append(py::dict(py::arg("name") = a.name,
                              py::arg("type") = a.type == AttrType::Int ? "int" : a.type == AttrType::Bool ? "bool" : "str",
                              py::arg("default") = a.default_value, py::arg("allowed") = a.allowed));
      for (auto& o : d->operands)
        operands.append(py::dict(py::arg("name") = o.name, py::arg("scopes") = scopes(o.scopes),
                                 py::arg("dtype") = o.dtype, py::arg("numel") = o.numel, py::arg("doc") = o.doc));
      for (auto& sc : d->scalars)
        scalars.append(py::dict(py::arg("name") = sc.name, py::arg("integer") = sc.integer,
                                py::arg("optional") = sc.optional, py::arg("doc") = sc.doc));
      r["attrs"] = attrs;
      r["operands"] = operands;
      r["scalars"] = scalars;
      out.append(r);
    }
    return out;
  }, "Every instruction's definition (ir/inst_def.h) as a dict: name, group, method, defined (a "
     "definition-driven instruction), summary, traits (role, completion, proxy, min_sm), attrs, operands, scalars.");
  m.def("pack_bits", [](const py::buffer& codes, int bits) {
          py::buffer_info c = codes.request();
          if ((c.format != "Q" && c.format != "L") || c.itemsize != 8 || c.ndim != 1 || c.strides[0] != 8)
            throw py::value_error("pack_bits: codes must be a contiguous 1-D uint64 buffer");
          if (bits < 1 || bits > 64) throw py::value_error(fmt::format("pack_bits: bits must be 1 to 64, got {}", bits));
          auto* p = static_cast<const uint64_t*>(c.ptr);
          std::vector<uint8_t> packed = pack_bits(std::vector<uint64_t>(p, p + c.size), bits);
          return py::bytes(reinterpret_cast<const char*>(packed.data()), packed.size());
        }, py::arg("codes"), py::arg("bits"),
        "The low `bits` bits of each code (a contiguous uint64 buffer), densely packed little-endian (bytes).");
  m.def("unpack_bits", [](const py::buffer& data, int bits, size_t count) {
          py::buffer_info d = data.request();
          if (d.itemsize != 1 || d.ndim != 1 || d.strides[0] != 1)
            throw py::value_error("unpack_bits: data must be a contiguous 1-D byte buffer");
          if (bits < 1 || bits > 64) throw py::value_error(fmt::format("unpack_bits: bits must be 1 to 64, got {}", bits));
          auto* p = static_cast<const uint8_t*>(d.ptr);
          if (count * size_t(bits) > size_t(d.size) * 8)
            throw py::value_error(fmt::format("unpack_bits: {} bytes hold fewer than {} codes of {} bits", d.size,
                                              count, bits));
          auto codes = unpack_bits(std::vector<uint8_t>(p, p + d.size), bits, int64_t(count));
          return py::bytes(reinterpret_cast<const char*>(codes.data()), codes.size() * 8);
        }, py::arg("data"), py::arg("bits"), py::arg("count"),
        "The first `count` codes of `bits` bits in densely packed little-endian data, as uint64 (bytes).");

  // --- expressions ------------------------------------------------------------------------------
  py::class_<Expr> expr(m, "Expr",
                       "A scalar kernel expression: a parameter, self.blockIdx.x, a loop variable, or arithmetic on "
                       "them.\n\nOperators (+ - * / // % & | ^ << >>, comparisons, unary - and ~) build new "
                       "expressions with a Python number or another Expr; // and % round toward negative infinity, "
                       "/ of integers truncates. Its value is only known when the kernel runs: Python's and, or, not, "
                       "bool() and an if outside the kernel body's own statements cannot use it (use &, |, ~, "
                       "tilus.logical_and / logical_or / logical_not, tilus.select). Expr(x) makes one of a Python "
                       "number (bool: bool, int: int32 or int64, float: float32).");
  expr.def(py::init(&to_expr))
      .def_property_readonly("dtype", &Expr::dtype, "The data type of the expression's value.")
      .def("is_const", &Expr::is_const, "Whether the expression is a constant.")
      .def("int_value", &Expr::int_value, "The value of an integer constant (see is_const).")
      .def("__repr__", [](const Expr& e) { return to_string(e); })
      .def("__bool__", [](const Expr& e) -> bool {
        throw CompileError(fmt::format(
            "the value of '{}' is only known when the kernel runs: Python's `and`, `or`, `not` and "
            "comparisons chains cannot use it (use &, |, ~ or tilus.logical_and / logical_or), nor can an `if` or "
            "`while` outside the kernel body's own statements (in a helper function or a lambda: use "
            "tilus.select(cond, a, b), or move the branch into __call__)",
            to_string(e)));
      })
      .def("__neg__", [](const Expr& a) { return -a; })
      .def("__invert__", [](const Expr& a) { return a.dtype().is_bool() ? !a : ~a; })
      .def("__hash__", [](const Expr& e) { return std::hash<const void*>()(e.get()); });
  def_binary(expr, "__lt__", nullptr, [](const Expr& a, const Expr& b) { return a < b; });
  def_binary(expr, "__le__", nullptr, [](const Expr& a, const Expr& b) { return a <= b; });
  def_binary(expr, "__gt__", nullptr, [](const Expr& a, const Expr& b) { return a > b; });
  def_binary(expr, "__ge__", nullptr, [](const Expr& a, const Expr& b) { return a >= b; });
  def_binary(expr, "__eq__", nullptr, [](const Expr& a, const Expr& b) { return a == b; });
  def_binary(expr, "__ne__", nullptr, [](const Expr& a, const Expr& b) { return a != b; });
  def_binary(expr, "__add__", "__radd__", [](const Expr& a, const Expr& b) { return a + b; });
  def_binary(expr, "__sub__", "__rsub__", [](const Expr& a, const Expr& b) { return a - b; });
  def_binary(expr, "__mul__", "__rmul__", [](const Expr& a, const Expr& b) { return a * b; });
  def_binary(expr, "__truediv__", "__rtruediv__", [](const Expr& a, const Expr& b) { return a / b; });
  def_binary(expr, "__floordiv__", "__rfloordiv__", [](const Expr& a, const Expr& b) { return floor_div(a, b); });
  def_binary(expr, "__mod__", "__rmod__", [](const Expr& a, const Expr& b) { return floor_mod(a, b); });
  def_binary(expr, "__and__", "__rand__", [](const Expr& a, const Expr& b) {
    return a.dtype().is_bool() && b.dtype().is_bool() ? logical_and(a, b) : a & b;
  });
  def_binary(expr, "__or__", "__ror__", [](const Expr& a, const Expr& b) {
    return a.dtype().is_bool() && b.dtype().is_bool() ? logical_or(a, b) : a | b;
  });
  def_binary(expr, "__xor__", "__rxor__", [](const Expr& a, const Expr& b) { return a ^ b; });
  def_binary(expr, "__lshift__", "__rlshift__", [](const Expr& a, const Expr& b) { return a << b; });
  def_binary(expr, "__rshift__", "__rrshift__", [](const Expr& a, const Expr& b) { return a >> b; });

  py::class_<Var, Expr>(m, "Var", "A named scalar variable of a kernel: a parameter, a loop variable, a let or a "
                                  "declared (mutable) variable.")
      .def_property_readonly("name", &Var::name, "The variable's name.");

  m.def("const", [](const py::object& v, const DataType& t) { return make_const(t, v.cast<double>()); },
        "A constant expression of a number and a data type.");
  m.def("cast", [](const py::object& v, const DataType& t) { return cast(to_expr(v), t); },
        "A scalar (a Python number or an Expr) converted to a data type (tilus.cast checks its operands first).");
  m.def("cdiv", [](const py::object& a, const py::object& b) { return cdiv(to_expr(a), to_expr(b)); },
        "ceil(a / b) of non-negative integer scalars, as an Expr (tilus.cdiv also folds two Python ints).");
  m.def("min", [](const py::object& a, const py::object& b) { return min(to_expr(a), to_expr(b)); },
        "The smaller of two scalars, as an Expr (tilus.min also folds two Python numbers).");
  m.def("max", [](const py::object& a, const py::object& b) { return max(to_expr(a), to_expr(b)); },
        "The larger of two scalars, as an Expr (tilus.max also folds two Python numbers).");
  m.def("select", [](const py::object& c, const py::object& a, const py::object& b) {
    return select(to_expr(c), to_expr(a), to_expr(b));
  }, "a where the bool scalar c holds, else b, as an Expr (tilus.select checks its operands first).");
  m.def("logical_and", [](const py::object& a, const py::object& b) { return logical_and(to_expr(a), to_expr(b)); },
        "a and b of bool scalars, as an Expr.");
  m.def("logical_or", [](const py::object& a, const py::object& b) { return logical_or(to_expr(a), to_expr(b)); },
        "a or b of bool scalars, as an Expr.");
  m.def("logical_not", [](const py::object& a) { return !to_expr(a); }, "not a of a bool scalar, as an Expr.");
  m.def("call", [](const std::string& name, const py::iterable& args) { return call(name, to_exprs(args)); },
        "A call of the named builtin math function (\"exp\", \"sqrt\", ...) on scalar arguments, as an Expr.");
  m.def("block_idx", [](int d) { return Expr(builtin::block_idx(d)); },
        "The block index along grid dim d (0, 1, 2): self.blockIdx.x / .y / .z.");
  m.def("cluster_block_idx", [](int d) { return Expr(builtin::cluster_block_idx(d)); },
        "The block's index in its cluster along dim d (0, 1, 2): self.cluster.blockIdx.x / .y / .z.");
  m.def("cluster_dim", [](int d) { return Expr(builtin::cluster_dim(d)); },
        "The cluster's extent along dim d (0, 1, 2), the kernel's attrs.cluster_blocks: self.cluster.clusterDim.");
  m.def("cluster_block_rank", []() { return Expr(builtin::cluster_block_rank()); },
        "The block's rank in its cluster: self.cluster.blockRank.");

  // --- tensors ----------------------------------------------------------------------------------
  py::class_<Tensor>(m, "Tensor",
                     "A tensor of the tile IR (global, shared or register); the .t of tilus.GlobalTensor, "
                     "SharedTensor and RegisterTensor.")
      .def_property_readonly("dtype", &Tensor::dtype, "The element data type.")
      .def_property_readonly("rank", &Tensor::rank, "The number of dims.")
      .def_property_readonly("scope", [](const Tensor& t) { return std::string(to_string(t.scope())); },
                             "The memory scope: \"global\", \"shared\" or \"register\".")
      .def_property_readonly("shape", [](const Tensor& t) {
        py::list out;
        for (auto& e : t.shape()) {
          if (e.is_int_const()) out.append(e.int_value());
          else out.append(e);
        }
        return out;
      }, "The extents: ints, or Exprs for dynamic dims.")
      .def("type_str", &Tensor::type_str, "The tensor's type as messages print it (scope, dtype, shape).")
      .def("same_as", &Tensor::same_as, "Whether both handles are the same tensor.")
      .def_property_readonly("id", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.get()); },
                             "A number that identifies the tensor (equal for handles of the same tensor).")
      .def("__repr__", &Tensor::type_str);

  py::class_<SharedLayout>(m, "SharedLayout",
                           "A shared-memory layout: element offset = swizzle(sum(index[i] * strides[i])), the "
                           "swizzle offset ^ ((offset >> shift) & (((1 << bits) - 1) << base)).")
      .def(py::init([](std::vector<int64_t> shape, std::vector<int64_t> strides, std::tuple<int, int, int> swizzle) {
             auto [bits, base, shift] = swizzle;
             if (bits < 0 || base < 0 || shift < 0 || (bits > 0 && shift < bits))
               throw CompileError(fmt::format("SharedLayout: swizzle (bits={}, base={}, shift={}) needs non-negative "
                                              "fields and shift >= bits",
                                              bits, base, shift));
             try {
               return SharedLayout(std::move(shape), std::move(strides), Swizzle{bits, base, shift});
             } catch (const InternalError& e) {  // the caller's numbers, not a bug of tilus
               throw CompileError(std::string("SharedLayout: ") + e.what());
             }
           }),
           py::arg("shape"), py::arg("strides"), py::arg("swizzle") = std::tuple<int, int, int>{0, 0, 0},
           "A layout from its shape, element strides and swizzle (bits, base, shift); (0, 0, 0): none.")
      .def_static("row_major", &SharedLayout::row_major, py::arg("shape"), "The row-major layout (the last dim contiguous).")
      .def_static("column_major", &SharedLayout::column_major, py::arg("shape"),
                  "The column-major layout (the first dim contiguous).")
      .def_static("row_major_swizzled", &SharedLayout::row_major_swizzled, py::arg("shape"), py::arg("elem_bytes"),
                  "Row-major with the XOR swizzle layout inference gives such a tile (NVIDIA Tilus's "
                  "shared_row_major_swizzle for rows of up to 128 bytes).")
      .def_property_readonly("shape", &SharedLayout::shape, "The tile shape.")
      .def_property_readonly("strides", &SharedLayout::strides, "The element stride of every dim (before the swizzle).")
      .def_property_readonly("swizzle", [](const SharedLayout& l) {
        return std::make_tuple(l.swizzle().bits, l.swizzle().base, l.swizzle().shift);
      }, "(bits, base, shift); (0, 0, 0): none.")
      .def_property_readonly("size", &SharedLayout::storage_elements,
                             "The elements of storage it spans (max offset + 1, rounded up to the swizzle period).")
      .def("offset", [](const SharedLayout& l, const std::vector<int64_t>& index) {
             if (index.size() != l.shape().size())
               throw CompileError(fmt::format("SharedLayout.offset: {} indices for a rank-{} layout", index.size(),
                                              l.shape().size()));
             return l.offset(index);
           }, py::arg("index"), "The element offset of `index`.")
      .def("__eq__", [](const SharedLayout& a, const SharedLayout& b) { return a == b; })
      .def("__repr__", &SharedLayout::str);

  py::class_<RegisterLayout>(m, "RegisterLayout", "A register layout: which thread holds which tile element in which slot.")
      .def(py::init([](std::vector<int64_t> shape, std::vector<int64_t> mode_shape, std::vector<int> spatial,
                       std::vector<int> local) {
             try {
               return RegisterLayout(std::move(shape), std::move(mode_shape), std::move(spatial), std::move(local));
             } catch (const InternalError& e) {  // the caller's modes, not a bug of tilus
               throw CompileError(std::string("RegisterLayout: ") + e.what());
             }
           }),
           py::arg("shape"), py::arg("mode_shape"), py::arg("spatial_modes"), py::arg("local_modes"),
           "A layout from its modes (the printed form): each dim split into modes, major to minor; the spatial "
           "modes (a negative entry -n: n threads holding replicas) and the local modes, major to minor.")
      .def_property_readonly("mode_shape", &RegisterLayout::mode_shape, "The modes of every dim, dims in order.")
      .def_property_readonly("spatial_modes", &RegisterLayout::spatial_modes,
                             "The modes across threads, major to minor (-n: n replicating threads).")
      .def_property_readonly("local_modes", &RegisterLayout::local_modes, "The modes across a thread's slots.")
      .def("__repr__", &RegisterLayout::str)
      .def_property_readonly("shape", &RegisterLayout::shape, "The tile shape.")
      .def_property_readonly("num_threads", &RegisterLayout::num_threads, "The number of threads that hold the tile.")
      .def_property_readonly("local_size", &RegisterLayout::local_size, "The number of slots (registers) per thread.")
      .def_property_readonly("size", [](const RegisterLayout& l) {
             int64_t n = 1;
             for (int64_t d : l.shape()) n *= d;
             return n;
           }, "The number of tile elements (the product of the shape), as NVIDIA Tilus's RegisterLayout.size.")
      .def("map", &RegisterLayout::map, py::arg("thread"), py::arg("slot"),
           "The tile index that `thread` holds in `slot`.")
      .def("owners", &RegisterLayout::owners, py::arg("index"), "Every (thread, slot) that holds tile `index`.")
      .def("__mul__", [](const RegisterLayout& a, const RegisterLayout& b) { return a * b; })
      .def("permute", &RegisterLayout::permute, py::arg("dims"), "The layout with its dims reordered (dims[i] becomes dim i).")
      .def("reshape", [](const RegisterLayout& l, const std::vector<int64_t>& shape) {
             auto r = l.reshape(shape);
             if (!r) throw CompileError(fmt::format("cannot reshape {} to {}: the new dims do not align with its modes",
                                                    l.str(), shape_str(shape)));
             return *r;
           }, py::arg("shape"), "The layout of the same elements under another shape (CompileError when the dims do "
           "not align with its modes).")
      .def("reduce_dims", &RegisterLayout::reduce, py::arg("dims"), py::arg("keepdim"),
           "The layout of a reduction over `dims`: the threads that held those dims hold replicas.")
      .def(py::self == py::self);
  m.def("local", &local,
        "A register layout in which one thread holds the whole tile of this shape, slots in row-major order: "
        "local([2, 4]).\n\nCompose layouts with *: spatial([8, 4]) * local([1, 2]).");
  m.def("spatial", &spatial,
        "A register layout of one element per thread over a tile of this shape, threads in row-major order: "
        "spatial([8, 4]) (32 threads).");
  m.def("column_local", &column_local, "local(shape) with its slots in column-major order.");
  m.def("column_spatial", &column_spatial, "spatial(shape) with its threads in column-major order.");
  m.def("replicated", &replicated, "A register layout of num_threads threads that hold the same elements.");
  m.def("compose", [](const RegisterLayout& a, const RegisterLayout& b) { return a * b; },
        "The Kronecker composition a * b: b repeated in the pattern of a.");
  m.def("dot_plans", [](const DataType& ab, const DataType& c, int64_t m, int64_t n, int64_t k, int64_t threads) {
          py::list out;
          for (const DotPlan& p : dot_plans(ab, c, m, n, k, threads))
            out.append(py::dict(py::arg("op") = to_string(p.op), py::arg("warps_m") = p.tiling.warps_m,
                                py::arg("warps_n") = p.tiling.warps_n, py::arg("a") = p.a, py::arg("b") = p.b,
                                py::arg("c") = p.c));
          return out;
        },
        "The plans layout inference may give a dot of a [m, k] x [k, n] tile on `threads` threads (the default "
        "first): dicts of op, warps_m, warps_n and the a, b, c layouts.");
  m.def("default_register_layout", &default_register_layout, py::arg("shape"), py::arg("dtype"), py::arg("threads"),
        py::arg("vector") = 0, "The layout layout inference gives a free register tensor.");

  py::class_<Program>(m, "Program", "A tile IR program (tilus.trace returns the traced one); str() prints it.")
      .def("__str__", [](const Program& p) { return print(p); })
      .def("text", [](const Program& p, bool locations) {
        PrintOptions o;
        o.locations = locations;
        return print(p, o);
      }, py::arg("locations") = false, "The printed IR; locations=True adds each instruction's file:line.")
      .def_property_readonly("kernel_name", [](const Program& p) { return p.kernels.at(0).name; },
                             "The name of the program's kernel.")
      .def("specialize", &specialize,
           "Hands specialization facts ({parameter index: divisor or alignment in bytes}) to the kernel, in place.")
      .def("lowered", [](const Program& p, const std::string& arch) {
        PipelineOptions o;
        o.target = arch == "cpu" ? Target::cpu() : Target::from_arch(arch);
        return run_pipeline(p, o);
      }, "The program after the pass pipeline for a target: a GPU arch (\"sm_80\", \"sm_90a\", ...) or \"cpu\".");

  // --- the tracer -------------------------------------------------------------------------------
  using L = const py::tuple&;
  py::class_<Builder>(m, "Builder",
                      "The tracer of one kernel (internal): tilus.Script's instruction methods record the kernel's "
                      "instructions through it; each method takes the user's (file, line).")
      .def(py::init([](const std::string& name, L loc) { return std::make_unique<Builder>(name, loc_of(loc)); }))
      .def("add_param", [](Builder& b, const std::string& n, DataType t, L loc) { return b.add_param(n, t, loc_of(loc)); })
      .def("add_constant", &Builder::add_constant)
      .def("set_blocks", [](Builder& b, const py::iterable& xs, L loc) { b.set_blocks(to_exprs(xs), loc_of(loc)); })
      .def("set_warps", [](Builder& b, int64_t w, L loc) { b.set_warps(w, loc_of(loc)); })
      .def("set_cluster", [](Builder& b, std::vector<int64_t> c, L loc) { b.set_cluster(c, loc_of(loc)); })
      .def("finish", &Builder::finish)
      .def("depth", &Builder::depth)
      .def("scope_path", &Builder::scope_path)
      .def("begin_for", [](Builder& b, const std::string& name, const py::object& begin, const py::object& end,
                           const py::object& step, int64_t unroll, L loc) {
        Unroll u = unroll < 0 ? Unroll::all() : unroll == 0 ? Unroll::none() : Unroll::by(unroll);
        return b.begin_for(name, to_expr(begin), to_expr(end), to_expr(step), u, loc_of(loc));
      })
      .def("end_for", &Builder::end_for)
      .def("begin_if", [](Builder& b, const py::object& c, L loc) { b.begin_if(to_expr(c), loc_of(loc)); })
      .def("end_if", &Builder::end_if)
      .def("begin_else", [](Builder& b, L loc) { b.begin_else(loc_of(loc)); })
      .def("end_else", &Builder::end_else)
      .def("begin_while", [](Builder& b, const py::object& c, L loc) { b.begin_while(to_expr(c), loc_of(loc)); })
      .def("end_while", &Builder::end_while)
      .def("emit_break", [](Builder& b, L loc, const std::string& what) { b.emit_break(loc_of(loc), what.c_str()); },
           py::arg("loc"), py::arg("what") = "break")
      .def("emit_continue", [](Builder& b, L loc) { b.emit_continue(loc_of(loc)); })
      .def("emit_return", [](Builder& b, L loc) { b.emit_return(loc_of(loc)); })
      .def("begin_thread_group", [](Builder& b, const std::string& kind, int64_t begin, int64_t n, L loc) {
        ThreadGroupKind k = kind == "single_thread" ? ThreadGroupKind::SingleThread
                            : kind == "single_warp" ? ThreadGroupKind::SingleWarp
                            : kind == "warp_group"  ? ThreadGroupKind::WarpGroup
                                                    : ThreadGroupKind::ThreadGroup;
        b.begin_thread_group(k, begin, n, loc_of(loc));
      })
      .def("end_thread_group", &Builder::end_thread_group)
      .def("let", [](Builder& b, const std::string& n, const py::object& v, L loc) { return b.let(n, to_expr(v), loc_of(loc)); })
      .def("declare", [](Builder& b, const std::string& n, DataType t, const py::object& v, L loc) {
        return b.declare(n, t, to_expr(v), loc_of(loc));
      })
      .def("assign", [](Builder& b, const Var& v, const py::object& x, L loc) { b.assign(v, to_expr(x), loc_of(loc)); })
      .def("declare_outside", [](Builder& b, const std::string& n, DataType t, const py::object& v, L loc) {
        return b.declare_outside(n, t, v.is_none() ? Expr() : to_expr(v), loc_of(loc));
      })
      .def("register_tensor_outside", [](Builder& b, DataType t, std::vector<int64_t> shape, L loc, const std::string& n) {
        return b.register_tensor_outside(t, std::move(shape), loc_of(loc), n);
      })
      .def("name", &Builder::name)
      .def("global_view", [](Builder& b, const py::object& ptr, DataType t, const py::iterable& shape,
                             const py::iterable& strides, L loc, const std::string& name) {
        return b.global_view(to_expr(ptr), t, to_exprs(shape), to_exprs(strides), loc_of(loc), name);
      })
      .def("global_tensor", [](Builder& b, DataType t, const py::iterable& shape, bool requires_clean, L loc,
                               const std::string& name) {
        return b.global_tensor(t, to_exprs(shape), requires_clean, loc_of(loc), name);
      })
      .def("item_ptr", [](Builder& b, const Tensor& t, const py::iterable& indices, L loc) {
        return b.item_ptr(t, to_exprs(indices), loc_of(loc));
      })
      .def("semaphore", [](Builder& b, bool lock, const py::object& semaphore, const py::object& value, L loc) {
        b.semaphore(lock ? SemaphoreOp::Lock : SemaphoreOp::Release, to_expr(semaphore), to_expr(value), loc_of(loc));
      })
      .def("shared_tensor", [](Builder& b, DataType t, std::vector<int64_t> shape, L loc) {
        return b.shared_tensor(t, std::move(shape), loc_of(loc));
      })
      .def("free_shared", [](Builder& b, const Tensor& t, L loc) { b.free_shared(t, loc_of(loc)); })
      .def("register_tensor", [](Builder& b, DataType t, std::vector<int64_t> shape, const py::object& init, L loc) {
        if (init.is_none()) return b.register_tensor(t, std::move(shape), Expr(), loc_of(loc));
        if (py::isinstance<py::function>(init)) {
          py::function f = init;
          return b.register_tensor(t, std::move(shape), [f](const std::vector<Var>& axes) {
            py::list vs;
            for (auto& v : axes) vs.append(v);
            return to_expr(f(*vs));
          }, loc_of(loc));
        }
        return b.register_tensor(t, std::move(shape), to_expr(init), loc_of(loc));
      })
      .def("index_shared", [](Builder& b, const Tensor& t, const py::iterable& idx, L loc) {
        return b.index_shared(t, to_exprs(idx), loc_of(loc));
      })
      .def("load_global", [](Builder& b, const Tensor& src, const py::iterable& offsets, std::vector<int64_t> shape,
                             std::vector<int> dims, L loc) {
        return b.load_global(src, to_exprs(offsets), std::move(shape), std::move(dims), loc_of(loc));
      })
      .def("store_global", [](Builder& b, const Tensor& dst, const Tensor& src, const py::iterable& offsets,
                              std::vector<int> dims, L loc) {
        b.store_global(dst, src, to_exprs(offsets), std::move(dims), loc_of(loc));
      })
      .def("item", [](Builder& b, const Tensor& x, L loc) { return Expr(b.item(x, loc_of(loc))); })
      .def("atomic", [](Builder& b, const std::string& op, const Tensor& dst, const Tensor& values,
                        std::optional<Tensor> compare, const py::iterable& offsets, std::vector<int> dims,
                        const std::string& sem, const std::string& scope, L loc) {
        static const std::map<std::string, AtomicOp> ops = {{"add", AtomicOp::Add}, {"sub", AtomicOp::Sub},
                                                            {"min", AtomicOp::Min}, {"max", AtomicOp::Max},
                                                            {"exch", AtomicOp::Exch}, {"cas", AtomicOp::Cas}};
        return b.atomic(ops.at(op), dst, values, compare ? *compare : Tensor(), to_exprs(offsets), std::move(dims), sem,
                        scope, loc_of(loc));
      })
      .def("atomic_scatter", [](Builder& b, const std::string& op, bool store, const Tensor& dst, int dim,
                                const Tensor& indices, const Tensor& values, const std::string& sem,
                                const std::string& scope, L loc) {
        static const std::map<std::string, AtomicOp> ops = {{"add", AtomicOp::Add}, {"sub", AtomicOp::Sub},
                                                            {"min", AtomicOp::Min}, {"max", AtomicOp::Max},
                                                            {"exch", AtomicOp::Exch}};
        return b.atomic_scatter(ops.at(op), store, dst, dim, indices, values, sem, scope, loc_of(loc));
      })
      .def("load_shared", [](Builder& b, const Tensor& src, L loc) { return b.load_shared(src, loc_of(loc)); })
      .def("store_shared", [](Builder& b, const Tensor& dst, const Tensor& src, L loc) { b.store_shared(dst, src, loc_of(loc)); })
      .def("copy_async", [](Builder& b, const Tensor& src, const Tensor& dst, const py::iterable& offsets,
                            std::vector<int> dims, std::optional<std::string> evict, bool check_bounds, L loc) {
        b.copy_async(src, dst, to_exprs(offsets), std::move(dims), evict, check_bounds, loc_of(loc));
      })
      .def("copy_async_commit_group", [](Builder& b, L loc) { b.copy_async_commit_group(loc_of(loc)); })
      .def("copy_async_wait_group", [](Builder& b, int64_t n, L loc) { b.copy_async_wait_group(n, loc_of(loc)); })
      .def("copy_async_wait_all", [](Builder& b, L loc) { b.copy_async_wait_all(loc_of(loc)); })
      .def("copy", [](Builder& b, const Tensor& src, const py::iterable& src_offsets, const py::iterable& src_extents,
                      const Tensor& dst, const py::iterable& dst_offsets, const py::iterable& dst_extents,
                      std::optional<int64_t> coalesced_width, bool disable_tma, std::optional<std::string> eviction_policy,
                      std::map<std::string, std::string> annotations, std::optional<RegisterLayout> loop_layout,
                      const std::string& api, std::optional<Tensor> barrier, L loc) {
        CopyArgs args;
        args.coalesced_width = coalesced_width;
        args.disable_tma = disable_tma;
        args.eviction_policy = std::move(eviction_policy);
        args.annotations = std::move(annotations);
        if (loop_layout) args.loop_layout = *loop_layout;
        if (api == "async_copy") args.api = CopyApi::AsyncCopy;
        else if (api == "tma_copy") args.api = CopyApi::TmaCopy;
        if (barrier) args.barrier = *barrier;
        b.copy(CopyRegion{src, to_exprs(src_offsets), to_exprs(src_extents), std::nullopt},
               CopyRegion{dst, to_exprs(dst_offsets), to_exprs(dst_extents), std::nullopt}, args, loc_of(loc));
      })
      .def("mbarrier_alloc", [](Builder& b, const py::iterable& counts, L loc) {
        return b.mbarrier_alloc(to_exprs(counts), loc_of(loc));
      })
      .def("mbarrier", [](Builder& b, const std::string& op, const Tensor& barrier, const py::object& value,
                          const std::string& sem, const std::string& scope, const py::object& cta_id, L loc) {
        static const std::map<std::string, MbarrierOp> ops{{"arrive", MbarrierOp::Arrive},
                                                           {"arrive_and_expect_tx", MbarrierOp::ArriveExpectTx},
                                                           {"expect_tx", MbarrierOp::ExpectTx},
                                                           {"wait", MbarrierOp::Wait},
                                                           {"cp_async_arrive", MbarrierOp::CpAsyncArrive}};
        b.mbarrier(ops.at(op), barrier, to_expr(value), sem, scope, cta_id.is_none() ? Expr() : to_expr(cta_id),
                   loc_of(loc));
      })
      .def("defined", [](Builder& b, const std::string& name, const py::dict& tensors, const py::dict& scalars,
                         const py::dict& attrs, L loc) {
        std::vector<std::pair<std::string, Tensor>> ts;
        std::vector<std::pair<std::string, Expr>> ss;
        std::vector<std::pair<std::string, std::string>> as;
        for (auto [k, v] : tensors) ts.emplace_back(k.cast<std::string>(), v.cast<Tensor>());
        for (auto [k, v] : scalars)
          if (!v.is_none()) ss.emplace_back(k.cast<std::string>(), to_expr(v));
        for (auto [k, v] : attrs) as.emplace_back(k.cast<std::string>(), py::str(v).cast<std::string>());
        b.defined(name, ts, ss, as, loc_of(loc));
      })
      .def("mbarrier_wait_tensor", [](Builder& b, const Tensor& barrier, const Tensor& phase, const std::string& sem,
                                      const std::string& scope, L loc) {
        b.mbarrier_wait(barrier, phase, sem, scope, loc_of(loc));
      })
      .def("tma_copy_tile", [](Builder& b, const Tensor& global, const Tensor& shared, const py::iterable& offsets,
                               std::vector<int> dims, std::optional<Tensor> barrier, bool load, L loc,
                               const py::object& multicast_mask, const py::object& cache_policy, int64_t cta_group,
                               const py::object& barrier_rank) {
        b.tma_copy_tile(global, shared, to_exprs(offsets), std::move(dims), barrier ? *barrier : Tensor(), load,
                        loc_of(loc), multicast_mask.is_none() ? Expr() : to_expr(multicast_mask),
                        cache_policy.is_none() ? Expr() : to_expr(cache_policy), cta_group,
                        barrier_rank.is_none() ? Expr() : to_expr(barrier_rank));
      }, py::arg("global_"), py::arg("shared"), py::arg("offsets"), py::arg("dims"), py::arg("barrier"),
         py::arg("load"), py::arg("loc"), py::arg("multicast_mask") = py::none(), py::arg("cache_policy") = py::none(),
         py::arg("cta_group") = 1, py::arg("barrier_rank") = py::none())
      .def("c2d_im2col", [](Builder& b, const Tensor& img, const Tensor& col, const py::object& nhw_step,
                            const py::object& c_step, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad,
                            std::optional<std::string> eviction_policy, L loc, std::optional<Tensor> barrier) {
        b.c2d_im2col(img, col, to_expr(nhw_step), to_expr(c_step), kernel, stride, dilation, pad, eviction_policy,
                     loc_of(loc), barrier ? *barrier : Tensor());
      })
      .def("tma_commit_group", [](Builder& b, L loc) { b.tma_commit_group(loc_of(loc)); })
      .def("tma_wait_group", [](Builder& b, int64_t n, bool read, L loc) { b.tma_wait_group(n, read, loc_of(loc)); })
      .def("fence_proxy_async", [](Builder& b, const std::string& space, L loc) { b.fence_proxy_async(space, loc_of(loc)); })
      .def("tcgen05_alloc", [](Builder& b, const DataType& dtype, std::vector<int64_t> shape, int64_t cta_group, L loc) {
        return b.tcgen05_alloc(dtype, std::move(shape), cta_group, loc_of(loc));
      })
      .def("tcgen05_slice", [](Builder& b, const Tensor& t, const py::iterable& offsets, std::vector<int> dims,
                               std::vector<int64_t> shape, L loc) {
        return b.tcgen05_slice(t, to_exprs(offsets), std::move(dims), std::move(shape), loc_of(loc));
      })
      .def("tcgen05_index", [](Builder& b, const Tensor& t, const py::list& indices, L loc) {
        std::vector<std::optional<Expr>> idx;
        for (auto i : indices) idx.push_back(i.is_none() ? std::nullopt : std::optional<Expr>(to_expr(i)));
        return b.tcgen05_index(t, std::move(idx), loc_of(loc));
      }, "t[i, ...] of a tensor-memory tensor: None keeps a dim whole (t_acc[:, stage, :] is [None, stage, None]).")
      .def("tcgen05_view", [](Builder& b, const Tensor& t, const DataType& dtype, std::vector<int64_t> shape, L loc) {
        return b.tcgen05_view(t, dtype, std::move(shape), loc_of(loc));
      })
      .def("tcgen05_load", [](Builder& b, const Tensor& t, L loc) { return b.tcgen05_load(t, loc_of(loc)); })
      .def("clc_query_response", [](Builder& b, const Tensor& response, L loc) {
        auto v = b.clc_query_response(response, loc_of(loc));
        return py::make_tuple(Expr(v[0]), Expr(v[1]), Expr(v[2]), Expr(v[3]));
      })
      .def("group_begin", &Builder::group_begin, "The first thread (in the block) of the innermost thread group.")
      .def("wgmma_fence", [](Builder& b, L loc) { b.wgmma_fence(loc_of(loc)); })
      .def("wgmma_mma", [](Builder& b, const Tensor& a, const Tensor& bt, const Tensor& d, L loc) {
        b.wgmma_mma(a, bt, d, loc_of(loc));
      })
      .def("wgmma_commit_group", [](Builder& b, L loc) { b.wgmma_commit_group(loc_of(loc)); })
      .def("wgmma_wait_group", [](Builder& b, int64_t n, L loc) { b.wgmma_wait_group(n, loc_of(loc)); })
      .def("reshape_shared", [](Builder& b, const Tensor& t, std::vector<int64_t> shape, L loc) {
        return b.reshape_shared(t, std::move(shape), loc_of(loc));
      })
      .def("slice_shared", [](Builder& b, const Tensor& t, const py::iterable& offsets, std::vector<int> dims,
                              std::vector<int64_t> shape, L loc) {
        return b.slice_shared(t, to_exprs(offsets), std::move(dims), std::move(shape), loc_of(loc));
      })
      .def("permute_shared", [](Builder& b, const Tensor& t, const std::vector<int>& dims, L loc) {
        return b.permute_shared(t, dims, loc_of(loc));
      })
      .def("dot", [](Builder& b, const Tensor& x, const Tensor& y, std::optional<Tensor> c, std::optional<DataType> acc_dtype,
                     L loc) { return c ? b.dot(x, y, *c, loc_of(loc)) : b.dot(x, y, acc_dtype, loc_of(loc)); })
      .def("cast", [](Builder& b, const Tensor& x, DataType t, L loc) { return b.cast(x, t, loc_of(loc)); })
      .def("view", [](Builder& b, const Tensor& x, std::optional<DataType> t, std::optional<RegisterLayout> l, L loc) {
        return b.view(x, t, l ? *l : RegisterLayout(), loc_of(loc));
      })
      .def("reshape", [](Builder& b, const Tensor& x, std::vector<int64_t> s, L loc) { return b.reshape(x, std::move(s), loc_of(loc)); })
      .def("squeeze", [](Builder& b, const Tensor& x, std::vector<int> d, L loc) { return b.squeeze(x, std::move(d), loc_of(loc)); })
      .def("unsqueeze", [](Builder& b, const Tensor& x, std::vector<int> d, L loc) { return b.unsqueeze(x, std::move(d), loc_of(loc)); })
      .def("transpose", [](Builder& b, const Tensor& x, L loc) { return b.transpose(x, loc_of(loc)); })
      .def("repeat", [](Builder& b, const Tensor& x, std::vector<int64_t> r, L loc) { return b.repeat(x, std::move(r), loc_of(loc)); })
      .def("unary", [](Builder& b, const std::string& op, const Tensor& x, L loc) { return b.unary(op, x, loc_of(loc)); })
      .def("binary", [](Builder& b, const std::string& op, const py::object& x, const py::object& y, L loc) {
        static const std::map<std::string, BinaryOp> ops = {
            {"+", BinaryOp::Add},  {"-", BinaryOp::Sub},     {"*", BinaryOp::Mul},     {"/", BinaryOp::Div},
            {"%", BinaryOp::Mod},  {"//", BinaryOp::FloorDiv}, {"floor_mod", BinaryOp::FloorMod},
            {"&", BinaryOp::BitAnd}, {"|", BinaryOp::BitOr}, {"^", BinaryOp::BitXor}, {"<<", BinaryOp::Shl},
            {">>", BinaryOp::Shr}, {"<", BinaryOp::Lt},      {"<=", BinaryOp::Le},     {">", BinaryOp::Gt},
            {">=", BinaryOp::Ge},  {"==", BinaryOp::Eq},     {"!=", BinaryOp::Ne},     {"and", BinaryOp::And},
            {"or", BinaryOp::Or},  {"max", BinaryOp::Max},   {"min", BinaryOp::Min}};
        auto it = ops.find(op);
        if (it == ops.end()) throw InternalError("unknown binary operator " + op);
        Tensor a = py::isinstance<Tensor>(x) ? x.cast<Tensor>() : Tensor();
        Tensor c = py::isinstance<Tensor>(y) ? y.cast<Tensor>() : Tensor();
        return b.binary(it->second, a, a.defined() ? Expr() : to_expr(x), c, c.defined() ? Expr() : to_expr(y), loc_of(loc));
      })
      .def("where", [](Builder& b, const Tensor& cond, const py::object& x, const py::object& y, L loc) {
        Tensor a = py::isinstance<Tensor>(x) ? x.cast<Tensor>() : Tensor();
        Tensor c = py::isinstance<Tensor>(y) ? y.cast<Tensor>() : Tensor();
        return b.where(cond, a, a.defined() ? Expr() : to_expr(x), c, c.defined() ? Expr() : to_expr(y), loc_of(loc));
      })
      .def("clip", [](Builder& b, const Tensor& x, const py::object& lo, const py::object& hi, L loc) {
        return b.clip(x, to_expr(lo), to_expr(hi), loc_of(loc));
      })
      .def("reduce", [](Builder& b, const std::string& op, const Tensor& x, std::optional<std::vector<int>> dims,
                        bool keepdim, L loc) {
        ReduceOp r = op == "sum" ? ReduceOp::Sum : op == "max" ? ReduceOp::Max : op == "min" ? ReduceOp::Min
                     : op == "any" ? ReduceOp::Any : ReduceOp::All;
        return b.reduce(r, x, std::move(dims), keepdim, loc_of(loc));
      })
      .def("scan", [](Builder& b, const std::string& op, const Tensor& x, int dim, bool exclusive, L loc) {
        return b.scan(op, x, dim, exclusive, loc_of(loc));
      })
      .def("assign_tensor", [](Builder& b, const Tensor& d, const Tensor& s, L loc) { b.assign_tensor(d, s, loc_of(loc)); })
      .def("sync", [](Builder& b, L loc) { b.sync(loc_of(loc)); })
      .def("sync_threads", [](Builder& b, std::optional<int64_t> barrier_id, std::optional<int64_t> arrive_count, L loc) {
        b.sync_threads(barrier_id, arrive_count, loc_of(loc));
      })
      .def("sync_warp", [](Builder& b, const py::object& mask, L loc) {
        b.sync_warp(mask.is_none() ? Expr() : to_expr(mask), loc_of(loc));
      })
      .def("cluster_sync", [](Builder& b, L loc) { b.cluster_sync(loc_of(loc)); })
      .def("sync_grid", [](Builder& b, L loc) { b.sync_grid(loc_of(loc)); })
      .def("set_max_nreg", [](Builder& b, int64_t reg_count, bool is_inc, L loc) { b.set_max_nreg(reg_count, is_inc, loc_of(loc)); })
      .def("thread_index", [](Builder& b, const std::string& op, int64_t warp_size, int64_t warps_per_group,
                              int64_t thread_extent, L loc) {
        return b.thread_index(op, warp_size, warps_per_group, thread_extent, loc_of(loc));
      })
      .def("shuffle", [](Builder& b, const std::string& op, const Tensor& value, const py::object& lane,
                         const py::object& mask, int64_t width, L loc) {
        return b.shuffle(op, value, to_expr(lane), mask.is_none() ? Expr() : to_expr(mask), width, loc_of(loc));
      })
      .def("ldg", [](Builder& b, int64_t bits, const Tensor& src, const py::iterable& offsets, const py::iterable& extents,
                     const py::object& pred, L loc) {
        return b.ldg(bits, CopyRegion{src, to_exprs(offsets), to_exprs(extents), std::nullopt},
                     pred.is_none() ? Expr() : to_expr(pred), loc_of(loc));
      })
      .def("stg", [](Builder& b, int64_t bits, const Tensor& dst, const py::iterable& offsets, const py::iterable& extents,
                     const Tensor& value, const py::object& pred, L loc) {
        b.stg(bits, CopyRegion{dst, to_exprs(offsets), to_exprs(extents), std::nullopt}, value,
              pred.is_none() ? Expr() : to_expr(pred), loc_of(loc));
      })
      .def("printf", [](Builder& b, const std::string& f, const py::iterable& args, L loc) { b.printf(f, to_exprs(args), loc_of(loc)); })
      .def("assume", [](Builder& b, const py::object& c, L loc) { b.assume(to_expr(c), loc_of(loc)); })
      .def("annotate_layout", [](Builder& b, const Tensor& t, const RegisterLayout& l, L loc) { b.annotate_layout(t, l, loc_of(loc)); })
      .def("annotate_shared_layout", [](Builder& b, const Tensor& t, const SharedLayout& l, L loc) {
        b.annotate_shared_layout(t, l, loc_of(loc));
      });

  // --- compiling and launching ------------------------------------------------------------------
  py::class_<GpuKernel>(m, "GpuKernel",
                        "A compiled GPU kernel (Script.compiled returns one): its CUDA source, cubin, target arch "
                        "and ptxas's resource report.")
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
      // ptxas's report (-1: not reported): registers per thread, bytes per thread of the rest.
      .def_property_readonly("registers", [](const GpuKernel& k) { return k.launcher->kernel().resources.registers; },
                             "Registers per thread, from ptxas's report (-1: not reported).")
      .def_property_readonly("stack_frame_bytes",
                             [](const GpuKernel& k) { return k.launcher->kernel().resources.stack_frame_bytes; },
                             "Stack frame bytes per thread, from ptxas's report (-1: not reported).")
      .def_property_readonly("spill_store_bytes",
                             [](const GpuKernel& k) { return k.launcher->kernel().resources.spill_store_bytes; },
                             "Register spill store bytes per thread, from ptxas's report (-1: not reported).")
      .def_property_readonly("spill_load_bytes",
                             [](const GpuKernel& k) { return k.launcher->kernel().resources.spill_load_bytes; },
                             "Register spill load bytes per thread, from ptxas's report (-1: not reported).")
      .def_property_readonly("wgmma_serialized",
                             [](const GpuKernel& k) { return k.launcher->kernel().resources.wgmma_serialized; },
                             "ptxas's reason when it serialized the kernel's wgmma (each waits for the one "
                             "before), else \"\" (also \"\" when not reported).")
      .def("grid", [](const GpuKernel& k, const py::sequence& values) {
        return k.launcher->grid(to_args(k.launcher->kernel().source.params, values, {}));
      }, "The grid (blocks in x, y, z) a launch with these runtime arguments would use.");
  py::class_<TorchFastPath>(m, "TorchFastPath",
                            "The launch fast path of one Script instance for CUDA torch tensors (internal; "
                            "docs/python.md, \"Launch overhead\").")
      .def(py::init([](std::vector<int> kinds, std::vector<py::object> dtypes, py::object tensor_type,
                       py::object raw_stream) {
        return TorchFastPath{std::move(kinds), std::move(dtypes), std::move(tensor_type), std::move(raw_stream), {}, {}};
      }))
      .def("__call__", &TorchFastPath::call)
      .def_property_readonly("entry", &torch_fast_path_function,
                             "The same call as a METH_FASTCALL function without pybind11's dispatcher "
                             "(what Script.__call__ calls).")
      .def("add", [](TorchFastPath& f, py::object kernel, const py::sequence& values) {
        // The kernel compiled for these arguments, under the mask call() computes.
        GpuKernel& k = kernel.cast<GpuKernel&>();
        uint64_t mask = 0;
        for (auto& [index, d] : specialization_of(to_args(k.launcher->kernel().source.params, values, {})))
          mask |= uint64_t(1) << index;
        f.kernels[mask] = &k;
        f.keep.push_back(kernel);
      }, "Registers the GpuKernel compiled for these arguments, under the specialization mask __call__ computes.");
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
                        "A launch argument as the core takes it (internal: tilus/launch.py makes them of arrays).")
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
      .def_property_readonly("address", [](const KernelArg& a) { return uint64_t(a.ptr); }, "The array's address.");
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
