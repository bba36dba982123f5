#include "tilus/ir/expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/error.h"

namespace tilus {

namespace {
std::atomic<uint64_t> next_var_id{1};

Expr int_literal(int64_t v) {
  if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max())
    return int_const(v, dtypes::int32);
  return int_const(v, dtypes::int64);
}

// Truncates/sign-extends v to the width of integer type t.
int64_t wrap_int(int64_t v, DataType t) {
  int bits = t.bits();
  if (t.is_bool()) return v != 0;
  if (bits >= 64) return v;
  uint64_t mask = (uint64_t(1) << bits) - 1;
  uint64_t u = uint64_t(v) & mask;
  if (t.is_int() && (u >> (bits - 1)) & 1) return int64_t(u | ~mask);
  return int64_t(u);
}
}  // namespace

const char* to_string(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "-";
    case UnaryOp::Not: return "!";
    case UnaryOp::BitNot: return "~";
  }
  return "?";
}

const char* to_string(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "+";
    case BinaryOp::Sub: return "-";
    case BinaryOp::Mul: return "*";
    case BinaryOp::Div: return "/";
    case BinaryOp::Mod: return "%";
    case BinaryOp::FloorDiv: return "//";
    case BinaryOp::FloorMod: return "%%";
    case BinaryOp::Min: return "min";
    case BinaryOp::Max: return "max";
    case BinaryOp::BitAnd: return "&";
    case BinaryOp::BitOr: return "|";
    case BinaryOp::BitXor: return "^";
    case BinaryOp::Shl: return "<<";
    case BinaryOp::Shr: return ">>";
    case BinaryOp::And: return "&&";
    case BinaryOp::Or: return "||";
    case BinaryOp::Eq: return "==";
    case BinaryOp::Ne: return "!=";
    case BinaryOp::Lt: return "<";
    case BinaryOp::Le: return "<=";
    case BinaryOp::Gt: return ">";
    case BinaryOp::Ge: return ">=";
  }
  return "?";
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}
bool is_logical(BinaryOp op) { return op == BinaryOp::And || op == BinaryOp::Or; }

// --- Expr -----------------------------------------------------------------------------

Expr::Expr(int v) : Expr(int_const(v, dtypes::int32)) {}
Expr::Expr(int64_t v) : Expr(int_literal(v)) {}
Expr::Expr(long long v) : Expr(int_literal(static_cast<int64_t>(v))) {}
Expr::Expr(unsigned v) : Expr(int_literal(static_cast<int64_t>(v))) {}
Expr::Expr(unsigned long v) : Expr(int_literal(static_cast<int64_t>(v))) {}
Expr::Expr(double v) : Expr(float_const(v, dtypes::float32)) {}
Expr::Expr(float v) : Expr(float_const(v, dtypes::float32)) {}
Expr::Expr(bool v) : Expr(bool_const(v)) {}

bool Expr::is_const() const {
  return node_ && (node_->kind == ExprKind::IntImm || node_->kind == ExprKind::FloatImm ||
                   node_->kind == ExprKind::BoolImm);
}
bool Expr::is_int_const() const { return node_ && node_->kind == ExprKind::IntImm; }
bool Expr::is_int_const(int64_t value) const { return is_int_const() && int_value() == value; }
int64_t Expr::int_value() const {
  if (!is_int_const()) throw InternalError("int_value() of a non-integer-constant expression " + to_string(*this));
  return static_cast<const IntImmNode*>(node_.get())->value;
}
double Expr::float_value() const {
  if (auto i = as<IntImmNode>()) return dtype().is_uint() ? double(uint64_t(i->value)) : double(i->value);
  if (auto f = as<FloatImmNode>()) return f->value;
  if (auto b = as<BoolImmNode>()) return b->value ? 1.0 : 0.0;
  throw InternalError("float_value() of a non-constant expression " + to_string(*this));
}

Var::Var(std::string name, DataType dtype, VarRole role)
    : Expr(std::make_shared<VarNode>(std::move(name), dtype, role, next_var_id++)) {}

Var::Var(const Expr& e) : Expr(e) {
  if (!e.as<VarNode>()) throw InternalError("expected a variable, got " + to_string(e));
}

// --- constructors ---------------------------------------------------------------------

