// The launch fast path of Python calls (tilus._C.FastPath): docs/python.md, "Launch overhead".
#include "kernels.h"

#include <structmember.h>

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject* Py_NewRef(PyObject* o) {
  Py_INCREF(o);
  return o;
}
#endif

namespace tilus::py_detail {

namespace {

// The fast launch path of Python calls, in C++ (Python's interpreter costs more than the
// checks). One FastPath serves every instance of a Script class made with equal constructor
// arguments (and every instance of an autotuned class, through its tuner): a call's arguments
// are read here (torch tensors of any dtype, tilus.Tensors, objects with __cuda_array_interface__
// or __array_interface__, DLPack objects; Python ints, floats and bools; keyword arguments and
// stream=), its key is built (the bit mask of 16-byte aligned pointers and 16-divisible ints,
// the backend, the compile-time constants and, for a tuner, each int's tuning bucket) and the
// kernel compiled for that key launched. A GPU kernel's argument contract is checked against
// numbers cached per scalar values (check_arguments' rules on what an array says cheaply); a
// CPU kernel's launch runs check_arguments itself. Anything the path cannot read or prove fine
// answers False: the general Python path then validates and reports, compiles, and registers
// the new kernel here.

// What one array argument says of itself.
struct ArrayInfo {
  uint64_t addr = 0;
  int64_t bytes = -1;  // the bytes of a dense (C-contiguous) array; -1: strided
  DataType elem;       // its element type (void: not known, only a torch dtype checked by identity)
  bool cuda = false;
  bool torch = false;  // launched on torch's current stream of its device
  int device = 0;      // CUDA device index
  bool read_only = false, foreign = false;
  PyObject* tensor = nullptr;  // a torch tensor (borrowed): stride() / shape read when needed
  bool has_layout = false;     // shape and strides below are known (non-torch arrays)
  std::vector<int64_t> shape, strides;  // elements, bytes
};

// The typestr of an array interface ("<f4", "|b1", ...) as a tilus data type; void when
// tilus has none for it.
DataType typestr_dtype(const char* s, bool& foreign) {
  static const bool little = [] {
    uint16_t x = 1;
    return *reinterpret_cast<uint8_t*>(&x) == 1;
  }();
  foreign = (s[0] == '>' && little) || (s[0] == '<' && !little);
  std::string_view t(s[0] ? s + 1 : s);
  static const std::pair<std::string_view, DataType> table[] = {
      {"f2", dtypes::float16}, {"f4", dtypes::float32}, {"f8", dtypes::float64}, {"i1", dtypes::int8},
      {"i2", dtypes::int16},   {"i4", dtypes::int32},   {"i8", dtypes::int64},   {"u1", dtypes::uint8},
      {"u2", dtypes::uint16},  {"u4", dtypes::uint32},  {"u8", dtypes::uint64},  {"b1", dtypes::boolean}};
  for (auto& [name, dt] : table)
    if (t == name) return dt;
  return dtypes::void_t;
}

// A DLPack data type as a tilus one; void when tilus has none for it.
DataType dlpack_dtype(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) return dtypes::void_t;
  std::string name = code == 0 ? "int" : code == 1 ? "uint" : code == 2 ? "float" : code == 4 ? "bfloat" : code == 6 ? "bool" : "";
  if (name.empty()) return dtypes::void_t;
  if (name == "bool") return bits == 8 ? dtypes::boolean : dtypes::void_t;
  auto t = DataType::from_name(name + std::to_string(bits));
  return t ? *t : dtypes::void_t;
}

// The DLPack structures (dlpack.h, ABI version 0.x: the capsule "dltensor").
struct DLDeviceC { int32_t device_type, device_id; };
struct DLDataTypeC { uint8_t code, bits; uint16_t lanes; };
struct DLTensorC {
  void* data;
  DLDeviceC device;
  int32_t ndim;
  DLDataTypeC dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};

// Whether shape and byte strides describe a dense row-major array of `elem` bytes an element.
bool row_major(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t elem) {
  if (strides.size() != shape.size()) return false;
  int64_t expected = elem;
  for (size_t k = shape.size(); k-- > 0;) {
    if (shape[k] == 0) return true;
    if (shape[k] != 1 && strides[k] != expected) return false;
    expected *= shape[k];
  }
  return true;
}

struct FastPath {
  enum Kind { Pointer = 0, Int = 1, Float = 2, Blob = 3, Constant = 4 };
  struct Param {
    int kind = Int;
    std::string name;
    py::object name_object;  // the name as an interned Python string
    DataType dtype;          // a scalar's type, a pointer's element type (void: any)
    py::object torch_dtype;  // a pointer's torch dtype (None: a torch tensor of any dtype for void*)
    bool torch_ok = true;    // torch tensors are accepted (tilus has a torch dtype for its elements)
    int const_type = 0;      // a constant's Python type: 0 int, 1 float, 2 bool, 3 str
  };
  std::vector<Param> params;
  std::vector<size_t> runtime;  // the runtime parameters (the signature's without its constants), in order
  py::object tensor_type;       // torch.Tensor (None without torch)
  py::object raw_stream;        // torch._C._cuda_getCurrentRawStream (None without torch's CUDA)
  py::object host_tensor_type;  // tilus.Tensor
  bool bucketed = false;        // a tuner's path: each int's tuning bucket is part of the key
  struct Entry {
    GpuKernel* gpu = nullptr;
    const CpuKernelHandle* cpu = nullptr;
  };
  std::map<std::string, Entry> kernels;
  std::vector<py::object> keep;  // the kernel objects (owned by Python)
  uint64_t launches = 0;         // calls this path launched (tests read it)

