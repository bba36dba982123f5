// The tracer entries of the register-tile computations: dot, elementwise operations, reductions,
// scans.
#include "../builder_util.h"

namespace tilus {

using namespace builder_detail;

Tensor Builder::dot(const Tensor& a, const Tensor& b, const Tensor& c, SourceLoc loc) {
  auto i = make_inst<DotInst>(loc);
  i->a = a;
  i->b = b;
  i->c = c;
  i->out = Tensor::reg("d", c.defined() ? c.dtype() : dtypes::void_t, c.defined() && c.is_register() ? static_dims(c)
                                                                                                    : std::vector<int64_t>{});
  return emit_with_output(i);
}

Tensor Builder::dot(const Tensor& a, const Tensor& b, std::optional<DataType> acc_dtype, SourceLoc loc) {
  if (!a.defined() || !b.defined()) throw CompileError("dot: a and b must be register tensors", loc);
  DataType dt = acc_dtype ? *acc_dtype : (a.dtype().is_float() ? dtypes::float32 : dtypes::int32);
  auto dim = [](const Tensor& t, int d) {
    return t.rank() == 2 && t.shape()[d].is_int_const() ? t.shape()[d].int_value() : int64_t(1);
  };
  Tensor acc = register_tensor(dt, {dim(a, 0), dim(b, 1)}, make_const(dt, 0), loc, "acc");
  return dot(a, b, acc, loc);
}

Tensor Builder::elementwise(const std::string& op, const std::vector<Tensor>& inputs,
                            const std::function<Expr(const std::vector<Expr>&)>& body, SourceLoc loc) {
  std::vector<std::vector<int64_t>> shapes;
  for (auto& t : inputs) {
    if (!t.defined() || !t.is_register())
      throw CompileError(fmt::format("{}: operands must be register tensors or scalars, got {}", op, type_of(t)), loc);
    shapes.push_back(static_dims(t));
  }
  if (inputs.empty()) throw CompileError(fmt::format("{}: needs at least one register tensor operand", op), loc);
  auto shape = broadcast_shapes(shapes);
  if (!shape) {
    std::string operands;
    for (size_t k = 0; k < inputs.size(); ++k) operands += (k ? " and " : "") + type_of(inputs[k]);
    throw CompileError(fmt::format("{}: cannot broadcast {}", op, operands), loc);
  }
  auto i = make_inst<ElementwiseInst>(loc);
  i->op = op;
  i->inputs = inputs;
  std::vector<Expr> args;
  for (size_t k = 0; k < inputs.size(); ++k) {
    i->params.push_back(Var(fmt::format("x{}", k), inputs[k].dtype(), VarRole::Binder));
    args.push_back(i->params.back());
  }
  try {
    i->body = body(args);
  } catch (const CompileError& e) {
    if (e.loc().valid()) throw;
    throw CompileError(fmt::format("{}: {}", op, e.message()), loc);
  }
  i->out = Tensor::reg(op, i->body.dtype(), *shape);
  return emit_with_output(i);
}

namespace {
// sigmoid(x) = 1 / (1 + e^-x); gelu(x) = x/2 (1 + erf(x / sqrt 2)) and its tanh form (torch's
// approximate="tanh") x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). 16-bit and smaller floats are
// computed in float32 and rounded once at the end.
Expr activation(const std::string& op, const Expr& x) {
  DataType t = x.dtype();
  bool wide = t == dtypes::float32 || t == dtypes::float64;
  DataType ct = wide ? t : dtypes::float32;
  Expr v = wide ? x : cast(x, ct);
  auto c = [&](double value) { return float_const(value, ct); };
  Expr r;
  if (op == "sigmoid") r = c(1.0) / (c(1.0) + call("exp", {-v}));
  else if (op == "gelu") r = c(0.5) * v * (c(1.0) + call("erf", {v * c(0.70710678118654752440)}));
  else r = c(0.5) * v * (c(1.0) + call("tanh", {c(0.79788456080286535588) * (v + c(0.044715) * v * v * v)}));
  return wide ? r : cast(r, t);
}
}  // namespace

Tensor Builder::unary(const std::string& op, const Tensor& x, SourceLoc loc) {
  if (x.defined() && is_math_op(op) && !x.dtype().is_float())
    throw CompileError(fmt::format("{}: needs a floating-point tensor, got {}", op, type_of(x)), loc);
  if (x.defined() && op == "bitnot" && !x.dtype().is_integer() && !x.dtype().is_bool())
    throw CompileError(fmt::format("bitwise not: needs an integer tensor, got {}", type_of(x)), loc);
  if (x.defined() && (op == "abs" || op == "neg" || op == "square") && !x.dtype().is_numeric())
    throw CompileError(fmt::format("{}: needs a numeric tensor, got {}", op, type_of(x)), loc);
  return elementwise(op, {x}, [&](const std::vector<Expr>& a) -> Expr {
    if (op == "neg") return -a[0];
    if (op == "not") return !a[0];
    if (op == "bitnot") return ~a[0];
    if (op == "square") return a[0] * a[0];
    if (op == "sigmoid" || op == "gelu" || op == "gelu_tanh") return activation(op, a[0]);
    return call(op, {a[0]});
  }, loc);
}

Tensor Builder::gelu(const Tensor& x, const std::string& approximate, SourceLoc loc) {
  if (x.defined() && x.is_register() && !x.dtype().is_float())
    throw CompileError(fmt::format("gelu: needs a floating-point tensor, got {}", type_of(x)), loc);
  if (approximate != "none" && approximate != "tanh")
    throw CompileError(fmt::format("gelu: approximate must be \"none\" or \"tanh\" (torch's), got \"{}\"", approximate),
                       loc);
  return unary(approximate == "none" ? "gelu" : "gelu_tanh", x, loc);
}

namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Mod: return "mod";
    case BinaryOp::FloorDiv: return "floordiv";
    case BinaryOp::FloorMod: return "floormod";
    case BinaryOp::Min: return "minimum";
    case BinaryOp::Max: return "maximum";
    case BinaryOp::BitAnd: return "bitwise_and";
    case BinaryOp::BitOr: return "bitwise_or";
    case BinaryOp::BitXor: return "bitwise_xor";
    case BinaryOp::Shl: return "shift_left";
    case BinaryOp::Shr: return "shift_right";
    case BinaryOp::And: return "logical_and";
    case BinaryOp::Or: return "logical_or";
    case BinaryOp::Eq: return "equal";
    case BinaryOp::Ne: return "not_equal";
    case BinaryOp::Lt: return "less";
    case BinaryOp::Le: return "less_equal";
    case BinaryOp::Gt: return "greater";
    case BinaryOp::Ge: return "greater_equal";
  }
  return "binary";
}

}  // namespace