Expr int_const(int64_t v, DataType t) {
  if (t.is_bool()) return bool_const(v != 0);
  if (t.is_float()) return float_const(double(v), t);
  if (!t.is_integer()) throw InternalError("int_const of non-integer type " + t.name());
  return Expr(std::make_shared<IntImmNode>(wrap_int(v, t), t));
}
Expr float_const(double v, DataType t) {
  if (!t.is_float()) return make_const(t, v);
  return Expr(std::make_shared<FloatImmNode>(v, t));
}
Expr bool_const(bool v) { return Expr(std::make_shared<BoolImmNode>(v)); }

Expr make_const(DataType t, double v) {
  if (t.is_bool()) return bool_const(v != 0.0);
  if (t.is_integer()) {
    if (t.is_uint() && t.bits() == 64 && v >= 9223372036854775808.0)
      return int_const(int64_t(uint64_t(v)), t);
    return int_const(static_cast<int64_t>(v), t);
  }
  if (t.is_float()) return float_const(v, t);
  throw InternalError("cannot make a constant of type " + t.name());
}

namespace {
// An integer literal adopts the type of the other operand; otherwise the types are promoted.
DataType operand_type(const Expr& a, const Expr& b) {
  DataType ta = a.dtype(), tb = b.dtype();
  if (ta == tb) return ta;
  bool a_lit = a.is_const(), b_lit = b.is_const();
  if (a_lit && !b_lit && (ta.is_integer() || ta.is_bool()) && (tb.is_integer() || tb.is_float())) return tb;
  if (b_lit && !a_lit && (tb.is_integer() || tb.is_bool()) && (ta.is_integer() || ta.is_float())) return ta;
  if (a_lit && !b_lit && ta.is_float() && tb.is_float()) return tb;
  if (b_lit && !a_lit && tb.is_float() && ta.is_float()) return ta;
  return promote(ta, tb);
}

Expr convert(const Expr& e, DataType t) {
  if (e.dtype() == t) return e;
  if (e.is_const()) {
    if (auto i = e.as<IntImmNode>()) {
      if (t.is_integer()) return int_const(i->value, t);
      if (t.is_bool()) return bool_const(i->value != 0);
    }
    if (auto b = e.as<BoolImmNode>()) return make_const(t, b->value ? 1.0 : 0.0);
    if (t.is_float()) return float_const(e.float_value(), t);
  }
  return cast(e, t);
}

void check_defined(const Expr& e, const char* what) {
  if (!e.defined()) throw InternalError(fmt::format("undefined operand of {}", what));
}
}  // namespace

Expr unary(UnaryOp op, const Expr& a) {
  check_defined(a, to_string(op));
  switch (op) {
    case UnaryOp::Not: {
      Expr x = a.dtype().is_bool() ? a : (a != make_const(a.dtype(), 0));
      return Expr(std::make_shared<UnaryNode>(op, x, dtypes::boolean));
    }
    case UnaryOp::BitNot:
      if (!a.dtype().is_integer() && !a.dtype().is_bool())
        throw CompileError(fmt::format("operator ~ needs an integer operand, got {}", a.dtype().name()));
      return Expr(std::make_shared<UnaryNode>(op, a, a.dtype()));
    case UnaryOp::Neg:
      if (a.dtype().is_pointer() || a.dtype().is_bool())
        throw CompileError(fmt::format("operator - needs a numeric operand, got {}", a.dtype().name()));
      return Expr(std::make_shared<UnaryNode>(op, a, a.dtype()));
  }
  throw InternalError("bad unary op");
}

Expr binary(BinaryOp op, const Expr& a, const Expr& b) {
  check_defined(a, to_string(op));
  check_defined(b, to_string(op));
  if (is_logical(op)) {
    Expr x = a.dtype().is_bool() ? a : (a != make_const(a.dtype(), 0));
    Expr y = b.dtype().is_bool() ? b : (b != make_const(b.dtype(), 0));
    return Expr(std::make_shared<BinaryNode>(op, x, y, dtypes::boolean));
  }
  // Pointer arithmetic: pointer +- integer.
  if (a.dtype().is_pointer() || b.dtype().is_pointer()) {
    if ((op == BinaryOp::Add || op == BinaryOp::Sub) && a.dtype().is_pointer() && b.dtype().is_integer())
      return Expr(std::make_shared<BinaryNode>(op, a, b, a.dtype()));
    if (op == BinaryOp::Add && b.dtype().is_pointer() && a.dtype().is_integer())
      return Expr(std::make_shared<BinaryNode>(op, b, a, b.dtype()));
    if ((op == BinaryOp::Eq || op == BinaryOp::Ne) && a.dtype() == b.dtype())
      return Expr(std::make_shared<BinaryNode>(op, a, b, dtypes::boolean));
    throw CompileError(fmt::format("operator {} is not defined for {} and {}", to_string(op), a.dtype().name(),
                                   b.dtype().name()));
  }
  DataType t = operand_type(a, b);
  bool integer_only = op == BinaryOp::BitAnd || op == BinaryOp::BitOr || op == BinaryOp::BitXor ||
                      op == BinaryOp::Shl || op == BinaryOp::Shr || op == BinaryOp::Mod ||
                      op == BinaryOp::FloorMod;
  if (integer_only && t.is_float() && op != BinaryOp::Mod && op != BinaryOp::FloorMod)
    throw CompileError(fmt::format("operator {} needs integer operands, got {} and {}", to_string(op),
                                   a.dtype().name(), b.dtype().name()));
  Expr x = convert(a, t), y = convert(b, t);
  DataType result = is_comparison(op) ? dtypes::boolean : t;
  return Expr(std::make_shared<BinaryNode>(op, x, y, result));
}

