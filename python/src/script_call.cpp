// Script classes' __call__ and their metaclass's __call__ in C (tilus._C.script_launch_call,
// script_construct_call): the launch fast path first, without a Python frame. docs/python.md,
// "Launch overhead".
#include "fast_path.h"

#include <structmember.h>

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject* Py_NewRef(PyObject* o) {
  Py_INCREF(o);
  return o;
}
#endif

namespace tilus::py_detail {

namespace {

// Launches are skipped in this thread while depth > 0 (launch.skipped_launches: tilus.torch's fake
// functions run so).
thread_local int skip_depth = 0;

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

void bind_script_call(py::module_& m) {
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
}

}  // namespace tilus::py_detail