  // --- reading arguments ----------------------------------------------------------------------

  static bool take_int(PyObject* o, int64_t& v) {
    if (!o) { PyErr_Clear(); return false; }
    int overflow = 0;
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    bool ok = !overflow && !PyErr_Occurred();
    PyErr_Clear();
    return ok;
  }

  // The ints of a tuple (shape or strides); false for anything else.
  static bool int_tuple(PyObject* t, std::vector<int64_t>& out) {
    if (!t || !PyTuple_Check(t)) return false;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    out.resize(size_t(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* x = PyTuple_GET_ITEM(t, i);
      if (!PyLong_Check(x) || !take_int(x, out[size_t(i)])) return false;
    }
    return true;
  }

  static bool attr(PyObject* o, PyObject* name, PyObject*& out) {
    out = PyObject_GetAttr(o, name);
    if (!out) PyErr_Clear();
    return out != nullptr;
  }

  // An attribute that may be missing, without raising (and formatting) an AttributeError when
  // it is: the protocol probes of a call's arrays. Null when missing or failing.
  static PyObject* optional_attr(PyObject* o, PyObject* name) {
    PyObject* out = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyObject_GetOptionalAttr(o, name, &out) < 0) PyErr_Clear();
#else
    if (_PyObject_LookupAttr(o, name, &out) < 0) PyErr_Clear();
#endif
    return out;
  }

  // A torch tensor: dtype (by identity), device, address, and whether it is dense.
  // `extent`: whether its byte extent is read (the general path reads shape and strides instead).
  bool torch_array(PyObject* a, const Param& p, ArrayInfo& info, bool extent = true) const {
    static PyObject* s_dtype = PyUnicode_InternFromString("dtype");
    static PyObject* s_is_cuda = PyUnicode_InternFromString("is_cuda");
    static PyObject* s_is_cpu = PyUnicode_InternFromString("is_cpu");
    static PyObject* s_data_ptr = PyUnicode_InternFromString("data_ptr");
    static PyObject* s_get_device = PyUnicode_InternFromString("get_device");
    static PyObject* s_is_contiguous = PyUnicode_InternFromString("is_contiguous");
    static PyObject* s_nbytes = PyUnicode_InternFromString("nbytes");
    if (!p.torch_ok) return false;
    PyObject* dt;
    if (!attr(a, s_dtype, dt)) return false;
    bool same = p.torch_dtype.is_none() || dt == p.torch_dtype.ptr();
    Py_DECREF(dt);
    if (!same) return false;
    PyObject* cuda;
    if (!attr(a, s_is_cuda, cuda)) return false;
    info.cuda = cuda == Py_True;
    Py_DECREF(cuda);
    if (!info.cuda) {
      PyObject* cpu;
      if (!attr(a, s_is_cpu, cpu)) return false;
      bool host = cpu == Py_True;
      Py_DECREF(cpu);
      if (!host) return false;  // meta, mps, ...: the general path reports it
    }
    PyObject* ptr = PyObject_CallMethodNoArgs(a, s_data_ptr);
    if (!ptr) { PyErr_Clear(); return false; }
    info.addr = PyLong_AsUnsignedLongLong(ptr);
    Py_DECREF(ptr);
    if (info.addr == 0 || PyErr_Occurred()) { PyErr_Clear(); return false; }
    info.bytes = -1;
    PyObject* contiguous = extent ? PyObject_CallMethodNoArgs(a, s_is_contiguous) : (Py_INCREF(Py_False), Py_False);
    if (!contiguous) { PyErr_Clear(); return false; }
    bool dense = contiguous == Py_True;
    Py_DECREF(contiguous);
    if (dense) {
      PyObject* nbytes;
      if (!attr(a, s_nbytes, nbytes)) return false;
      bool ok = take_int(nbytes, info.bytes) && info.bytes >= 0;
      Py_DECREF(nbytes);
      if (!ok) return false;
    }
    if (info.cuda) {
      PyObject* dev = PyObject_CallMethodNoArgs(a, s_get_device);
      int64_t d = 0;
      bool ok = take_int(dev, d);
      Py_XDECREF(dev);
      if (!ok) return false;
      info.device = int(d);
    }
    info.torch = true;
    info.tensor = a;
    info.elem = p.dtype;
    return true;
  }

