// The launch fast path's readers of a call's arrays (FastPath, fast_path.h): torch tensors,
// tilus.Tensors, objects with __cuda_array_interface__ or __array_interface__ (cupy, numba, numpy)
// and DLPack objects; and stream= values.
#include "fast_path.h"

#include <dlfcn.h>

namespace tilus::py_detail {

namespace {

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

// Whether `dims` sizes and strides (in units of `elem`: bytes, or 1 for element strides) describe
// a dense row-major array (torch's is_contiguous(): size-1 dims and empty arrays are).
bool row_major(const int64_t* shape, const int64_t* strides, size_t dims, int64_t elem) {
  for (size_t k = 0; k < dims; ++k)
    if (shape[k] == 0) return true;
  int64_t expected = elem;
  for (size_t k = dims; k-- > 0;) {
    if (shape[k] != 1 && strides[k] != expected) return false;
    expected *= shape[k];
  }
  return true;
}
bool row_major(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t elem) {
  return strides.size() == shape.size() && row_major(shape.data(), strides.data(), shape.size(), elem);
}

}  // namespace

namespace {

// A tensor's shim handle: the address of its TensorImpl* (an at::Tensor is that one pointer),
// read through TensorBase's `_cdata` getter; false when the getter fails.
bool shim_handle(const TorchShim& s, PyObject* a, void*& impl) {
  PyObject* cdata = s.cdata(a, s.cdata_closure);
  if (!cdata) {
    PyErr_Clear();
    return false;
  }
  impl = PyLong_AsVoidPtr(cdata);
  Py_DECREF(cdata);
  if (!impl) PyErr_Clear();
  return impl != nullptr;
}

}  // namespace

const TorchShim* TorchShim::get() {
  // Found once per process, under the GIL and without a C++ static-initialization guard: the
  // search calls into Python (import, torch.empty), which may hand the GIL to another thread, and
  // a thread that then waited on a guard while holding the GIL would never let the first finish
  // (the attention bench's 16 compile threads making their fast paths at once hung that way).
  // Two threads may both search; they find the same shim, and the first stored is kept.
  static const TorchShim* shim = nullptr;
  static bool searched = false;
  if (searched) return shim;
  const TorchShim* found = []() -> const TorchShim* {
    void* lib = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);  // torch's, already loaded
    if (!lib) return nullptr;
    TorchShim s;
    auto find = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
      return f != nullptr;
    };
    if (!find(s.data_ptr, "aoti_torch_get_data_ptr") || !find(s.dim, "aoti_torch_get_dim") ||
        !find(s.sizes, "aoti_torch_get_sizes") || !find(s.strides, "aoti_torch_get_strides") ||
        !find(s.dtype, "aoti_torch_get_dtype") || !find(s.device_type, "aoti_torch_get_device_type") ||
        !find(s.device_index, "aoti_torch_get_device_index"))
      return nullptr;
    find(s.layout, "aoti_torch_get_layout");  // optional (older torch): strided is then assumed
    try {
      py::module_ torch = py::module_::import("torch");
      py::object tensor = torch.attr("Tensor"), parameter = torch.attr("nn").attr("Parameter");
      static PyObject* s_cdata = PyUnicode_InternFromString("_cdata");
      PyObject* mro = reinterpret_cast<PyTypeObject*>(tensor.ptr())->tp_mro;
      PyObject* descr = nullptr;
      for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro) && !descr; ++i)
        descr = PyDict_GetItemWithError(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i))->tp_dict, s_cdata);
      if (!descr || !Py_IS_TYPE(descr, &PyGetSetDescr_Type)) return nullptr;
      PyGetSetDef* def = reinterpret_cast<PyGetSetDescrObject*>(descr)->d_getset;
      s.cdata = def->get, s.cdata_closure = def->closure;
      s.tensor = reinterpret_cast<PyTypeObject*>(tensor.release().ptr());
      s.parameter = reinterpret_cast<PyTypeObject*>(parameter.release().ptr());
      // The check: what the shim says of a transposed 2x3 probe is what torch's attributes say.
      py::object probe = torch.attr("empty")(py::make_tuple(2, 3)).attr("t")();
      void* impl = nullptr;
      void* data = nullptr;
      int64_t dim = 0, *sizes = nullptr, *strides = nullptr;
      int32_t type = -1;
      if (!s.cdata || !shim_handle(s, probe.ptr(), impl) || s.data_ptr(&impl, &data) || s.dim(&impl, &dim) ||
          s.sizes(&impl, &sizes) || s.strides(&impl, &strides) || s.device_type(&impl, &type))
        return nullptr;
      bool same = reinterpret_cast<uintptr_t>(data) == probe.attr("data_ptr")().cast<uintptr_t>() && dim == 2 &&
                  sizes[0] == 3 && sizes[1] == 2 && strides[0] == 1 && strides[1] == 3 && type == 0;
      if (!same) return nullptr;
    } catch (py::error_already_set&) {
      PyErr_Clear();
      return nullptr;
    }
    return new TorchShim(s);  // for the process
  }();
  if (!searched) {
    shim = found;
    searched = true;
  } else {
    delete found;  // another thread's search finished first
  }
  return shim;
}