Expr select(const Expr& cond, const Expr& t, const Expr& f) {
  check_defined(cond, "select");
  DataType dt = operand_type(t, f);
  Expr c = cond.dtype().is_bool() ? cond : (cond != make_const(cond.dtype(), 0));
  return Expr(std::make_shared<SelectNode>(c, convert(t, dt), convert(f, dt), dt));
}

Expr cast(const Expr& a, DataType t) {
  check_defined(a, "cast");
  if (a.dtype() == t) return a;
  return Expr(std::make_shared<CastNode>(a, t));
}

Expr call(const std::string& name, std::vector<Expr> args) {
  if (args.empty()) throw InternalError("call of " + name + " without arguments");
  DataType t = args[0].dtype();
  for (size_t i = 1; i < args.size(); ++i) t = operand_type(args[0], args[i]);
  // Math on integers is done in float32.
  if (name != "abs" && !t.is_float()) t = dtypes::float32;
  for (auto& a : args) a = convert(a, t);
  return Expr(std::make_shared<CallNode>(name, std::move(args), t));
}

Expr min(const Expr& a, const Expr& b) { return binary(BinaryOp::Min, a, b); }
Expr max(const Expr& a, const Expr& b) { return binary(BinaryOp::Max, a, b); }
Expr floor_div(const Expr& a, const Expr& b) { return binary(BinaryOp::FloorDiv, a, b); }
Expr floor_mod(const Expr& a, const Expr& b) { return binary(BinaryOp::FloorMod, a, b); }
Expr cdiv(const Expr& a, const Expr& b) { return (a + b - 1) / b; }
Expr logical_and(const Expr& a, const Expr& b) { return binary(BinaryOp::And, a, b); }
Expr logical_or(const Expr& a, const Expr& b) { return binary(BinaryOp::Or, a, b); }

Expr operator+(const Expr& a, const Expr& b) { return binary(BinaryOp::Add, a, b); }
Expr operator-(const Expr& a, const Expr& b) { return binary(BinaryOp::Sub, a, b); }
Expr operator*(const Expr& a, const Expr& b) { return binary(BinaryOp::Mul, a, b); }
Expr operator/(const Expr& a, const Expr& b) { return binary(BinaryOp::Div, a, b); }
Expr operator%(const Expr& a, const Expr& b) { return binary(BinaryOp::Mod, a, b); }
Expr operator&(const Expr& a, const Expr& b) { return binary(BinaryOp::BitAnd, a, b); }
Expr operator|(const Expr& a, const Expr& b) { return binary(BinaryOp::BitOr, a, b); }
Expr operator^(const Expr& a, const Expr& b) { return binary(BinaryOp::BitXor, a, b); }
Expr operator<<(const Expr& a, const Expr& b) { return binary(BinaryOp::Shl, a, b); }
Expr operator>>(const Expr& a, const Expr& b) { return binary(BinaryOp::Shr, a, b); }
Expr operator&&(const Expr& a, const Expr& b) { return binary(BinaryOp::And, a, b); }
Expr operator||(const Expr& a, const Expr& b) { return binary(BinaryOp::Or, a, b); }
Expr operator==(const Expr& a, const Expr& b) { return binary(BinaryOp::Eq, a, b); }
Expr operator!=(const Expr& a, const Expr& b) { return binary(BinaryOp::Ne, a, b); }
Expr operator<(const Expr& a, const Expr& b) { return binary(BinaryOp::Lt, a, b); }
Expr operator<=(const Expr& a, const Expr& b) { return binary(BinaryOp::Le, a, b); }
Expr operator>(const Expr& a, const Expr& b) { return binary(BinaryOp::Gt, a, b); }
Expr operator>=(const Expr& a, const Expr& b) { return binary(BinaryOp::Ge, a, b); }
Expr operator-(const Expr& a) { return unary(UnaryOp::Neg, a); }
Expr operator!(const Expr& a) { return unary(UnaryOp::Not, a); }
Expr operator~(const Expr& a) { return unary(UnaryOp::BitNot, a); }