  // __cuda_array_interface__ / __array_interface__ (cupy, numba, numpy, ...).
  static bool interface_array(PyObject* d, bool cuda, ArrayInfo& info) {
    if (!PyDict_Check(d)) return false;
    PyObject* data = PyDict_GetItemString(d, "data");
    PyObject* typestr = PyDict_GetItemString(d, "typestr");
    PyObject* shape = PyDict_GetItemString(d, "shape");
    PyObject* strides = PyDict_GetItemString(d, "strides");
    if (!data || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 || !typestr || !PyUnicode_Check(typestr))
      return false;
    int64_t addr = 0;
    if (!take_int(PyTuple_GET_ITEM(data, 0), addr) || addr == 0) return false;
    info.addr = uint64_t(addr);
    info.read_only = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1)) == 1;
    if (PyDict_GetItemString(d, "mask") && PyDict_GetItemString(d, "mask") != Py_None) return false;
    const char* ts = PyUnicode_AsUTF8(typestr);
    if (!ts) { PyErr_Clear(); return false; }
    info.elem = typestr_dtype(ts, info.foreign);
    int64_t elem = std::atoll(ts[0] ? ts + 2 : ts);
    if (!int_tuple(shape, info.shape) || elem <= 0) return false;
    int64_t n = 1;
    for (int64_t s : info.shape) n *= s;
    if (strides && strides != Py_None) {
      if (!int_tuple(strides, info.strides)) return false;
    } else {  // C-contiguous
      info.strides.assign(info.shape.size(), 0);
      int64_t s = elem;
      for (size_t k = info.shape.size(); k-- > 0;) info.strides[k] = s, s *= info.shape[k];
    }
    info.has_layout = true;
    info.bytes = row_major(info.shape, info.strides, elem) ? n * elem : -1;
    info.cuda = cuda;
    return true;
  }

  // An object with __dlpack__ (its bound __dlpack__ given; read from its capsule, which is left
  // unconsumed: its deleter runs as it goes).
  bool dlpack_array(PyObject* dlpack_method, ArrayInfo& info) const {
    PyObject* capsule = PyObject_CallNoArgs(dlpack_method);
    if (!capsule) { PyErr_Clear(); return false; }
    bool ok = false;
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      // DLManagedTensor starts with its DLTensor.
      auto* t = static_cast<DLTensorC*>(PyCapsule_GetPointer(capsule, "dltensor"));
      int type = t->device.device_type;
      bool cuda = type == 2 || type == 13, host = type == 1 || type == 3;
      info.elem = dlpack_dtype(t->dtype.code, t->dtype.bits, t->dtype.lanes);
      int64_t elem = (int64_t(t->dtype.bits) * t->dtype.lanes + 7) / 8;
      if ((cuda || host) && t->data && elem > 0) {
        info.addr = uint64_t(reinterpret_cast<uintptr_t>(t->data)) + t->byte_offset;
        info.cuda = cuda;
        info.device = t->device.device_id;
        info.shape.assign(t->shape, t->shape + t->ndim);
        int64_t n = 1;
        for (int64_t s : info.shape) n *= s;
        info.strides.assign(size_t(t->ndim), 0);
        int64_t s = elem;
        for (size_t k = size_t(t->ndim); k-- > 0;) {
          info.strides[k] = t->strides ? t->strides[k] * elem : s;
          s *= info.shape[k];
        }
        info.has_layout = true;
        info.bytes = row_major(info.shape, info.strides, elem) ? n * elem : -1;
        // With torch present the general path reads a DLPack object through torch: its stream.
        info.torch = cuda && !tensor_type.is_none();
        ok = true;
      }
    }
    Py_DECREF(capsule);
    PyErr_Clear();
    return ok;
  }

  // Any array argument of pointer parameter p; false for what the general path must read.
  bool array(PyObject* a, const Param& p, ArrayInfo& info) const {
    static PyObject* s_storage = PyUnicode_InternFromString("storage");
    static PyObject* s_dtype = PyUnicode_InternFromString("dtype");
    static PyObject* s_nbytes = PyUnicode_InternFromString("nbytes");
    static PyObject* s_cai = PyUnicode_InternFromString("__cuda_array_interface__");
    static PyObject* s_ai = PyUnicode_InternFromString("__array_interface__");
    static PyObject* s_dlpack = PyUnicode_InternFromString("__dlpack__");
    if (!tensor_type.is_none() && PyObject_TypeCheck(a, reinterpret_cast<PyTypeObject*>(tensor_type.ptr())))
      return torch_array(a, p, info);
    if (Py_TYPE(a) == reinterpret_cast<PyTypeObject*>(host_tensor_type.ptr())) {
      // tilus.Tensor: any tilus dtype (sub-byte data bit-packed), dense, in a torch tensor or a
      // numpy array.
      PyObject *dt, *storage, *nbytes;
      if (!attr(a, s_dtype, dt)) return false;
      bool same = false;
      try {
        DataType t = py::handle(dt).cast<DataType>();
        same = p.dtype.is_void() || t == p.dtype;
        info.elem = t;
      } catch (...) {
      }
      Py_DECREF(dt);
      if (!same || !attr(a, s_storage, storage)) return false;
      Param any;
      any.torch_dtype = py::none();
      bool ok = (!tensor_type.is_none() && PyObject_TypeCheck(storage, reinterpret_cast<PyTypeObject*>(tensor_type.ptr())))
                    ? torch_array(storage, any, info)
                    : interface_storage(storage, info);
      Py_DECREF(storage);
      info.elem = p.dtype.is_void() ? info.elem : p.dtype;
      info.tensor = nullptr;  // its layout is the tilus.Tensor's: dense, bit-packed
      info.has_layout = false;
      info.shape.clear(), info.strides.clear();
      if (!ok || info.bytes < 0 || !attr(a, s_nbytes, nbytes)) return false;
      ok = take_int(nbytes, info.bytes);
      Py_DECREF(nbytes);
      return ok;
    }
    PyObject* d = optional_attr(a, s_cai);
    bool cuda = d != nullptr;
    if (!d) d = optional_attr(a, s_ai);
    if (d) {
      bool ok = interface_array(d, cuda, info);
      Py_DECREF(d);
      return ok && (p.dtype.is_void() || info.elem == p.dtype);
    }
    PyObject* dlpack = optional_attr(a, s_dlpack);
    if (!dlpack) return false;
    bool ok = dlpack_array(dlpack, info) && (p.dtype.is_void() || info.elem == p.dtype);
    Py_DECREF(dlpack);
    return ok;
  }

  static bool interface_storage(PyObject* storage, ArrayInfo& info) {
    static PyObject* s_ai = PyUnicode_InternFromString("__array_interface__");
    PyObject* d = optional_attr(storage, s_ai);
    if (!d) return false;
    bool ok = interface_array(d, false, info);
    Py_DECREF(d);
    return ok;
  }

  // A stream= value: an int handle or an object with cuda_stream / ptr / handle.
  static bool stream_handle(PyObject* s, uint64_t& out) {
    static PyObject* names[3] = {PyUnicode_InternFromString("cuda_stream"), PyUnicode_InternFromString("ptr"),
                                 PyUnicode_InternFromString("handle")};
    PyObject* v = nullptr;
    if (!PyLong_CheckExact(s))
      for (PyObject* n : names)
        if ((v = optional_attr(s, n))) break;
    if (!v) v = (Py_INCREF(s), s);
    int64_t h = -1;
    bool ok = PyLong_Check(v) && !PyBool_Check(v) && take_int(v, h) && h >= 0;
    Py_DECREF(v);
    out = uint64_t(h);
    return ok;
  }

  // --- the call ---------------------------------------------------------------------------------

  // Parameter index of a keyword argument's name; params.size() when none has it.
  size_t param_of(PyObject* name) const {
    size_t n = params.size();
    for (size_t i = 0; i < n; ++i)
      if (params[i].name_object.ptr() == name) return i;  // interned names: the usual case
    for (size_t i = 0; i < n; ++i)
      if (PyUnicode_Check(name) && PyUnicode_Compare(params[i].name_object.ptr(), name) == 0) return i;
    PyErr_Clear();
    return n;
  }

  // A keyword argument: stream= or a parameter's (argv[i]); false for anything else.
  bool keyword(PyObject* name, PyObject* value, PyObject** argv, bool& explicit_stream, uint64_t& stream) const {
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
  bool call(PyObject* args, PyObject* kwargs) {
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
  bool call_vector(PyObject* const* args, size_t nargs, PyObject* kwnames) {
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
  bool launch_bound(PyObject** argv, bool explicit_stream, uint64_t stream) {
    size_t n = params.size();
    for (size_t i = 0; i < n; ++i)
      if (!argv[i]) return false;

    ArrayInfo inline_arrays[8];
    std::unique_ptr<ArrayInfo[]> heap_arrays;
    ArrayInfo* arrays = inline_arrays;
    if (n > 8) arrays = (heap_arrays = std::make_unique<ArrayInfo[]>(n)).get();
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
  static bool constant_key(PyObject* a, int type, std::string& key) {
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
  bool launch_cpu(const CpuKernelHandle& kernel, PyObject* const* argv, ArrayInfo* arrays) {
    static PyObject* s_stride = PyUnicode_InternFromString("stride");
    static PyObject* s_shape = PyUnicode_InternFromString("shape");
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
          PyObject* strides = PyObject_CallMethodNoArgs(info.tensor, s_stride);
          PyObject* shape = PyObject_GetAttr(info.tensor, s_shape);
          bool ok = int_tuple(strides, a.byte_strides) && int_tuple(shape, a.shape);
          Py_XDECREF(strides);
          Py_XDECREF(shape);
          PyErr_Clear();
          if (!ok) return false;
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
  static bool declared_strides_hold(const ArrayInfo& info, const GpuKernel::FastContract& c, bool dense) {
    static PyObject* s_stride = PyUnicode_InternFromString("stride");
    static PyObject* s_shape = PyUnicode_InternFromString("shape");
    std::vector<int64_t> strides, shape;
    int64_t elem = 1;
    if (info.tensor) {
      PyObject* st = PyObject_CallMethodNoArgs(info.tensor, s_stride);
      PyObject* sh = PyObject_GetAttr(info.tensor, s_shape);
      bool ok = int_tuple(st, strides) && int_tuple(sh, shape);
      Py_XDECREF(st);
      Py_XDECREF(sh);
      PyErr_Clear();
      if (!ok) return false;
    } else if (info.has_layout) {
      int64_t e = std::max<int64_t>(1, info.elem.bits() / 8);
      shape = info.shape;
      for (int64_t s : info.strides) {
        if (s % e) return false;
        strides.push_back(s / e);
      }
      elem = 1;
    } else {
      return dense;  // a tilus.Tensor: a dense buffer of its own rank
    }
    (void)elem;
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

  // The general path's reading of a call's torch tensors (launch.arguments; the same reading as
  // the fast path's): per parameter, in order, (KernelArg, CUDA device or None) for a torch
  // tensor of the parameter's dtype on CUDA or the CPU, with its shape and byte strides; None
  // for anything else, which launch._pointer reads (and reports).
  py::list read_arrays(const py::sequence& args) const {
    static PyObject* s_stride = PyUnicode_InternFromString("stride");
    static PyObject* s_shape = PyUnicode_InternFromString("shape");
    size_t n = params.size();
    py::list out;
    for (size_t i = 0; i < n; ++i) {
      const Param& p = params[i];
      py::object item = py::none();
      PyObject* a = i < size_t(py::len(args)) ? py::object(args[i]).ptr() : nullptr;
      ArrayInfo info;
      if (a && p.kind == Pointer && !p.dtype.is_void() && !p.torch_dtype.is_none() && !tensor_type.is_none() &&
          PyObject_TypeCheck(a, reinterpret_cast<PyTypeObject*>(tensor_type.ptr())) &&
          torch_array(a, p, info, false)) {
        KernelArg k = KernelArg::typed_pointer(DevicePtr(info.addr), p.dtype);
        k.memory = info.cuda ? KernelArg::Memory::Device : KernelArg::Memory::Host;
        PyObject* strides = PyObject_CallMethodNoArgs(a, s_stride);
        PyObject* shape = PyObject_GetAttr(a, s_shape);
        bool ok = int_tuple(strides, k.byte_strides) && int_tuple(shape, k.shape);
        Py_XDECREF(strides);
        Py_XDECREF(shape);
        PyErr_Clear();
        if (ok) {
          int64_t elem = std::max<int64_t>(1, p.dtype.bits() / 8), count = 1;
          for (int64_t& st : k.byte_strides) st *= elem;
          for (int64_t sh : k.shape) count *= sh;
          k.bytes = count * elem;
          item = py::make_tuple(py::cast(std::move(k)), info.cuda ? py::object(py::int_(info.device)) : py::none());
        }
      }
      out.append(std::move(item));
    }
    return out;
  }

  // Registers a kernel compiled for a call's arguments (its Call.values, and the constants in
  // parameter order) under the key call() computes for them.
  void add(py::object kernel, const py::sequence& values, const py::sequence& constants) {
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
};

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

// Launches are skipped in this thread while depth > 0 (launch.skipped_launches: tilus.torch's fake
// functions run so).
thread_local int skip_depth = 0;

// The FastPath behind an entry made by fast_path_function; null for anything else.
FastPath* fast_path_of(PyObject* entry) {
  if (!entry || !PyCFunction_Check(entry) ||
      PyCFunction_GET_FUNCTION(entry) != reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fast_path_entry)))
    return nullptr;
  return static_cast<FastPath*>(PyCapsule_GetPointer(PyCFunction_GET_SELF(entry), kFastPathCapsule));
}

// A call's arguments after the first (vectorcall form) as the tuple and keyword dict of a Python
// call.
bool python_arguments(PyObject* const* args, size_t nargs, PyObject* kwnames, PyObject*& tuple, PyObject*& kw) {
  tuple = PyTuple_New(Py_ssize_t(nargs - 1));
  if (!tuple) return false;
  for (size_t i = 1; i < nargs; ++i) PyTuple_SET_ITEM(tuple, Py_ssize_t(i - 1), Py_NewRef(args[i]));
  kw = PyDict_New();
  if (!kw) return Py_DECREF(tuple), false;
  if (kwnames) {
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(kwnames); ++j)
      if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, j), args[nargs + size_t(j)]) < 0)
        return Py_DECREF(tuple), Py_DECREF(kw), false;
  }
  return true;
}

// What Script classes' __call__ (kind Launch) and their metaclass's __call__ (kind Construct) are:
// a method descriptor in C whose vectorcall runs the fast path first, without a Python frame, and
// else the Python function it was made with (`general`: launch.launch(script, args, kw), or
// script._ScriptType's construction). docs/python.md, "Launch overhead".
struct ScriptCall {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* general;
  PyObject* dict;  // __doc__, __wrapped__, ...
  PyObject* launch_globals;  // kind Construct: launch.py's globals (by_constructor)
  int kind;
};
enum { Launch = 0, Construct = 1 };

PyObject* interned(const char* s) {
  PyObject* o = PyUnicode_InternFromString(s);
  return o;
}

// Script.__call__: args[0] is the instance.
PyObject* script_launch(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  static PyObject* s_fast = interned("_tilus_fast");
  auto* call = reinterpret_cast<ScriptCall*>(self);
  size_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "a Script's __call__ needs the instance");
    return nullptr;
  }
  if (!skip_depth) {
    PyObject* d = PyObject_GenericGetDict(args[0], nullptr);
    if (!d) return nullptr;
    PyObject* entry = PyDict_GetItemWithError(d, s_fast);  // borrowed
    Py_XINCREF(entry);
    Py_DECREF(d);
    if (FastPath* fast = fast_path_of(entry)) {
      bool launched = false;
      try {
        launched = fast->call_vector(args + 1, nargs - 1, kwnames);
      } catch (py::error_already_set&) {
      } catch (const std::exception&) {
      }
      if (PyErr_Occurred()) PyErr_Clear();
      Py_DECREF(entry);
      if (launched) Py_RETURN_NONE;
    } else {
      Py_XDECREF(entry);
      if (PyErr_Occurred()) return nullptr;
    }
  }
  PyObject *tuple, *kw;
  if (!python_arguments(args, nargs, kwnames, tuple, kw)) return nullptr;
  PyObject* r = PyObject_CallFunctionObjArgs(call->general, args[0], tuple, kw, nullptr);
  Py_DECREF(tuple);
  Py_DECREF(kw);
  return r;
}

