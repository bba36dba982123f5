// The launch fast path of Python calls (tilus._C.FastPath): docs/python.md, "Launch overhead".
// A call's key and its launch (its arrays read by array_readers.cpp), the path's METH_FASTCALL
// entry and the binding of tilus._C.FastPath.
#include "fast_path.h"

#include <vector>

namespace tilus::py_detail {

// A torch tensor's shape and strides (elements): what the shim read, else its shape and stride().
bool FastPath::torch_layout(const ArrayInfo& info, std::vector<int64_t>& shape, std::vector<int64_t>& strides) {
  static PyObject* s_stride = PyUnicode_InternFromString("stride");
  static PyObject* s_shape = PyUnicode_InternFromString("shape");
  if (info.torch_sizes) {
    shape.assign(info.torch_sizes, info.torch_sizes + info.torch_dim);
    strides.assign(info.torch_strides, info.torch_strides + info.torch_dim);
    return true;
  }
  PyObject* st = PyObject_CallMethodNoArgs(info.tensor, s_stride);
  PyObject* sh = PyObject_GetAttr(info.tensor, s_shape);
  bool ok = int_tuple(st, strides) && int_tuple(sh, shape);
  Py_XDECREF(st);
  Py_XDECREF(sh);
  PyErr_Clear();
  return ok;
}

// A torch tensor read by torch_array as the KernelArg of pointer parameter p: its address, memory,
// shape, byte strides and bytes; false when its shape or strides cannot be read.
bool FastPath::torch_kernel_arg(const ArrayInfo& info, const Param& p, KernelArg& k) {
  k = KernelArg::typed_pointer(DevicePtr(info.addr), p.dtype);
  k.memory = info.cuda ? KernelArg::Memory::Device : KernelArg::Memory::Host;
  if (!torch_layout(info, k.shape, k.byte_strides)) return false;
  int64_t elem = std::max<int64_t>(1, p.dtype.bits() / 8), count = 1;
  for (int64_t& st : k.byte_strides) st *= elem;
  for (int64_t sh : k.shape) count *= sh;
  k.bytes = count * elem;
  return true;
}

// Parameter index of a keyword argument's name; params.size() when none has it.
size_t FastPath::param_of(PyObject* name) const {
  size_t n = params.size();
  for (size_t i = 0; i < n; ++i)
    if (params[i].name_object.ptr() == name) return i;  // interned names: the usual case
  for (size_t i = 0; i < n; ++i)
    if (PyUnicode_Check(name) && PyUnicode_Compare(params[i].name_object.ptr(), name) == 0) return i;
  PyErr_Clear();
  return n;
}

// A keyword argument: stream= or a parameter's (argv[i]); false for anything else.
bool FastPath::keyword(PyObject* name, PyObject* value, PyObject** argv, bool& explicit_stream, uint64_t& stream) const {
  static PyObject* s_stream = PyUnicode_InternFromString("stream");
  if (name == s_stream || (PyUnicode_Check(name) && PyUnicode_Compare(name, s_stream) == 0)) {
    if (value == Py_None) return true;
    if (!stream_handle(value, stream)) return false;
    explicit_stream = true;
    return true;
  }
  size_t i = param_of(name);
  if (i == params.size() || argv[i]) return false;
  argv[i] = value;
  return true;
}

// A call as Python's (argument tuple, keyword dict or null).
bool FastPath::call(PyObject* args, PyObject* kwargs) {
  size_t n = params.size();
  if (!PyTuple_Check(args) || n > 64) return false;
  size_t given = size_t(PyTuple_GET_SIZE(args));
  if (given > n) return false;
  PyObject* argv[64];
  for (size_t i = 0; i < n; ++i) argv[i] = i < given ? PyTuple_GET_ITEM(args, Py_ssize_t(i)) : nullptr;
  bool explicit_stream = false;
  uint64_t stream = 0;
  if (kwargs && kwargs != Py_None) {
    if (!PyDict_Check(kwargs)) return false;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &key, &value))
      if (!keyword(key, value, argv, explicit_stream, stream)) return false;
  }
  return launch_bound(argv, explicit_stream, stream);
}