bool TorchShim::scalar_type(PyObject* torch_dtype, int32_t& code, int64_t& itemsize) const {
  static std::map<PyObject*, std::pair<int32_t, int64_t>> known;  // torch dtypes live as long as torch
  auto it = known.find(torch_dtype);
  if (it == known.end()) {
    try {
      py::object probe = py::module_::import("torch").attr("empty")(py::make_tuple(0), py::arg("dtype") = py::handle(torch_dtype));
      void* impl = nullptr;
      int32_t c = -1;
      if (!shim_handle(*this, probe.ptr(), impl) || dtype(&impl, &c)) return false;
      it = known.emplace(torch_dtype, std::make_pair(c, probe.attr("element_size")().cast<int64_t>())).first;
    } catch (py::error_already_set&) {
      PyErr_Clear();
      return false;
    }
  }
  code = it->second.first, itemsize = it->second.second;
  return true;
}

void FastPath::use_shim() {
  shim = tensor_type.is_none() ? nullptr : TorchShim::get();
  if (!shim) return;
  for (Param& p : params)
    if (p.kind == Pointer && p.torch_ok && !p.torch_dtype.is_none() &&
        !shim->scalar_type(p.torch_dtype.ptr(), p.scalar_type, p.itemsize))
      p.scalar_type = -1;
}

// A torch.Tensor or nn.Parameter (exactly) through the shim: the same facts as torch_array's
// attribute reads (dtype, device, address, is_contiguous() and nbytes), and its sizes and strides.
bool FastPath::shim_array(PyObject* a, const Param& p, ArrayInfo& info) const {
  const TorchShim& s = *shim;
  void* impl = nullptr;
  if (!shim_handle(s, a, impl)) return false;
  TorchShim::Handle h = &impl;
  int32_t dtype = -1, type = -1, index = 0, layout = 0;
  if (s.dtype(h, &dtype) || dtype != p.scalar_type || s.device_type(h, &type) || (type != 0 && type != 1)) return false;
  if (s.layout && (s.layout(h, &layout) || layout != 0)) return false;  // sparse, mkldnn, ...: the general path
  void* data = nullptr;
  int64_t dim = 0, *sizes = nullptr, *strides = nullptr;
  if (s.data_ptr(h, &data) || !data || s.dim(h, &dim) || s.sizes(h, &sizes) || s.strides(h, &strides)) return false;
  if (type == 1 && s.device_index(h, &index)) return false;
  int64_t numel = 1;
  for (int64_t k = 0; k < dim; ++k) numel *= sizes[k];
  bool dense = row_major(sizes, strides, size_t(dim), 1);  // torch's is_contiguous()
  info.addr = uint64_t(reinterpret_cast<uintptr_t>(data));
  info.bytes = dense ? numel * p.itemsize : -1;
  info.cuda = type == 1;
  info.device = index;
  info.torch = true;
  info.tensor = a;
  info.elem = p.dtype;
  info.torch_sizes = sizes, info.torch_strides = strides, info.torch_dim = dim;
  return true;
}

// A torch tensor: dtype (by identity), device, address, and whether it is dense.
// `extent`: whether its byte extent is read (the general path reads shape and strides instead).
bool FastPath::torch_array(PyObject* a, const Param& p, ArrayInfo& info, bool extent) const {
  static PyObject* s_dtype = PyUnicode_InternFromString("dtype");
  static PyObject* s_is_cuda = PyUnicode_InternFromString("is_cuda");
  static PyObject* s_is_cpu = PyUnicode_InternFromString("is_cpu");
  static PyObject* s_data_ptr = PyUnicode_InternFromString("data_ptr");
  static PyObject* s_get_device = PyUnicode_InternFromString("get_device");
  static PyObject* s_is_contiguous = PyUnicode_InternFromString("is_contiguous");
  static PyObject* s_nbytes = PyUnicode_InternFromString("nbytes");
  if (!p.torch_ok) return false;
  if (p.scalar_type >= 0 && (Py_TYPE(a) == shim->tensor || Py_TYPE(a) == shim->parameter))
    return shim_array(a, p, info);
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
bool FastPath::interface_array(PyObject* d, bool cuda, ArrayInfo& info) {
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
bool FastPath::dlpack_array(PyObject* dlpack_method, ArrayInfo& info) const {
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
bool FastPath::array(PyObject* a, const Param& p, ArrayInfo& info) const {
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

bool FastPath::interface_storage(PyObject* storage, ArrayInfo& info) {
  static PyObject* s_ai = PyUnicode_InternFromString("__array_interface__");
  PyObject* d = optional_attr(storage, s_ai);
  if (!d) return false;
  bool ok = interface_array(d, false, info);
  Py_DECREF(d);
  return ok;
}

// A stream= value: an int handle or an object with cuda_stream / ptr / handle.
bool FastPath::stream_handle(PyObject* s, uint64_t& out) {
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

}  // namespace tilus::py_detail