// _ScriptType.__call__: args[0] is the class. An instance made with the same positional
// arguments (of the same types) as an earlier one joins that one's Shared state here (as
// script._ScriptType.__call__ does, which runs for everything else: keyword arguments, a class
// never called, constructor arguments not seen before).
PyObject* script_construct(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  static PyObject *s_sig = interned("_tilus_signature"), *s_known = interned("by_constructor"),
                  *s_tuner = interned("tuner"), *s_entry = interned("entry"), *s_attrs = interned("attrs"),
                  *s_tilus_tuner = interned("_tilus_tuner"), *s_shared = interned("_tilus_shared"),
                  *s_fast = interned("_tilus_fast");
  auto* call = reinterpret_cast<ScriptCall*>(self);
  size_t nargs = PyVectorcall_NARGS(nargsf);
  auto general = [&]() -> PyObject* {
    return PyObject_Vectorcall(call->general, args, nargsf, kwnames);
  };
  if (nargs < 1 || !PyType_Check(args[0]) || (kwnames && PyTuple_GET_SIZE(kwnames))) return general();
  auto* cls = reinterpret_cast<PyTypeObject*>(args[0]);
  PyObject* known = PyDict_GetItemWithError(call->launch_globals, s_known);  // borrowed
  if (!known || !PyDict_Check(known) || !PyDict_GetItemWithError(cls->tp_dict, s_sig)) {
    if (PyErr_Occurred()) return nullptr;
    return general();
  }
  // (cls, args, their types), as _ScriptType builds it.
  PyObject* key = PyTuple_New(3);
  PyObject* values = PyTuple_New(Py_ssize_t(nargs - 1));
  PyObject* types = PyTuple_New(Py_ssize_t(nargs - 1));
  if (!key || !values || !types) {
    Py_XDECREF(key), Py_XDECREF(values), Py_XDECREF(types);
    return nullptr;
  }
  for (size_t i = 1; i < nargs; ++i) {
    PyTuple_SET_ITEM(values, Py_ssize_t(i - 1), Py_NewRef(args[i]));
    PyTuple_SET_ITEM(types, Py_ssize_t(i - 1), Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(args[i]))));
  }
  PyTuple_SET_ITEM(key, 0, Py_NewRef(args[0]));
  PyTuple_SET_ITEM(key, 1, values);
  PyTuple_SET_ITEM(key, 2, types);
  PyObject* hit = PyDict_GetItemWithError(known, key);  // borrowed
  Py_DECREF(key);
  if (!hit) {
    PyErr_Clear();  // not seen, or an unhashable argument: the Python construction decides
    return general();
  }
  Py_INCREF(hit);
  PyObject* result = nullptr;
  PyObject *tuner = nullptr, *entry = nullptr, *inst = nullptr, *d = nullptr;
  do {
    if (!(tuner = PyObject_GetAttr(hit, s_tuner)) || !(entry = PyObject_GetAttr(hit, s_entry))) break;
    if (tuner != Py_None) {  // an autotuned class: made straight onto its tuner, no constructor run
      PyObject* empty = PyTuple_New(0);
      inst = empty ? cls->tp_new(cls, empty, nullptr) : nullptr;
      Py_XDECREF(empty);
      if (!inst || !(d = PyObject_GenericGetDict(inst, nullptr))) break;
      if (PyDict_SetItem(d, s_tilus_tuner, tuner) < 0) break;
    } else {
      PyObject* ctor_args = PyTuple_New(Py_ssize_t(nargs - 1));
      if (!ctor_args) break;
      for (size_t i = 1; i < nargs; ++i) PyTuple_SET_ITEM(ctor_args, Py_ssize_t(i - 1), Py_NewRef(args[i]));
      inst = PyType_Type.tp_call(args[0], ctor_args, nullptr);
      Py_DECREF(ctor_args);
      if (!inst || !(d = PyObject_GenericGetDict(inst, nullptr))) break;
      PyObject* attrs = PyObject_GetAttr(hit, s_attrs);
      if (!attrs) break;
      // The constructor set the same attributes (else it is not a function of its arguments).
      int same = PyObject_RichCompareBool(d, attrs, Py_EQ);
      Py_DECREF(attrs);
      if (same < 0) break;
      if (!same) {
        result = Py_NewRef(inst);
        break;
      }
      if (PyDict_SetItem(d, s_shared, hit) < 0) break;
    }
    if (entry != Py_None && PyDict_SetItem(d, s_fast, entry) < 0) break;
    result = Py_NewRef(inst);
  } while (false);
  Py_XDECREF(tuner), Py_XDECREF(entry), Py_XDECREF(inst), Py_XDECREF(d);
  Py_DECREF(hit);
  return result;
}

