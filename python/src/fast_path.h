// The launch fast path of Python calls (tilus._C.FastPath; internal to python/src): what one array
// argument says of itself and the FastPath, which reads a call's arguments (array_readers.cpp),
// builds its key and launches (fast_path.cpp); Script classes' __call__ in C run it
// (script_call.cpp). docs/python.md, "Launch overhead".
#pragma once

#include "kernels.h"

namespace tilus::py_detail {

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
  // A torch tensor read through torch's C shim: its sizes and strides (elements), borrowed from
  // the tensor (alive for the call); null otherwise.
  const int64_t* torch_sizes = nullptr;
  const int64_t* torch_strides = nullptr;
  int64_t torch_dim = 0;
};

// torch's C shim (torch/csrc/inductor/aoti_torch/c/shim.h, exported by libtorch_cpu with C
// linkage and kept ABI-stable by torch for AOTInductor): a tensor's metadata in a few plain C
// calls instead of six Python attribute reads. A handle is an at::Tensor*, i.e. the address of
// a TensorImpl* (what a tensor's `_cdata` says). array_readers.cpp finds and checks it once.
struct TorchShim {
  using Handle = void*;
  int32_t (*data_ptr)(Handle, void**) = nullptr;
  int32_t (*dim)(Handle, int64_t*) = nullptr;
  int32_t (*sizes)(Handle, int64_t**) = nullptr;
  int32_t (*strides)(Handle, int64_t**) = nullptr;
  int32_t (*dtype)(Handle, int32_t*) = nullptr;
  int32_t (*device_type)(Handle, int32_t*) = nullptr;
  int32_t (*device_index)(Handle, int32_t*) = nullptr;
  int32_t (*layout)(Handle, int32_t*) = nullptr;  // optional
  getter cdata = nullptr;  // TensorBase's `_cdata` getter (honours __torch_function__ as the attribute does)
  void* cdata_closure = nullptr;
  PyTypeObject *tensor = nullptr, *parameter = nullptr;  // the exact types read so: torch.Tensor, nn.Parameter

  // The shim of the torch this process imported, checked on a probe tensor; null without one.
  static const TorchShim* get();
  // torch's scalar type code and element bytes of a torch dtype (a probe tensor's); false if unknown.
  bool scalar_type(PyObject* torch_dtype, int32_t& code, int64_t& itemsize) const;
};

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
    int32_t scalar_type = -1;  // torch_dtype's scalar type code for the shim (-1: read through Python)
    int64_t itemsize = 0;      // torch_dtype's element bytes
  };
  std::vector<Param> params;
  std::vector<size_t> runtime;  // the runtime parameters (the signature's without its constants), in order
  py::object tensor_type;       // torch.Tensor (None without torch)
  py::object raw_stream;        // torch._C._cuda_getCurrentRawStream (None without torch's CUDA)
  py::object host_tensor_type;  // tilus.Tensor
  bool bucketed = false;        // a tuner's path: each int's tuning bucket is part of the key
  const TorchShim* shim = nullptr;  // torch's C shim (null: torch tensors read through Python)
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

  // The array readers (array_readers.cpp).
  bool torch_array(PyObject* a, const Param& p, ArrayInfo& info, bool extent = true) const;
  bool shim_array(PyObject* a, const Param& p, ArrayInfo& info) const;
  void use_shim();  // finds the shim and each pointer parameter's scalar type code
  static bool interface_array(PyObject* d, bool cuda, ArrayInfo& info);
  bool dlpack_array(PyObject* dlpack_method, ArrayInfo& info) const;
  bool array(PyObject* a, const Param& p, ArrayInfo& info) const;
  static bool interface_storage(PyObject* storage, ArrayInfo& info);
  static bool stream_handle(PyObject* s, uint64_t& out);

  // --- the call (fast_path.cpp) ------------------------------------------------------------------

  size_t param_of(PyObject* name) const;
  bool keyword(PyObject* name, PyObject* value, PyObject** argv, bool& explicit_stream, uint64_t& stream) const;
  bool call(PyObject* args, PyObject* kwargs);
  bool call_vector(PyObject* const* args, size_t nargs, PyObject* kwnames);
  bool launch_bound(PyObject** argv, bool explicit_stream, uint64_t stream);
  static bool constant_key(PyObject* a, int type, std::string& key);
  bool launch_cpu(const CpuKernelHandle& kernel, PyObject* const* argv, ArrayInfo* arrays);
  static bool torch_layout(const ArrayInfo& info, std::vector<int64_t>& shape, std::vector<int64_t>& strides);
  static bool torch_kernel_arg(const ArrayInfo& info, const Param& p, KernelArg& k);
  static bool declared_strides_hold(const ArrayInfo& info, const GpuKernel::FastContract& c, bool dense);
  py::tuple read_arrays(const py::sequence& args) const;
  py::object check_call(const py::sequence& args, const KernelSignature& signature) const;
  void add(py::object kernel, const py::sequence& values, const py::sequence& constants);
};

// The FastPath behind an entry made by FastPath.entry (fast_path.cpp); null for anything else.
FastPath* fast_path_of(PyObject* entry);

}  // namespace tilus::py_detail