// A call in vectorcall form: `nargs` positional arguments, then one per name of `kwnames`.
bool FastPath::call_vector(PyObject* const* args, size_t nargs, PyObject* kwnames) {
  size_t n = params.size();
  if (nargs > n || n > 64) return false;
  PyObject* argv[64];
  for (size_t i = 0; i < n; ++i) argv[i] = i < nargs ? args[i] : nullptr;
  bool explicit_stream = false;
  uint64_t stream = 0;
  if (kwnames) {
    Py_ssize_t k = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t j = 0; j < k; ++j)
      if (!keyword(PyTuple_GET_ITEM(kwnames, j), args[nargs + size_t(j)], argv, explicit_stream, stream))
        return false;
  }
  return launch_bound(argv, explicit_stream, stream);
}

// The arguments in parameter order (argv[i] null: not given).
bool FastPath::launch_bound(PyObject** argv, bool explicit_stream, uint64_t stream) {
  size_t n = params.size();
  for (size_t i = 0; i < n; ++i)
    if (!argv[i]) return false;

  ArrayInfo inline_arrays[8];
  std::vector<ArrayInfo> heap_arrays;  // a vector: GCC 12 flagged make_unique<T[]>(n) at the LTO link
  ArrayInfo* arrays = inline_arrays;
  if (n > 8) {
    heap_arrays.resize(n);
    arrays = heap_arrays.data();
  }
  std::string key(9, '\0');
  uint64_t mask = 0;
  bool any_cuda = false, any_host = false, torch_stream = false;
  int device = 0;
  for (size_t i = 0; i < n; ++i) {
    PyObject* a = argv[i];
    const Param& p = params[i];
    switch (p.kind) {
      case Pointer: {
        ArrayInfo& info = arrays[i];
        if (!array(a, p, info)) return false;
        if (is_specialized(info.addr)) mask |= uint64_t(1) << i;
        (info.cuda ? any_cuda : any_host) = true;
        if (info.torch && info.cuda && !torch_stream) torch_stream = true, device = info.device;
        break;
      }
      case Int: {
        int64_t v = 0;
        if (PyBool_Check(a)) {
          if (!p.dtype.is_bool()) return false;  // the general path refuses a bool for an int
          v = a == Py_True;
        } else if (!PyLong_CheckExact(a) || !take_int(a, v)) {
          return false;
        }
        if (is_specialized(uint64_t(v))) mask |= uint64_t(1) << i;
        if (bucketed) {
          int64_t b = tune_bucket(v);
          key.append(reinterpret_cast<const char*>(&b), 8);
        }
        break;
      }
      case Float:
        if (!PyFloat_CheckExact(a) && !PyLong_CheckExact(a)) return false;
        break;
      case Blob:
        if (!PyObject_CheckBuffer(a)) return false;
        break;
      case Constant:
        if (!constant_key(a, p.const_type, key)) return false;
        break;
    }
  }
  if (any_cuda && any_host) return false;
  std::memcpy(key.data(), &mask, 8);
  key[8] = any_host ? 'c' : 'g';
  auto it = kernels.find(key);
  if (it == kernels.end()) return false;
  if (it->second.cpu) return launch_cpu(*it->second.cpu, argv, arrays);
  GpuKernel& kernel = *it->second.gpu;
  const auto& kparams = kernel.launcher->kernel().source.params;
  size_t m = runtime.size();
  if (kparams.size() != m) return false;
  ArgumentBuffer buffer(kernel.launcher->layout());
  for (size_t j = 0; j < m; ++j) {
    size_t i = runtime[j];
    if (params[i].kind == Pointer) kernel.put_slot(j, arrays[i].addr, buffer.data());
    else if (!kernel.pack(j, argv[i], buffer.data())) return false;
  }
  kernel.refresh(buffer.data());
  for (size_t j = 0; j < m; ++j) {
    size_t i = runtime[j];
    if (params[i].kind != Pointer) continue;
    const ArrayInfo& info = arrays[i];
    const GpuKernel::FastContract& c = kernel.contracts[j];
    const PointerContract& pc = kparams[j].contract;
    if (info.foreign && !(pc.views.empty() && !pc.writes())) return false;
    if (info.read_only && pc.writes()) return false;
    bool dense = info.bytes >= 0;
    if (dense ? info.bytes < c.bytes : !c.strided_ok) return false;
    if (!c.strides.empty() && !declared_strides_hold(info, c, dense)) return false;
  }
  if (!explicit_stream && torch_stream) {
    if (raw_stream.is_none()) return false;
    PyObject* dev = PyLong_FromLong(device);
    PyObject* st = PyObject_CallOneArg(raw_stream.ptr(), dev);
    Py_DECREF(dev);
    if (!st) { PyErr_Clear(); return false; }
    stream = PyLong_AsUnsignedLongLong(st);
    Py_DECREF(st);
    if (PyErr_Occurred()) { PyErr_Clear(); return false; }
  }
  kernel.launcher->launch_raw(kernel.grid, buffer.data(), reinterpret_cast<Stream>(stream));
  ++launches;
  return true;
}