Tensor Builder::binary(BinaryOp op, const Tensor& a, const Expr& a_scalar, const Tensor& b, const Expr& b_scalar,
                       SourceLoc loc) {
  const char* name = binary_name(op);
  std::vector<Tensor> inputs;
  if (a.defined()) inputs.push_back(a);
  if (b.defined()) inputs.push_back(b);
  if (inputs.empty()) throw CompileError(fmt::format("{}: needs at least one register tensor operand", name), loc);
  for (auto* s : {&a_scalar, &b_scalar})
    if (s->defined() && !(s->dtype().is_numeric() || s->dtype().is_bool()))
      throw CompileError(fmt::format("{}: scalar operand {} of type {} is not a number", name, to_string(*s),
                                     s->dtype().name()),
                         loc);
  DataType tensor_dtype = inputs[0].dtype();
  return elementwise(name, inputs, [&](const std::vector<Expr>& x) {
    size_t k = 0;
    Expr lhs = a.defined() ? x[k++] : adopt_scalar(a_scalar, tensor_dtype);
    Expr rhs = b.defined() ? x[k++] : adopt_scalar(b_scalar, tensor_dtype);
    return tilus::binary(op, lhs, rhs);
  }, loc);
}

Tensor Builder::where(const Tensor& cond, const Tensor& x, const Expr& x_scalar, const Tensor& y, const Expr& y_scalar,
                      SourceLoc loc) {
  if (!cond.defined() || !cond.is_register() || !cond.dtype().is_bool())
    throw CompileError(fmt::format("where: the condition must be a register tensor of bool, got {}", type_of(cond)), loc);
  std::vector<Tensor> inputs{cond};
  if (x.defined()) inputs.push_back(x);
  if (y.defined()) inputs.push_back(y);
  DataType value_dtype = x.defined() ? x.dtype() : (y.defined() ? y.dtype() : promote(x_scalar.dtype(), y_scalar.dtype()));
  return elementwise("where", inputs, [&](const std::vector<Expr>& v) {
    size_t k = 1;
    Expr tv = x.defined() ? v[k++] : adopt_scalar(x_scalar, value_dtype);
    Expr fv = y.defined() ? v[k++] : adopt_scalar(y_scalar, value_dtype);
    return select(v[0], tv, fv);
  }, loc);
}

Tensor Builder::clip(const Tensor& x, const Expr& lo, const Expr& hi, SourceLoc loc) {
  if (x.defined() && !x.dtype().is_numeric())
    throw CompileError(fmt::format("clip: needs a numeric tensor, got {}", type_of(x)), loc);
  return elementwise("clip", {x}, [&](const std::vector<Expr>& v) {
    DataType t = v[0].dtype();
    return tilus::min(tilus::max(v[0], adopt_scalar(lo, t)), adopt_scalar(hi, t));
  }, loc);
}

