// The compiled kernels as tilus._C holds them (internal to python/src): a GPU kernel with its
// launcher, a CPU kernel, a kernel's signature, and a launch's arguments from Python values. The
// module binds them (bindings.cpp) and the launch fast path launches them (fast_path.cpp).
#pragma once

#include "bindings.h"

namespace tilus::py_detail {

// A call's runtime arguments as the general path checked them (FastPath.check_call): the core's
// KernelArgs, kept in C++ so the launch takes them as they are (no Python object per argument,
// no conversion back), and the specialization facts, made a Python dict only when a compile
// asks. A sequence for the front end's other readers (the tuner's key, FastPath.add): a pointer
// reads as its KernelArg, a scalar as its int or float.
struct ArgList {
  std::vector<KernelArg> args;
  std::map<int, int64_t> facts;

  py::object item(size_t i) const {
    const KernelArg& a = args.at(i);
    if (a.kind == KernelArg::Kind::Float) return py::float_(a.f);
    if (a.kind == KernelArg::Kind::Int) return py::int_(a.i);
    return py::cast(a);
  }
};

// A launch's argument list from Python values: KernelArgs (the front end's pointers), pointers
// as ints, scalars as int/float. An integer scalar outside int64 (what a KernelArg holds) is an
// ArgumentError naming `kernel` and the parameter, as check_arguments' are.
inline std::vector<KernelArg> to_args(const std::vector<KernelParam>& params, const py::sequence& values,
                                      const std::vector<int64_t>& extents, const std::string& kernel = "") {
  auto out_of_range = [&](size_t i, py::handle v) {
    std::string who = kernel.empty() ? fmt::format("argument {}", i) : fmt::format("kernel {}, argument {}", kernel, i);
    DataType t = i < params.size() ? params[i].dtype : dtypes::int64;
    if (i < params.size()) who += fmt::format(" ('{}': {})", params[i].name, params[i].type_name());
    std::string value = py::str(v).cast<std::string>();
    if (t == dtypes::uint64 && value[0] != '-')
      throw ArgumentError(fmt::format("{}: {} is 2**63 or more, which launches do not pass (integer arguments travel "
                                      "as int64)", who, value));
    throw ArgumentError(fmt::format("{}: {} is out of the range of {}", who, value, t.name()));
  };
  if (py::isinstance<ArgList>(values)) return values.cast<const ArgList&>().args;
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
      if (PyLong_Check(v.ptr())) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
        if (overflow) out_of_range(i, v);
        args.emplace_back(int64_t(x));
        continue;
      }
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
    if (py::isinstance<ArgList>(values))
      return launcher->launch(values.cast<const ArgList&>().args, reinterpret_cast<Stream>(stream));
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
    ArgList list{to_args(source.params, values, {}, source.name), {}};
    py::tuple r = check_list(list);
    return py::make_tuple(r[0], r[1], list.facts);
  }

  // The same for arguments already in C++ (FastPath.check_call), which it keeps:
  // (flags, backend); the facts stay in the ArgList until a compile asks for them.
  py::tuple check_list(ArgList& list) const {
    check_arguments(source, list.args);
    list.facts = specialization_of(list.args);
    return py::make_tuple(flags_of(list.args, list.facts), to_string(backend_for(source.name, list.args)));
  }

  static py::tuple flags_of(const std::vector<KernelArg>& args, const std::map<int, int64_t>& facts) {
    py::tuple flags(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      PyObject* f = args[i].kind == KernelArg::Kind::Float ? Py_None : facts.count(int(i)) ? Py_True : Py_False;
      Py_INCREF(f);
      PyTuple_SET_ITEM(flags.ptr(), Py_ssize_t(i), f);
    }
    return flags;
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

}  // namespace tilus::py_detail