namespace builtin {
const Var& block_idx(int dim) {
  static const Var vars[3] = {Var("blockIdx.x", dtypes::int32, VarRole::Builtin),
                              Var("blockIdx.y", dtypes::int32, VarRole::Builtin),
                              Var("blockIdx.z", dtypes::int32, VarRole::Builtin)};
  if (dim < 0 || dim > 2) throw InternalError(fmt::format("blockIdx dimension {} out of range", dim));
  return vars[dim];
}
const Var& thread_idx() {
  static const Var v("threadIdx.x", dtypes::int32, VarRole::Builtin);
  return v;
}
const Var& cluster_block_idx(int dim) {
  static const Var vars[3] = {Var("clusterBlockIdx.x", dtypes::int32, VarRole::Builtin),
                              Var("clusterBlockIdx.y", dtypes::int32, VarRole::Builtin),
                              Var("clusterBlockIdx.z", dtypes::int32, VarRole::Builtin)};
  if (dim < 0 || dim > 2) throw InternalError(fmt::format("clusterBlockIdx dimension {} out of range", dim));
  return vars[dim];
}
const Var& cluster_block_rank() {
  static const Var v("clusterBlockRank", dtypes::int32, VarRole::Builtin);
  return v;
}
const Var& cluster_dim(int dim) {
  static const Var vars[3] = {Var("clusterDim.x", dtypes::int32, VarRole::Builtin),
                              Var("clusterDim.y", dtypes::int32, VarRole::Builtin),
                              Var("clusterDim.z", dtypes::int32, VarRole::Builtin)};
  if (dim < 0 || dim > 2) throw InternalError(fmt::format("clusterDim dimension {} out of range", dim));
  return vars[dim];
}
}  // namespace builtin

// --- utilities --------------------------------------------------------------------------

bool structural_equal(const Expr& a, const Expr& b) {
  if (a.same_as(b)) return true;
  if (!a.defined() || !b.defined()) return false;
  if (a.kind() != b.kind() || a.dtype() != b.dtype()) return false;
  switch (a.kind()) {
    case ExprKind::Var: return false;  // identity only
    case ExprKind::IntImm: return a.as<IntImmNode>()->value == b.as<IntImmNode>()->value;
    case ExprKind::FloatImm: {
      // 0.0 and -0.0 are different constants (1 / x tells them apart); all NaNs are alike.
      double x = a.as<FloatImmNode>()->value, y = b.as<FloatImmNode>()->value;
      return (x == y && std::signbit(x) == std::signbit(y)) || (std::isnan(x) && std::isnan(y));
    }
    case ExprKind::BoolImm: return a.as<BoolImmNode>()->value == b.as<BoolImmNode>()->value;
    case ExprKind::Unary: {
      auto x = a.as<UnaryNode>(), y = b.as<UnaryNode>();
      return x->op == y->op && structural_equal(x->a, y->a);
    }
    case ExprKind::Binary: {
      auto x = a.as<BinaryNode>(), y = b.as<BinaryNode>();
      return x->op == y->op && structural_equal(x->a, y->a) && structural_equal(x->b, y->b);
    }
    case ExprKind::Select: {
      auto x = a.as<SelectNode>(), y = b.as<SelectNode>();
      return structural_equal(x->cond, y->cond) && structural_equal(x->t, y->t) && structural_equal(x->f, y->f);
    }
    case ExprKind::Cast: return structural_equal(a.as<CastNode>()->a, b.as<CastNode>()->a);
    case ExprKind::Call: {
      auto x = a.as<CallNode>(), y = b.as<CallNode>();
      if (x->name != y->name || x->args.size() != y->args.size()) return false;
      for (size_t i = 0; i < x->args.size(); ++i)
        if (!structural_equal(x->args[i], y->args[i])) return false;
      return true;
    }
  }
  return false;
}

