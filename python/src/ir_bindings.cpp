// tilus._C's IR types: data types, scalar expressions, variables, tensors, layouts, programs and
// the instructions' definitions.
#include "bindings.h"

namespace tilus::py_detail {

namespace {

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

}  // namespace

void bind_ir(py::module_& m) {
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
}

}  // namespace tilus::py_detail