// A compile-time constant's part of the key: its Python type and its value, exactly (as the
// general path's ("c", value) entry; a bool is not an int here).
bool FastPath::constant_key(PyObject* a, int type, std::string& key) {
  key += char('0' + type);
  if (type == 0) {
    int64_t v = 0;
    if (!PyLong_CheckExact(a) || !take_int(a, v)) return false;
    key.append(reinterpret_cast<const char*>(&v), 8);
  } else if (type == 1) {
    if (!PyFloat_CheckExact(a)) return false;
    double v = PyFloat_AS_DOUBLE(a);
    if (v == 0.0) v = 0.0;  // -0.0 == 0.0 as a dict key
    key.append(reinterpret_cast<const char*>(&v), 8);
  } else if (type == 2) {
    if (!PyBool_Check(a)) return false;
    key += a == Py_True ? '1' : '0';
  } else {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_CheckExact(a) ? PyUnicode_AsUTF8AndSize(a, &len) : nullptr;
    if (!s) { PyErr_Clear(); return false; }
    int64_t l = len;
    key.append(reinterpret_cast<const char*>(&l), 8);
    key.append(s, size_t(len));
  }
  return true;
}

// A CPU-backend kernel: its launch checks every argument (check_arguments) itself.
bool FastPath::launch_cpu(const CpuKernelHandle& kernel, PyObject* const* argv, ArrayInfo* arrays) {
  std::vector<KernelArg> args;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    if (p.kind == Constant) continue;
    if (p.kind == Pointer) {
      ArrayInfo& info = arrays[i];
      KernelArg a = KernelArg::typed_pointer(DevicePtr(info.addr), info.elem.is_void() ? p.dtype : info.elem);
      a.memory = KernelArg::Memory::Host;
      a.read_only = info.read_only;
      a.foreign_byte_order = info.foreign;
      if (info.tensor) {  // a torch tensor's shape and byte strides, as the general path gives them
        if (!torch_layout(info, a.shape, a.byte_strides)) return false;
        int64_t elem = std::max<int64_t>(1, a.pointee.bits() / 8), count = 1;
        for (int64_t& s : a.byte_strides) s *= elem;
        for (int64_t s : a.shape) count *= s;
        a.bytes = count * elem;
      } else {
        if (info.has_layout) a.shape = info.shape, a.byte_strides = info.strides;
        a.bytes = info.bytes;
        if (a.bytes < 0 && info.has_layout) {  // a strided array: the bytes of its elements
          int64_t count = 1;
          for (int64_t s : info.shape) count *= s;
          a.bytes = a.pointee.storage_bytes(count);
        }
      }
      args.push_back(std::move(a));
    } else if (p.kind == Float) {
      args.emplace_back(PyFloat_AsDouble(argv[i]));
    } else if (p.kind == Int) {
      args.emplace_back(int64_t(PyBool_Check(argv[i]) ? argv[i] == Py_True : PyLong_AsLongLong(argv[i])));
    } else {
      return false;
    }
  }
  if (PyErr_Occurred()) { PyErr_Clear(); return false; }
  try {
    py::gil_scoped_release release;
    kernel.kernel->launch(args, [] {
      py::gil_scoped_acquire gil;
      return PyErr_CheckSignals() != 0;
    });
  } catch (const ArgumentError&) {
    return false;  // the general path reports it
  }
  ++launches;
  return true;
}