size_t structural_hash(const Expr& e) {
  auto mix = [](size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); };
  if (!e.defined()) return 0;
  size_t h = mix(size_t(e.kind()), std::hash<std::string>()(e.dtype().name()));
  switch (e.kind()) {
    case ExprKind::Var: return mix(h, std::hash<const void*>()(e.get()));
    case ExprKind::IntImm: return mix(h, std::hash<int64_t>()(e.as<IntImmNode>()->value));
    case ExprKind::FloatImm: {
      // NaNs with different payloads are structurally equal, so they must hash alike.
      double v = e.as<FloatImmNode>()->value;
      return mix(h, std::isnan(v) ? size_t(0x7ff8) : std::hash<double>()(v));
    }
    case ExprKind::BoolImm: return mix(h, e.as<BoolImmNode>()->value);
    case ExprKind::Unary: return mix(mix(h, size_t(e.as<UnaryNode>()->op)), structural_hash(e.as<UnaryNode>()->a));
    case ExprKind::Binary: {
      auto n = e.as<BinaryNode>();
      return mix(mix(mix(h, size_t(n->op)), structural_hash(n->a)), structural_hash(n->b));
    }
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      return mix(mix(mix(h, structural_hash(n->cond)), structural_hash(n->t)), structural_hash(n->f));
    }
    case ExprKind::Cast: return mix(h, structural_hash(e.as<CastNode>()->a));
    case ExprKind::Call: {
      auto n = e.as<CallNode>();
      h = mix(h, std::hash<std::string>()(n->name));
      for (auto& a : n->args) h = mix(h, structural_hash(a));
      return h;
    }
  }
  return h;
}

Expr substitute(const Expr& e, const VarMap& map) {
  if (!e.defined()) return e;
  switch (e.kind()) {
    case ExprKind::Var: {
      Expr r = map(Var(e));
      return r.defined() ? r : e;
    }
    case ExprKind::IntImm:
    case ExprKind::FloatImm:
    case ExprKind::BoolImm: return e;
    case ExprKind::Unary: {
      auto n = e.as<UnaryNode>();
      Expr a = substitute(n->a, map);
      return a.same_as(n->a) ? e : Expr(std::make_shared<UnaryNode>(n->op, a, n->dtype));
    }
    case ExprKind::Binary: {
      auto n = e.as<BinaryNode>();
      Expr a = substitute(n->a, map), b = substitute(n->b, map);
      if (a.same_as(n->a) && b.same_as(n->b)) return e;
      if (a.dtype() != n->a.dtype() || b.dtype() != n->b.dtype()) return binary(n->op, a, b);
      return Expr(std::make_shared<BinaryNode>(n->op, a, b, n->dtype));
    }
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      Expr c = substitute(n->cond, map), t = substitute(n->t, map), f = substitute(n->f, map);
      if (c.same_as(n->cond) && t.same_as(n->t) && f.same_as(n->f)) return e;
      return Expr(std::make_shared<SelectNode>(c, convert(t, n->dtype), convert(f, n->dtype), n->dtype));
    }
    case ExprKind::Cast: {
      auto n = e.as<CastNode>();
      Expr a = substitute(n->a, map);
      return a.same_as(n->a) ? e : cast(a, n->dtype);
    }
    case ExprKind::Call: {
      auto n = e.as<CallNode>();
      std::vector<Expr> args;
      bool changed = false;
      for (auto& a : n->args) {
        args.push_back(substitute(a, map));
        changed |= !args.back().same_as(a);
      }
      return changed ? Expr(std::make_shared<CallNode>(n->name, std::move(args), n->dtype)) : e;
    }
  }
  return e;
}

std::vector<Var> free_vars(const Expr& e) {
  std::vector<Var> out;
  std::unordered_set<const void*> seen;
  std::function<void(const Expr&)> walk = [&](const Expr& x) {
    if (!x.defined()) return;
    switch (x.kind()) {
      case ExprKind::Var:
        if (seen.insert(x.get()).second) out.push_back(Var(x));
        return;
      case ExprKind::Unary: walk(x.as<UnaryNode>()->a); return;
      case ExprKind::Binary: walk(x.as<BinaryNode>()->a); walk(x.as<BinaryNode>()->b); return;
      case ExprKind::Select:
        walk(x.as<SelectNode>()->cond); walk(x.as<SelectNode>()->t); walk(x.as<SelectNode>()->f);
        return;
      case ExprKind::Cast: walk(x.as<CastNode>()->a); return;
      case ExprKind::Call:
        for (auto& a : x.as<CallNode>()->args) walk(a);
        return;
      default: return;
    }
  };
  walk(e);
  return out;
}

// --- evaluation -------------------------------------------------------------------------