PyObject* script_call_get(PyObject* self, PyObject* obj, PyObject* type) {
  if (!obj || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

void script_call_dealloc(PyObject* self) {
  auto* call = reinterpret_cast<ScriptCall*>(self);
  PyObject_GC_UnTrack(self);
  Py_CLEAR(call->general);
  Py_CLEAR(call->dict);
  Py_CLEAR(call->launch_globals);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);  // a heap type's instances hold a reference to it
}

int script_call_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* call = reinterpret_cast<ScriptCall*>(self);
  Py_VISIT(call->general);
  Py_VISIT(call->dict);
  Py_VISIT(call->launch_globals);
  return 0;
}

int script_call_clear(PyObject* self) {
  auto* call = reinterpret_cast<ScriptCall*>(self);
  Py_CLEAR(call->general);
  Py_CLEAR(call->dict);
  Py_CLEAR(call->launch_globals);
  return 0;
}

PyTypeObject* script_call_type() {
  static PyTypeObject* type = [] {
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, reinterpret_cast<void*>(script_call_dealloc)},
        {Py_tp_traverse, reinterpret_cast<void*>(script_call_traverse)},
        {Py_tp_clear, reinterpret_cast<void*>(script_call_clear)},
        {Py_tp_descr_get, reinterpret_cast<void*>(script_call_get)},
        {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
        {Py_tp_getattro, reinterpret_cast<void*>(PyObject_GenericGetAttr)},
        {Py_tp_setattro, reinterpret_cast<void*>(PyObject_GenericSetAttr)},
        {0, nullptr}};
    static PyMemberDef members[] = {
        {"__vectorcalloffset__", T_PYSSIZET, Py_ssize_t(offsetof(ScriptCall, vectorcall)), READONLY, nullptr},
        {"__dictoffset__", T_PYSSIZET, Py_ssize_t(offsetof(ScriptCall, dict)), READONLY, nullptr},
        {nullptr, 0, 0, 0, nullptr}};
    static PyType_Slot all[std::size(slots) + 1];
    size_t k = 0;
    for (; slots[k].slot; ++k) all[k] = slots[k];
    all[k++] = {Py_tp_members, members};
    all[k] = {0, nullptr};
    static PyType_Spec spec = {"tilus._C.ScriptCall", int(sizeof(ScriptCall)), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR |
                                   Py_TPFLAGS_HAVE_VECTORCALL,
                               all};
    PyObject* t = PyType_FromSpec(&spec);
    if (!t) throw py::error_already_set();
    return reinterpret_cast<PyTypeObject*>(t);
  }();
  return type;
}