// An array's strides against the declared strides of its parameter's views (as
// check_arguments decides, where it can tell cheaply): a contiguous array of another rank is a
// dense buffer, one of the view's rank needs exactly those strides; a strided array needs the
// view's rank and strides, and holds the view dim by dim.
bool FastPath::declared_strides_hold(const ArrayInfo& info, const GpuKernel::FastContract& c, bool dense) {
  std::vector<int64_t> strides, shape;
  if (info.tensor) {
    if (!torch_layout(info, shape, strides)) return false;
  } else if (info.has_layout) {
    int64_t e = std::max<int64_t>(1, info.elem.bits() / 8);
    shape = info.shape;
    for (int64_t s : info.strides) {
      if (s % e) return false;
      strides.push_back(s / e);
    }
  } else {
    return dense;  // a tilus.Tensor: a dense buffer of its own rank
  }
  for (size_t v = 0; v < c.strides.size(); ++v) {
    if (strides.size() != c.strides[v].size()) {
      if (!dense) return false;
      continue;
    }
    for (size_t d = 0; d < strides.size(); ++d) {
      if (shape[d] > 1 && strides[d] != c.strides[v][d]) return false;
      if (!dense && shape[d] < c.shapes[v][d]) return false;
    }
  }
  return true;
}

// The general path's reading of a call's arguments (arguments.arguments; the same reading as
// the fast path's), in parameter order: per parameter, a torch tensor of the parameter's dtype on
// CUDA or the CPU as its KernelArg (with its shape and byte strides), a Python int of an integer
// parameter or a float of a float one as itself; None for anything else (a compile-time
// constant, any other array or number), which arguments.py reads (and reports). Also the index
// and CUDA device of the first CUDA torch tensor read here (the launch's stream is that device's
// current torch stream): (values, index or len(values), device or None).
py::tuple FastPath::read_arrays(const py::sequence& args) const {
  size_t n = params.size(), given = size_t(py::len(args));
  py::list out(n);
  size_t owner_at = n;
  py::object owner = py::none();
  for (size_t i = 0; i < n; ++i) {
    const Param& p = params[i];
    py::object item = py::none();
    py::object arg = i < given ? py::object(args[i]) : py::object();
    PyObject* a = arg.ptr();
    ArrayInfo info;
    if (!a) {
    } else if (p.kind == Int) {
      if (PyLong_CheckExact(a)) item = arg;
    } else if (p.kind == Float) {
      if (PyFloat_CheckExact(a)) item = arg;
    } else if (p.kind == Pointer && !p.dtype.is_void() && !p.torch_dtype.is_none() && !tensor_type.is_none() &&
               PyObject_TypeCheck(a, reinterpret_cast<PyTypeObject*>(tensor_type.ptr())) &&
               torch_array(a, p, info, false)) {
      KernelArg k;
      if (torch_kernel_arg(info, p, k)) {
        item = py::cast(std::move(k));
        if (info.cuda && owner_at == n) owner_at = i, owner = py::int_(info.device);
      }
    }
    PyList_SET_ITEM(out.ptr(), Py_ssize_t(i), item.release().ptr());
  }
  return py::make_tuple(std::move(out), owner_at, std::move(owner));
}