namespace {
EvalValue make_int(int64_t v, DataType t) { return EvalValue{t, wrap_int(v, t), 0.0}; }
EvalValue make_float(double v, DataType t) {
  // Round through the type's encoding so that narrow floats behave like the hardware.
  if (t != dtypes::float64) {
    if (t == dtypes::float32) v = double(float(v));
    else v = t.decode_float(t.encode_float(v));
  }
  return EvalValue{t, 0, v};
}
double as_double(const EvalValue& v) {
  if (v.dtype.is_float()) return v.f;
  if (v.dtype.is_uint()) return double(uint64_t(v.i));
  return double(v.i);
}
EvalValue convert_value(const EvalValue& v, DataType t) {
  if (t.is_float()) return make_float(as_double(v), t);
  if (t.is_bool()) return EvalValue{t, v.dtype.is_float() ? int64_t(v.f != 0.0) : int64_t(v.i != 0), 0.0};
  if (v.dtype.is_float()) {
    double f = std::trunc(v.f);
    if (std::isnan(f)) return make_int(0, t);
    if (t.is_uint() && f >= 9223372036854775808.0) return make_int(int64_t(uint64_t(f)), t);
    return make_int(int64_t(std::clamp(f, -9.2e18, 9.2e18)), t);
  }
  return make_int(v.i, t);
}
int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
// A comparison `op` of two values of one C type.
template <class T>
bool compare(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::Eq: return x == y;
    case BinaryOp::Ne: return x != y;
    case BinaryOp::Lt: return x < y;
    case BinaryOp::Le: return x <= y;
    case BinaryOp::Gt: return x > y;
    default: return x >= y;
  }
}
}  // namespace

