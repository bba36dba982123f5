// What the files of tilus._C share (internal to python/src): Python values as IR expressions and
// source locations, and the binding functions each file defines.
#pragma once

#include <pybind11/functional.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

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

namespace tilus::py_detail {

using namespace tilus;

// Python scalars as IR expressions: bool -> bool, int -> int32 (int64 when out of range),
// float -> float32, Expr as is.
inline Expr to_expr(const py::handle& h) {
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

inline std::vector<Expr> to_exprs(const py::iterable& xs) {
  std::vector<Expr> out;
  for (auto x : xs) out.push_back(to_expr(x));
  return out;
}

inline SourceLoc loc_of(const py::tuple& t) {
  SourceLoc l;
  if (t.size() >= 2) {
    l.file = t[0].cast<std::string>();
    l.line = t[1].cast<int>();
  }
  if (t.size() >= 3) l.function = t[2].cast<std::string>();
  return l;
}

// A source location as the front end passes it: (file, line[, function]).
using L = const py::tuple&;

// The bindings of the IR types (ir_bindings.cpp), the tracer (builder_bindings.cpp), Script
// classes' __call__ in C (script_call.cpp) and the launch fast path (fast_path.cpp).
void bind_ir(py::module_& m);
void bind_builder(py::module_& m);
void bind_script_call(py::module_& m);
void bind_fast_path(py::module_& m);

}  // namespace tilus::py_detail
