// Scalar expressions of the tile IR: immutable trees shared by pointer.
//
// Integer `/` and `%` (Div, Mod) truncate toward zero like C and CUDA; FloorDiv and FloorMod
// round toward negative infinity like Python's `//` and `%`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tilus/ir/dtype.h"

namespace tilus {

enum class ExprKind : uint8_t { Var, IntImm, FloatImm, BoolImm, Unary, Binary, Select, Cast, Call };

enum class UnaryOp : uint8_t { Neg, Not, BitNot };

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Mod, FloorDiv, FloorMod, Min, Max,
  BitAnd, BitOr, BitXor, Shl, Shr,
  And, Or,
  Eq, Ne, Lt, Le, Gt, Ge,
};

const char* to_string(UnaryOp op);
const char* to_string(BinaryOp op);
bool is_comparison(BinaryOp op);
bool is_logical(BinaryOp op);

struct ExprNode {
  ExprKind kind;
  DataType dtype;
  ExprNode(ExprKind kind, DataType dtype) : kind(kind), dtype(dtype) {}
  virtual ~ExprNode() = default;
};

class Var;

// A handle to an immutable expression node. Cheap to copy. Comparison operators build
// expressions; use same_as() / structural_equal() to compare handles.
class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const ExprNode> node) : node_(std::move(node)) {}
  // Literals: int -> int32 (int64 when out of range), double/float -> float32, bool -> bool.
  Expr(int v);
  Expr(int64_t v);
  Expr(long long v);
  Expr(unsigned v);
  Expr(unsigned long v);
  Expr(double v);
  Expr(float v);
  Expr(bool v);

  bool defined() const { return node_ != nullptr; }
  const ExprNode* get() const { return node_.get(); }
  const ExprNode* operator->() const { return node_.get(); }
  const std::shared_ptr<const ExprNode>& node() const { return node_; }
  ExprKind kind() const { return node_->kind; }
  DataType dtype() const { return node_->dtype; }
  bool same_as(const Expr& o) const { return node_ == o.node_; }

  template <class T>
  const T* as() const {
    return node_ && node_->kind == T::static_kind ? static_cast<const T*>(node_.get()) : nullptr;
  }

  // Constant inspection.
  bool is_const() const;
  bool is_int_const() const;
  bool is_int_const(int64_t value) const;
  int64_t int_value() const;      // requires is_int_const()
  double float_value() const;     // IntImm / FloatImm / BoolImm as double

 private:
  std::shared_ptr<const ExprNode> node_;
};

enum class VarRole : uint8_t {
  Param,     // a kernel parameter
  Loop,      // a for-loop variable
  Local,     // a scalar declared in the body (let / mutable)
  Builtin,   // blockIdx.x, threadIdx.x, ...
  Binder,    // an index bound by an instruction (register init, elementwise template)
};

struct VarNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::Var;
  std::string name;
  VarRole role;
  uint64_t id;
  VarNode(std::string name, DataType dtype, VarRole role, uint64_t id)
      : ExprNode(ExprKind::Var, dtype), name(std::move(name)), role(role), id(id) {}
};

class Var : public Expr {
 public:
  Var() = default;
  Var(std::string name, DataType dtype, VarRole role = VarRole::Local);
  // Wraps an expression that must be a VarNode (InternalError otherwise).
  explicit Var(const Expr& e);
  const VarNode* operator->() const { return static_cast<const VarNode*>(get()); }
  const std::string& name() const { return (*this)->name; }
};

struct IntImmNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::IntImm;
  int64_t value;  // uint64 values are stored by bit pattern
  IntImmNode(int64_t v, DataType t) : ExprNode(ExprKind::IntImm, t), value(v) {}
};
struct FloatImmNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::FloatImm;
  double value;
  FloatImmNode(double v, DataType t) : ExprNode(ExprKind::FloatImm, t), value(v) {}
};
struct BoolImmNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::BoolImm;
  bool value;
  explicit BoolImmNode(bool v) : ExprNode(ExprKind::BoolImm, dtypes::boolean), value(v) {}
};
struct UnaryNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::Unary;
  UnaryOp op;
  Expr a;
  UnaryNode(UnaryOp op, Expr a, DataType t) : ExprNode(ExprKind::Unary, t), op(op), a(std::move(a)) {}
};
struct BinaryNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::Binary;
  BinaryOp op;
  Expr a, b;
  BinaryNode(BinaryOp op, Expr a, Expr b, DataType t)
      : ExprNode(ExprKind::Binary, t), op(op), a(std::move(a)), b(std::move(b)) {}
};
struct SelectNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::Select;
  Expr cond, t, f;
  SelectNode(Expr c, Expr t_, Expr f_, DataType dt)
      : ExprNode(ExprKind::Select, dt), cond(std::move(c)), t(std::move(t_)), f(std::move(f_)) {}
};
struct CastNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::Cast;
  Expr a;
  CastNode(Expr a, DataType t) : ExprNode(ExprKind::Cast, t), a(std::move(a)) {}
};
// Builtin math: abs, exp, exp2, log, log2, sqrt, rsqrt, sin, cos, round, floor, ceil, tanh, erf, pow.
struct CallNode : ExprNode {
  static constexpr ExprKind static_kind = ExprKind::Call;
  std::string name;
  std::vector<Expr> args;
  CallNode(std::string n, std::vector<Expr> a, DataType t)
      : ExprNode(ExprKind::Call, t), name(std::move(n)), args(std::move(a)) {}
};

