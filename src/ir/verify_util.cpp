// The verifier's shared helpers (verify_util.h).
#include "verify_util.h"

#include <algorithm>
#include <map>

namespace tilus::verify_detail {

std::string inst_name(const InstNode& inst) {
  std::string n = inst.display_name();
  return n.empty() ? std::string(inst.name()) : n;
}

std::string ty(const Tensor& t) { return t.defined() ? t.type_str() : std::string("an undefined tensor"); }

std::string expr_str(const Expr& e) { return e.defined() ? to_string(e) : std::string("<undefined>"); }

std::string exprs_str(const std::vector<Expr>& es) {
  std::string s = "[";
  for (size_t i = 0; i < es.size(); ++i) s += (i ? ", " : "") + expr_str(es[i]);
  return s + "]";
}

std::string ints_str(const std::vector<int>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

std::string ints_str(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

std::string dtype_str(const Expr& e) { return e.defined() ? e.dtype().name() : std::string("none"); }

const char* role_str(VarRole r) {
  switch (r) {
    case VarRole::Param: return "kernel parameter";
    case VarRole::Loop: return "loop variable";
    case VarRole::Local: return "local variable";
    case VarRole::Builtin: return "builtin";
    case VarRole::Binder: return "instruction-bound variable";
  }
  return "variable";
}

[[noreturn]] void fail(const InstNode& inst, const std::string& what) {
  throw CompileError(fmt::format("{}: {}", inst_name(inst), what), inst.loc);
}

// The static shape of a tensor; nullopt when a dim is undefined or not a constant.
std::optional<std::vector<int64_t>> static_dims(const Tensor& t) {
  if (!t.defined()) return std::nullopt;
  std::vector<int64_t> out;
  for (auto& d : t.shape()) {
    if (!d.defined() || !d.is_int_const()) return std::nullopt;
    out.push_back(d.int_value());
  }
  return out;
}

// The shape of a tensor that the checks before made sure is static.
std::vector<int64_t> dims_of(const Tensor& t) { return static_dims(t).value_or(std::vector<int64_t>{}); }

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

bool is_integer_expr(const Expr& e) { return e.defined() && e.dtype().is_integer(); }

bool same_shape_expr(const Expr& a, const Expr& b) {
  if (!a.defined() || !b.defined()) return false;
  if (a.is_int_const() && b.is_int_const()) return a.int_value() == b.int_value();
  return structural_equal(a, b);
}

// Rule 1 (every instruction, from the traits its visit_fields declares): each tensor it
// defines or uses is defined and of a scope the instruction allows. Shared and register
// tensors must have a static positive shape, global tensors integer shape expressions with
// one stride per dim. No tensor holds void.
void expect_traits(const InstNode& inst) {
  std::map<std::string, int> seen;
  std::vector<InstNode::Operand> traits = inst.traits();
  std::map<std::string, int> count;
  for (auto& o : traits) ++count[o.name];
  // What the instruction reads before what it defines (whose type may derive from them).
  std::stable_partition(traits.begin(), traits.end(), [](const InstNode::Operand& o) { return !o.defines; });
  for (auto& o : traits) {
    // Repeated names ("inputs") are numbered: "input 0", "input 1".
    std::string role = o.name;
    if (count[o.name] > 1) {
      role = fmt::format("{} {}", role.back() == 's' ? role.substr(0, role.size() - 1) : role, seen[o.name]++);
    }
    const Tensor& t = o.tensor;
    std::string want = scopes_str(o.scopes);
    if (!t.defined())
      fail(inst, fmt::format("{} must be {} tensor{}, got an undefined tensor", role, want, o.region ? " region" : ""));
    if (!(o.scopes & scope_bit(t.scope()))) fail(inst, fmt::format("{} must be {} tensor, got {}", role, want, ty(t)));
    if (t.dtype().is_void())
      fail(inst, fmt::format("{} must have an element type, got {} (void)", role, ty(t)));
    if (t.is_global()) {
      for (auto& d : t.shape())
        if (!is_integer_expr(d))
          fail(inst, fmt::format("{} must have integer shape expressions, got {} ({} has type {})", role, ty(t),
                                 expr_str(d), dtype_str(d)));
      if (t->strides.size() != t.shape().size())
        fail(inst, fmt::format("{} has {} dims but {} strides {}, got {}", role, t.shape().size(), t->strides.size(),
                               exprs_str(t->strides), ty(t)));
      for (auto& st : t->strides)
        if (!is_integer_expr(st))
          fail(inst, fmt::format("{} must have integer strides, got {} with strides {} ({} has type {})", role, ty(t),
                                 exprs_str(t->strides), expr_str(st), dtype_str(st)));
      continue;
    }
    for (auto& d : t.shape())
      if (!d.defined() || !d.is_int_const() || d.int_value() <= 0)
        fail(inst, fmt::format("{} must have a static shape of positive dims, got {}", role, ty(t)));
  }
}

void expect_same_dtype(const InstNode& inst, const char* role_a, const Tensor& a, const char* role_b,
                       const Tensor& b) {
  if (a.dtype() != b.dtype())
    fail(inst, fmt::format("{} is {} and {} is {}: the element dtypes differ ({} vs {})", role_a, ty(a), role_b, ty(b),
                           a.dtype().name(), b.dtype().name()));
}

void expect_same_shape(const InstNode& inst, const char* role_a, const Tensor& a, const char* role_b,
                       const Tensor& b) {
  if (dims_of(a) != dims_of(b))
    fail(inst, fmt::format("{} is {} and {} is {}: the shapes differ ({} vs {})", role_a, ty(a), role_b, ty(b),
                           shape_str(a.shape()), shape_str(b.shape())));
}

// Rule 2: one integer offset per dim of `t`.
void expect_offsets(const InstNode& inst, const std::vector<Expr>& offsets, const char* role, const Tensor& t) {
  if (offsets.size() != size_t(t.rank()))
    fail(inst, fmt::format("needs {} offsets (one per dim of {} {}), got {}: {}", t.rank(), role, ty(t), offsets.size(),
                           exprs_str(offsets)));
  for (auto& o : offsets)
    if (!is_integer_expr(o))
      fail(inst, fmt::format("offsets must be integer expressions, got {} of type {} in {} (for {} {})", expr_str(o),
                             dtype_str(o), exprs_str(offsets), role, ty(t)));
}

// Rule 3: dims maps the tile's dims onto distinct dims of the target tensor.
void expect_dims(const InstNode& inst, const std::vector<int>& dims, const char* tile_role, const Tensor& tile,
                 const char* target_role, const Tensor& target) {
  if (dims.size() != size_t(tile.rank()))
    fail(inst, fmt::format("dims {} has {} entries but {} {} has rank {} (one dim of {} {} per tile dim)",
                           ints_str(dims), dims.size(), tile_role, ty(tile), tile.rank(), target_role, ty(target)));
  std::vector<bool> seen(std::max(target.rank(), 0), false);
  for (int d : dims) {
    if (d < 0 || d >= target.rank())
      fail(inst, fmt::format("dims {}: dim {} is out of range for {} {} (rank {})", ints_str(dims), d, target_role,
                             ty(target), target.rank()));
    if (seen[d]) fail(inst, fmt::format("dims {}: dim {} of {} {} appears twice", ints_str(dims), d, target_role, ty(target)));
    seen[d] = true;
  }
}

// dims of a squeeze / reduce: in [0, rank), distinct.
void expect_dim_set(const InstNode& inst, const std::vector<int>& dims, int rank, const std::string& of) {
  std::vector<bool> seen(std::max(rank, 0), false);
  for (int d : dims) {
    if (d < 0 || d >= rank)
      fail(inst, fmt::format("dims {}: dim {} is out of range for {} (rank {})", ints_str(dims), d, of, rank));
    if (seen[d]) fail(inst, fmt::format("dims {}: dim {} appears twice (for {})", ints_str(dims), d, of));
    seen[d] = true;
  }
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// An mbarrier operand: one uint64 element in shared memory (mbarrier.alloc's tensor or a
// view of one of its elements).
void check_barrier(const InstNode& i, const Tensor& b) {
  if (!b.defined() || !b.is_shared() || b.dtype() != dtypes::uint64 || b.num_elements() != 1)
    fail(i, fmt::format("the barrier must be one mbarrier (a uint64 shared element: mbarrier.alloc(...)[i]), got {}",
                        ty(b)));
}

}  // namespace tilus::verify_detail