// The general path's reading and check of a call whose every argument is read here (torch
// tensors of their parameters' dtypes, Python ints of integer parameters, bools of boolean ones
// and floats of float ones; no compile-time constants): (values, flags, backend, owner), what arguments.py builds
// from read_arrays and KernelSignature.check, in one C++ pass and with the same check
// (check_arguments: the same errors). The values are an ArgList (the checked KernelArgs, which
// the launch takes as they are, and the specialization facts); None when an argument needs
// arguments.py.
py::object FastPath::check_call(const py::sequence& args, const KernelSignature& signature) const {
  size_t n = params.size();
  if (!PyList_Check(args.ptr()) && !PyTuple_Check(args.ptr())) return py::none();
  if (size_t(py::len(args)) != n || runtime.size() != n || signature.source.params.size() != n) return py::none();
  ArgList list;
  std::vector<KernelArg>& checked = list.args;
  checked.reserve(n);
  py::object owner = py::none();
  for (size_t i = 0; i < n; ++i) {
    const Param& p = params[i];
    PyObject* a = PySequence_Fast_GET_ITEM(args.ptr(), Py_ssize_t(i));
    if (p.kind == Int && PyLong_CheckExact(a)) {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
      if (overflow || PyErr_Occurred()) {  // the Python reading reports it
        PyErr_Clear();
        return py::none();
      }
      checked.emplace_back(int64_t(v));
    } else if (p.kind == Int && PyBool_Check(a) && p.dtype.is_bool()) {
      checked.emplace_back(int64_t(a == Py_True));
    } else if (p.kind == Float && PyFloat_CheckExact(a)) {
      checked.emplace_back(PyFloat_AS_DOUBLE(a));
    } else if (p.kind == Pointer) {
      ArrayInfo info;
      if (p.dtype.is_void() || p.torch_dtype.is_none() || tensor_type.is_none() ||
          !PyObject_TypeCheck(a, reinterpret_cast<PyTypeObject*>(tensor_type.ptr())) || !torch_array(a, p, info, false))
        return py::none();
      if (!torch_kernel_arg(info, p, checked.emplace_back())) return py::none();
      if (info.cuda && owner.is_none()) owner = py::int_(info.device);
    } else {
      return py::none();
    }
  }
  py::tuple result = signature.check_list(list);
  return py::make_tuple(py::cast(std::move(list)), result[0], result[1], std::move(owner));
}

// Registers a kernel compiled for a call's arguments (its Call.values, and the constants in
// parameter order) under the key call() computes for them.
void FastPath::add(py::object kernel, const py::sequence& values, const py::sequence& constants) {
  std::string key(9, '\0');
  uint64_t mask = 0;
  size_t v = 0, c = 0;
  bool host = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    if (p.kind == Constant) {
      if (!constant_key(py::object(constants[c++]).ptr(), p.const_type, key))
        throw std::runtime_error("FastPath.add: a constant of another type than its parameter's");
      continue;
    }
    py::object x = values[v++];
    if (py::isinstance<KernelArg>(x)) {
      const KernelArg& a = x.cast<const KernelArg&>();
      if (is_specialized(a.ptr)) mask |= uint64_t(1) << i;
      host |= a.memory == KernelArg::Memory::Host;
      if (a.bytes < 0) return;  // a raw address: the fast path reads arrays only
    } else if (p.kind == Int) {
      int64_t value = x.cast<int64_t>();
      if (is_specialized(uint64_t(value))) mask |= uint64_t(1) << i;
      if (bucketed) {
        int64_t b = tune_bucket(value);
        key.append(reinterpret_cast<const char*>(&b), 8);
      }
    }
  }
  std::memcpy(key.data(), &mask, 8);
  key[8] = host ? 'c' : 'g';
  Entry e;
  if (py::isinstance<GpuKernel>(kernel)) e.gpu = &kernel.cast<GpuKernel&>();
  else e.cpu = &kernel.cast<const CpuKernelHandle&>();
  if (host == (e.gpu != nullptr)) return;  // a backend other than the arrays' (TILUS_TARGET): never fast
  kernels[key] = e;
  keep.push_back(std::move(kernel));
}

namespace {

// The fast path's entry as a CPython METH_FASTCALL function (issue 18: no pybind11 dispatcher
// on the hot path): `entry(args, kwargs)` with a call's positional-argument tuple and its keyword
// dict (or None), True when it launched. Its `self` is a capsule of the FastPath, which holds the
// Python object that owns it. A C++ exception (a launch the driver refused) answers False: the
// general path then launches again and raises the error with its Python type.
constexpr const char* kFastPathCapsule = "tilus.FastPath";

PyObject* fast_path_entry(PyObject* capsule, PyObject* const* argv, Py_ssize_t nargs) {
  auto* fast = static_cast<FastPath*>(PyCapsule_GetPointer(capsule, kFastPathCapsule));
  if (!fast) return nullptr;
  if (nargs < 1 || nargs > 2 || !PyTuple_Check(argv[0])) {
    PyErr_SetString(PyExc_TypeError, "the launch fast path takes the call's argument tuple and keyword dict");
    return nullptr;
  }
  bool launched = false;
  try {
    launched = fast->call(argv[0], nargs > 1 ? argv[1] : nullptr);
  } catch (py::error_already_set&) {
    launched = false;  // its Python error is cleared as the object goes
  } catch (const std::exception&) {
    launched = false;
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return PyBool_FromLong(launched);
}

py::object fast_path_function(py::object owner) {
  static PyMethodDef def = {"fast_path", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_path_entry)),
                            METH_FASTCALL, "The launch fast path (internal): entry(args, kwargs) -> True when launched."};
  FastPath& fast = owner.cast<FastPath&>();
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

// The FastPath behind an entry made by fast_path_function; null for anything else.
FastPath* fast_path_of(PyObject* entry) {
  if (!entry || !PyCFunction_Check(entry) ||
      PyCFunction_GET_FUNCTION(entry) != reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_path_entry)))
    return nullptr;
  return static_cast<FastPath*>(PyCapsule_GetPointer(PyCFunction_GET_SELF(entry), kFastPathCapsule));
}