py::object make_script_call(py::object general, int kind, py::object launch_globals) {
  PyTypeObject* type = script_call_type();
  auto* call = PyObject_GC_New(ScriptCall, type);
  if (!call) throw py::error_already_set();
  call->vectorcall = kind == Construct ? script_construct : script_launch;
  call->general = general.release().ptr();
  call->dict = PyDict_New();
  call->launch_globals = launch_globals.is_none() ? nullptr : launch_globals.release().ptr();
  call->kind = kind;
  PyObject_GC_Track(reinterpret_cast<PyObject*>(call));
  if (kind == Construct && !call->launch_globals) {
    Py_DECREF(call);
    throw std::invalid_argument("a Construct ScriptCall needs launch.py's globals");
  }
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(call));
}

}  // namespace

void bind_fast_path(py::module_& m) {
  m.def("script_launch_call", [](py::object general) { return make_script_call(std::move(general), Launch, py::none()); },
        py::arg("general"),
        "A Script class's __call__ (internal): a C method descriptor that launches through the instance's fast "
        "path (its _tilus_fast entry) and else calls general(script, args, kwargs).");
  m.def("script_construct_call", [](py::object general, py::dict launch_globals) {
    return make_script_call(std::move(general), Construct, std::move(launch_globals));
  }, py::arg("general"), py::arg("launch_globals"),
        "The Script metaclass's __call__ (internal): an instance made with the positional arguments of an earlier "
        "one (launch.by_constructor) joins its Shared state; anything else calls general(cls, *args, **kw).");
  m.def("skip_launches", [](int delta) { return skip_depth += delta; }, py::arg("delta"),
        "Adds delta to this thread's depth of skipped launches (launch.skipped_launches); returns the depth.");

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
           "The general path's reading of a call's torch tensors (arguments in parameter order): per parameter "
           "(KernelArg, CUDA device or None), or None where launch._pointer reads it.")
      .def("add", &FastPath::add, py::arg("kernel"), py::arg("values"), py::arg("constants"),
           "Registers a kernel (GpuKernel or CpuKernel) compiled for a call's runtime values and constants, under "
           "the key __call__ computes.");
}

}  // namespace tilus::py_detail