Tensor Builder::reduce(ReduceOp op, const Tensor& x, std::optional<std::vector<int>> dims, bool keepdim, SourceLoc loc) {
  auto i = make_inst<ReduceInst>(loc);
  i->x = x;
  i->op = op;
  i->keepdim = keepdim;
  int r = x.defined() ? x.rank() : 0;
  if (!dims) {
    dims = std::vector<int>(r);
    std::iota(dims->begin(), dims->end(), 0);
  }
  *dims = normalize_dims(*dims, x, to_string(op), loc);
  i->dims = *dims;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register()) {
    auto s = static_dims(x);
    for (int d = 0; d < r; ++d) {
      bool reduced = std::find(dims->begin(), dims->end(), d) != dims->end();
      if (!reduced) shape.push_back(s[d]);
      else if (keepdim) shape.push_back(1);
    }
  }
  DataType dt = x.defined() ? x.dtype() : dtypes::void_t;
  if (op == ReduceOp::Any || op == ReduceOp::All) dt = dtypes::boolean;
  i->out = Tensor::reg(to_string(op), dt, shape);
  return emit_with_output(i);
}

Tensor Builder::scan(const std::string& op, const Tensor& x, int dim, bool exclusive, SourceLoc loc) {
  static const std::map<std::string, BinaryOp> ops = {{"add", BinaryOp::Add},    {"mul", BinaryOp::Mul},
                                                      {"max", BinaryOp::Max},    {"min", BinaryOp::Min},
                                                      {"and", BinaryOp::BitAnd}, {"or", BinaryOp::BitOr},
                                                      {"xor", BinaryOp::BitXor}};
  auto it = ops.find(op);
  if (it == ops.end())
    throw CompileError(fmt::format("scan: op must be one of add, mul, max, min, and, or, xor; got '{}'", op), loc);
  if (!x.defined() || !x.is_register())
    throw CompileError(fmt::format("scan: x must be a register tensor, got {}", type_of(x)), loc);
  DataType t = x.dtype();
  bool bitwise = op == "and" || op == "or" || op == "xor";
  if (bitwise ? !(t.is_integer() || t.is_bool()) : !(t.is_numeric()) || t.is_bool())
    throw CompileError(fmt::format("scan: op '{}' needs {} elements, x is {}", op,
                                   bitwise ? "integer or bool" : "numeric (not bool)", type_of(x)),
                       loc);
  if (x.rank() == 0) throw CompileError(fmt::format("scan: x has no dims ({})", type_of(x)), loc);
  dim = normalize_dims({dim}, x, "scan", loc)[0];
  std::vector<int64_t> shape = static_dims(x);
  int64_t n = shape[size_t(dim)];
  Expr identity;
  if (op == "add" || op == "or" || op == "xor") identity = make_const(t, 0);
  else if (op == "mul") identity = make_const(t, 1);
  else if (op == "and") identity = t.is_bool() ? bool_const(true) : int_const(t.is_uint() ? int64_t(t.int_max()) : -1, t);
  else if (t.is_float()) identity = make_const(t, op == "max" ? -INFINITY : INFINITY);
  else identity = int_const(op == "max" ? t.int_min() : int64_t(t.int_max()), t);
  // buffer[.., 0:n, ..] = identity, buffer[.., n:2n, ..] = the running scan; a step reads the
  // running scan shifted by `step` as the slice at n - step.
  std::vector<int64_t> doubled = shape;
  doubled[size_t(dim)] = 2 * n;
  std::vector<int> all(shape.size());
  std::iota(all.begin(), all.end(), 0);
  Tensor buffer = shared_tensor(t, doubled, loc, "scan_buffer");
  auto slice_at = [&](int64_t offset) {
    std::vector<Expr> offsets(shape.size(), int_const(0));
    offsets[size_t(dim)] = int_const(offset);
    return slice_shared(buffer, offsets, all, shape, loc);
  };
  store_shared(slice_at(0), register_tensor(t, shape, identity, loc, "scan_identity"), loc);
  Tensor acc = x;
  for (int64_t step = 1; step < n; step *= 2) {
    store_shared(slice_at(n), acc, loc);
    sync(loc);
    Tensor partner = load_shared(slice_at(n - step), loc);
    sync(loc);  // every thread read its partner before the next step stores
    acc = binary(it->second, acc, Expr(), partner, Expr(), loc);
  }
  if (exclusive) {
    store_shared(slice_at(n), acc, loc);
    sync(loc);
    acc = load_shared(slice_at(n - 1), loc);
  }
  sync(loc);  // the buffer is read: it may be freed and reused
  free_shared(buffer, loc);
  return acc;
}

}  // namespace tilus