std::optional<EvalValue> evaluate(const Expr& e, const std::function<std::optional<EvalValue>(const Var&)>& env) {
  using R = std::optional<EvalValue>;
  DataType t = e.dtype();
  switch (e.kind()) {
    case ExprKind::Var: return env(Var(e));
    case ExprKind::IntImm: return make_int(e.as<IntImmNode>()->value, t);
    case ExprKind::FloatImm: return make_float(e.as<FloatImmNode>()->value, t);
    case ExprKind::BoolImm: return EvalValue{t, e.as<BoolImmNode>()->value ? 1 : 0, 0.0};
    case ExprKind::Cast: {
      R a = evaluate(e.as<CastNode>()->a, env);
      if (!a) return std::nullopt;
      return convert_value(*a, t);
    }
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      R c = evaluate(n->cond, env);
      if (!c) return std::nullopt;
      return evaluate(c->i ? n->t : n->f, env);
    }
    case ExprKind::Unary: {
      auto n = e.as<UnaryNode>();
      R a = evaluate(n->a, env);
      if (!a) return std::nullopt;
      switch (n->op) {
        case UnaryOp::Not: return EvalValue{t, a->i ? 0 : 1, 0.0};
        // On bool (a 1-bit value) ~ flips the bit; widening it first would make ~x always true.
        case UnaryOp::BitNot: return t.is_bool() ? EvalValue{t, a->i ? 0 : 1, 0.0} : make_int(~a->i, t);
        case UnaryOp::Neg: return t.is_float() ? make_float(-a->f, t) : make_int(int64_t(0 - uint64_t(a->i)), t);
      }
      return std::nullopt;
    }
    case ExprKind::Binary: {
      auto n = e.as<BinaryNode>();
      if (n->op == BinaryOp::And || n->op == BinaryOp::Or) {
        R a = evaluate(n->a, env);
        if (!a) return std::nullopt;
        if (n->op == BinaryOp::And && !a->i) return EvalValue{t, 0, 0.0};
        if (n->op == BinaryOp::Or && a->i) return EvalValue{t, 1, 0.0};
        R b = evaluate(n->b, env);
        if (!b) return std::nullopt;
        return EvalValue{t, b->i ? 1 : 0, 0.0};
      }
      R a = evaluate(n->a, env), b = evaluate(n->b, env);
      if (!a || !b) return std::nullopt;
      DataType ot = n->a.dtype();
      if (is_comparison(n->op)) {
        bool r;
        if (ot.is_float()) {
          r = compare(n->op, a->f, b->f);
        } else if (ot.is_uint()) {
          r = compare(n->op, uint64_t(a->i), uint64_t(b->i));
        } else {
          r = compare(n->op, a->i, b->i);
        }
        return EvalValue{dtypes::boolean, r ? 1 : 0, 0.0};
      }
      if (t.is_pointer()) {
        int64_t elem = std::max<int64_t>(1, t.pointee().bits() / 8);
        int64_t off = b->i * elem;
        return EvalValue{t, n->op == BinaryOp::Add ? a->i + off : a->i - off, 0.0};
      }
      if (t.is_float()) {
        double x = a->f, y = b->f;
        switch (n->op) {
          case BinaryOp::Add: return make_float(x + y, t);
          case BinaryOp::Sub: return make_float(x - y, t);
          case BinaryOp::Mul: return make_float(x * y, t);
          case BinaryOp::Div: return make_float(x / y, t);
          case BinaryOp::FloorDiv: return make_float(std::floor(x / y), t);
          case BinaryOp::Mod: return make_float(std::fmod(x, y), t);
          case BinaryOp::FloorMod: return make_float(x - std::floor(x / y) * y, t);
          case BinaryOp::Min: return make_float(std::fmin(x, y), t);
          case BinaryOp::Max: return make_float(std::fmax(x, y), t);
          default: return std::nullopt;
        }
      }
      bool u = t.is_uint();
      int64_t x = a->i, y = b->i;
      uint64_t ux = uint64_t(x), uy = uint64_t(y);
      switch (n->op) {
        case BinaryOp::Add: return make_int(int64_t(ux + uy), t);
        case BinaryOp::Sub: return make_int(int64_t(ux - uy), t);
        case BinaryOp::Mul: return make_int(int64_t(ux * uy), t);
        case BinaryOp::Div:
          if (y == 0) return std::nullopt;
          if (u) return make_int(int64_t(ux / uy), t);
          if (x == std::numeric_limits<int64_t>::min() && y == -1) return make_int(x, t);
          return make_int(x / y, t);
        case BinaryOp::Mod:
          if (y == 0) return std::nullopt;
          if (u) return make_int(int64_t(ux % uy), t);
          if (y == -1) return make_int(0, t);
          return make_int(x % y, t);
        case BinaryOp::FloorDiv:
          if (y == 0) return std::nullopt;
          if (u) return make_int(int64_t(ux / uy), t);
          if (x == std::numeric_limits<int64_t>::min() && y == -1) return make_int(x, t);
          return make_int(floordiv(x, y), t);
        case BinaryOp::FloorMod:
          if (y == 0) return std::nullopt;
          if (u) return make_int(int64_t(ux % uy), t);
          if (y == -1) return make_int(0, t);
          return make_int(x - floordiv(x, y) * y, t);
        case BinaryOp::Min: return make_int(u ? int64_t(std::min(ux, uy)) : std::min(x, y), t);
        case BinaryOp::Max: return make_int(u ? int64_t(std::max(ux, uy)) : std::max(x, y), t);
        case BinaryOp::BitAnd: return make_int(x & y, t);
        case BinaryOp::BitOr: return make_int(x | y, t);
        case BinaryOp::BitXor: return make_int(x ^ y, t);
        case BinaryOp::Shl:
          if (y < 0 || y >= t.bits()) return std::nullopt;
          return make_int(int64_t(ux << y), t);
        case BinaryOp::Shr:
          if (y < 0 || y >= t.bits()) return std::nullopt;
          return make_int(u ? int64_t(ux >> y) : (x >> y), t);
        default: return std::nullopt;
      }
    }
    case ExprKind::Call: {
      auto n = e.as<CallNode>();
      std::vector<double> args;
      for (auto& a : n->args) {
        R v = evaluate(a, env);
        if (!v) return std::nullopt;
        args.push_back(as_double(*v));
      }
      double x = args[0], r;
      const std::string& f = n->name;
      if (f == "abs") r = std::fabs(x);
      else if (f == "exp") r = std::exp(x);
      else if (f == "exp2") r = t.is_float() && t.bits() <= 32 && x < -126 ? 0.0 : std::exp2(x);  // flushed as on the GPU
      else if (f == "log") r = std::log(x);
      else if (f == "log2") r = std::log2(x);
      else if (f == "sqrt") r = std::sqrt(x);
      else if (f == "rsqrt") r = 1.0 / std::sqrt(x);
      else if (f == "rcp") r = t.is_float() && t.bits() <= 32 && std::fabs(x) > 0x1p126 ? std::copysign(0.0, x) : 1.0 / x;  // flushed as on the GPU
      else if (f == "sin") r = std::sin(x);
      else if (f == "cos") r = std::cos(x);
      else if (f == "tanh") r = std::tanh(x);
      else if (f == "erf") r = std::erf(x);
      else if (f == "round") r = std::nearbyint(x);
      else if (f == "floor") r = std::floor(x);
      else if (f == "ceil") r = std::ceil(x);
      else if (f == "pow" && args.size() == 2) r = std::pow(x, args[1]);
      else return std::nullopt;
      if (t.is_float()) return make_float(r, t);
      return convert_value(EvalValue{dtypes::float64, 0, r}, t);
    }
  }
  return std::nullopt;
}