// --- constructors (operands are promoted to a common type; see promote()) ----------------
Expr int_const(int64_t v, DataType t = dtypes::int32);
Expr float_const(double v, DataType t = dtypes::float32);
Expr bool_const(bool v);
// A constant of type t holding v (int, float or bool according to t).
Expr make_const(DataType t, double v);
Expr unary(UnaryOp op, const Expr& a);
Expr binary(BinaryOp op, const Expr& a, const Expr& b);
Expr select(const Expr& cond, const Expr& t, const Expr& f);
Expr cast(const Expr& a, DataType t);
Expr call(const std::string& name, std::vector<Expr> args);
Expr min(const Expr& a, const Expr& b);
Expr max(const Expr& a, const Expr& b);
Expr floor_div(const Expr& a, const Expr& b);
Expr floor_mod(const Expr& a, const Expr& b);
// ceil(a / b) for non-negative integers.
Expr cdiv(const Expr& a, const Expr& b);
Expr logical_and(const Expr& a, const Expr& b);
Expr logical_or(const Expr& a, const Expr& b);

Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);
Expr operator%(const Expr& a, const Expr& b);
Expr operator&(const Expr& a, const Expr& b);
Expr operator|(const Expr& a, const Expr& b);
Expr operator^(const Expr& a, const Expr& b);
Expr operator<<(const Expr& a, const Expr& b);
Expr operator>>(const Expr& a, const Expr& b);
Expr operator&&(const Expr& a, const Expr& b);
Expr operator||(const Expr& a, const Expr& b);
Expr operator==(const Expr& a, const Expr& b);
Expr operator!=(const Expr& a, const Expr& b);
Expr operator<(const Expr& a, const Expr& b);
Expr operator<=(const Expr& a, const Expr& b);
Expr operator>(const Expr& a, const Expr& b);
Expr operator>=(const Expr& a, const Expr& b);
Expr operator-(const Expr& a);
Expr operator!(const Expr& a);
Expr operator~(const Expr& a);

// Builtin variables (one node each per process, so they compare by identity).
namespace builtin {
const Var& block_idx(int dim);   // blockIdx.x / .y / .z
const Var& thread_idx();         // threadIdx.x (tilus kernels are 1-D in threads)
// The block's place in its thread-block cluster (0 without clusters): %cluster_ctaid.x/.y/.z,
// %cluster_ctarank, and the cluster's shape (the kernel's cluster attributes).
const Var& cluster_block_idx(int dim);  // clusterBlockIdx.x / .y / .z
const Var& cluster_block_rank();        // clusterBlockRank
const Var& cluster_dim(int dim);        // clusterDim.x / .y / .z
}  // namespace builtin

// --- utilities --------------------------------------------------------------------------
bool structural_equal(const Expr& a, const Expr& b);
size_t structural_hash(const Expr& e);
// Replaces variables (by identity) following `map`; unchanged subtrees are shared.
using VarMap = std::function<Expr(const Var&)>;  // returns an undefined Expr to keep a var
Expr substitute(const Expr& e, const VarMap& map);
// Collects the variables an expression uses (each once, in first-use order).
std::vector<Var> free_vars(const Expr& e);
// Evaluates an expression whose variables are all bound in `env`; nullopt when a variable
// is unbound or the result is undefined (division by zero).
struct EvalValue {
  DataType dtype;
  int64_t i = 0;    // integers and bool
  double f = 0.0;   // floats
};
std::optional<EvalValue> evaluate(const Expr& e,
                                  const std::function<std::optional<EvalValue>(const Var&)>& env);
// Short text form, the same as the IR printer uses.
std::string to_string(const Expr& e);
// The same with variable names chosen by `name_of` (the printer makes them unique).
std::string to_string(const Expr& e, const std::function<std::string(const VarNode&)>& name_of);

struct ExprPtrHash {
  size_t operator()(const Expr& e) const { return std::hash<const void*>()(e.get()); }
};
struct ExprPtrEqual {
  bool operator()(const Expr& a, const Expr& b) const { return a.same_as(b); }
};

}  // namespace tilus