void bind_fast_path(py::module_& m) {
  py::class_<FastPath>(m, "FastPath",
                       "The launch fast path shared by the instances of a Script class made with equal constructor "
                       "arguments, or by an autotuned class's tuner (internal; docs/python.md, \"Launch overhead\").")
      .def(py::init([](const py::sequence& params, py::object tensor_type, py::object raw_stream,
                       py::object host_tensor_type, bool bucketed) {
        // params: per parameter (kind, name, dtype, torch dtype or None, torch tensors accepted,
        // constant type)
        FastPath f;
        for (py::handle h : params) {
          auto t = h.cast<py::tuple>();
          FastPath::Param p;
          p.kind = t[0].cast<int>();
          p.name = t[1].cast<std::string>();
          PyObject* name = PyUnicode_FromString(p.name.c_str());
          if (!name) throw py::error_already_set();
          PyUnicode_InternInPlace(&name);
          p.name_object = py::reinterpret_steal<py::object>(name);
          if (p.kind != FastPath::Constant) f.runtime.push_back(f.params.size());
          if (!t[2].is_none()) p.dtype = t[2].cast<DataType>();
          p.torch_dtype = py::reinterpret_borrow<py::object>(t[3]);
          p.torch_ok = t[4].cast<bool>();
          p.const_type = t[5].cast<int>();
          f.params.push_back(std::move(p));
        }
        f.tensor_type = std::move(tensor_type);
        f.raw_stream = std::move(raw_stream);
        f.host_tensor_type = std::move(host_tensor_type);
        f.bucketed = bucketed;
        f.use_shim();
        return f;
      }), py::arg("params"), py::arg("tensor_type"), py::arg("raw_stream"), py::arg("host_tensor_type"),
         py::arg("bucketed") = false)
      .def("__call__", [](FastPath& f, const py::tuple& args, const py::object& kwargs) {
        return f.call(args.ptr(), kwargs.is_none() ? nullptr : kwargs.ptr());
      }, py::arg("args"), py::arg("kwargs") = py::none())
      .def_property_readonly("entry", &fast_path_function,
                             "The same call as a METH_FASTCALL function without pybind11's dispatcher "
                             "(what Script.__call__ calls).")
      .def_readonly("launches", &FastPath::launches, "How many calls this path launched.")
      .def_property_readonly("size", [](const FastPath& f) { return f.kernels.size(); },
                             "How many kernels are registered.")
      .def("read_arrays", &FastPath::read_arrays, py::arg("args"),
           "The general path's reading of a call's arguments (in parameter order): (values, index, device): per "
           "parameter a torch tensor's KernelArg, an int or float of its parameter's kind, or None where arguments.py "
           "reads it; the index and CUDA device of the first CUDA torch tensor read (len(values) and None if none).")
      .def("check_call", &FastPath::check_call, py::arg("args"), py::arg("signature"),
           "The general path's reading and check of a call (arguments in parameter order) whose every argument is a "
           "torch tensor of its parameter's dtype, an int or a float of its parameter's kind: (values, flags, backend, "
           "owner device or None), the values an ArgList (the checked arguments and their facts); None when one "
           "needs arguments.py.")
      .def("add", &FastPath::add, py::arg("kernel"), py::arg("values"), py::arg("constants"),
           "Registers a kernel (GpuKernel or CpuKernel) compiled for a call's runtime values and constants, under "
           "the key __call__ computes.");
}

}  // namespace tilus::py_detail