// --- printing ---------------------------------------------------------------------------

namespace {
int precedence(const Expr& e) {
  if (auto b = e.as<BinaryNode>()) {
    switch (b->op) {
      case BinaryOp::Mul: case BinaryOp::Div: case BinaryOp::Mod: case BinaryOp::FloorDiv: case BinaryOp::FloorMod:
        return 10;
      case BinaryOp::Add: case BinaryOp::Sub: return 9;
      case BinaryOp::Shl: case BinaryOp::Shr: return 8;
      case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge: return 7;
      case BinaryOp::Eq: case BinaryOp::Ne: return 6;
      case BinaryOp::BitAnd: return 5;
      case BinaryOp::BitXor: return 4;
      case BinaryOp::BitOr: return 3;
      case BinaryOp::And: return 2;
      case BinaryOp::Or: return 1;
      default: return 12;  // min / max print as calls
    }
  }
  if (e.as<UnaryNode>()) return 11;
  return 12;
}

std::string format_float(double v, DataType t) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  if (t != dtypes::float32) s += fmt::format("_{}", t.name());
  return s;
}

using Namer = std::function<std::string(const VarNode&)>;
std::string print_expr(const Expr& e, const Namer& nm);

std::string operand(const Expr& e, int parent, bool right, const Namer& nm) {
  std::string s = print_expr(e, nm);
  int p = precedence(e);
  if (p < parent || (right && p == parent && p < 11)) return "(" + s + ")";
  return s;
}

std::string print_expr(const Expr& e, const Namer& nm) {
  if (!e.defined()) return "<undefined>";
  switch (e.kind()) {
    case ExprKind::Var: return nm ? nm(*e.as<VarNode>()) : e.as<VarNode>()->name;
    case ExprKind::IntImm: {
      auto v = e.as<IntImmNode>()->value;
      DataType t = e.dtype();
      std::string s = t.is_uint() ? fmt::format("{}", uint64_t(v)) : fmt::format("{}", v);
      if (t != dtypes::int32) s += fmt::format("_{}", t.name());
      return s;
    }
    case ExprKind::FloatImm: return format_float(e.as<FloatImmNode>()->value, e.dtype());
    case ExprKind::BoolImm: return e.as<BoolImmNode>()->value ? "true" : "false";
    case ExprKind::Unary: {
      auto n = e.as<UnaryNode>();
      std::string inner = operand(n->a, 11, false, nm);
      // "-(-5)" and "-(-x)" must not print as "--5".
      if (!inner.empty() && inner[0] == to_string(n->op)[0]) inner = "(" + inner + ")";
      return std::string(to_string(n->op)) + inner;
    }
    case ExprKind::Binary: {
      auto n = e.as<BinaryNode>();
      if (n->op == BinaryOp::Min || n->op == BinaryOp::Max)
        return fmt::format("{}({}, {})", to_string(n->op), print_expr(n->a, nm), print_expr(n->b, nm));
      if (n->op == BinaryOp::FloorMod)
        return fmt::format("floor_mod({}, {})", print_expr(n->a, nm), print_expr(n->b, nm));
      int p = precedence(e);
      return fmt::format("{} {} {}", operand(n->a, p, false, nm), to_string(n->op), operand(n->b, p, true, nm));
    }
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      return fmt::format("select({}, {}, {})", print_expr(n->cond, nm), print_expr(n->t, nm), print_expr(n->f, nm));
    }
    case ExprKind::Cast: {
      auto n = e.as<CastNode>();
      return fmt::format("{}({})", e.dtype().name(), print_expr(n->a, nm));
    }
    case ExprKind::Call: {
      auto n = e.as<CallNode>();
      std::string s = n->name + "(";
      for (size_t i = 0; i < n->args.size(); ++i) s += (i ? ", " : "") + print_expr(n->args[i], nm);
      return s + ")";
    }
  }
  return "?";
}
}  // namespace

std::string to_string(const Expr& e) { return print_expr(e, nullptr); }
std::string to_string(const Expr& e, const Namer& name_of) { return print_expr(e, name_of); }

}  // namespace tilus
