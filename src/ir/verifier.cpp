// Verification of the tile IR (DESIGN 6.1).
//
// verify_inst() checks one instruction alone: operand scopes, ranks, offsets arity, dims,
// shapes and dtypes. verify() walks a kernel in program order with a stack of scopes and
// checks what needs context: uses after definitions, scalar variable visibility, control
// flow, thread groups, layouts and the shared-memory budget.
//
// The verifier never trusts the IR it is given: undefined tensors, expressions and
// statements, wrong scopes and dynamic shapes where static ones are needed are reported as
// CompileErrors, never dereferenced. Every message starts with the instruction's display
// name and shows the operands as Tensor::type_str() prints them.
#include "tilus/ir/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/stmt.h"

namespace tilus {

namespace {

// ---------------------------------------------------------------------------------------
// Formatting helpers
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Shape helpers
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Operand checks shared by many instructions
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Per-instruction rules
// ---------------------------------------------------------------------------------------

void check_global_view(const GlobalViewInst& i) {
  if (!i.ptr.defined()) fail(i, fmt::format("ptr must be a pointer expression, got none (for out {})", ty(i.out)));
  DataType pt = i.ptr.dtype();
  if (!pt.is_pointer())
    fail(i, fmt::format("ptr must be a pointer expression, got {} of type {} (for out {})", expr_str(i.ptr), pt.name(),
                        ty(i.out)));
  DataType pointee = pt.pointee();
  if (pointee != i.out.dtype() && !pointee.is_void())
    fail(i, fmt::format("ptr {} has type {}, which points to {}, but the view out is {}: the dtype must be the "
                        "pointee's ({}) unless the pointer is void*",
                        expr_str(i.ptr), pt.name(), pointee.name(), ty(i.out), pointee.name()));
}

void check_allocate_register(const AllocateRegisterInst& i) {
  if (!i.axes.empty() && i.axes.size() != size_t(i.out.rank()))
    fail(i, fmt::format("the init function binds {} axes but out {} has rank {}", i.axes.size(), ty(i.out),
                        i.out.rank()));
  for (auto& a : i.axes)
    if (!a.defined() || !a.dtype().is_integer())
      fail(i, fmt::format("the axes of out {} must be integer variables, got {} of type {}", ty(i.out), expr_str(a),
                          dtype_str(a)));
  if (i.init.defined()) {
    DataType t = i.init.dtype();
    if (!(t.is_numeric() || t.is_bool()))
      fail(i, fmt::format("init must be a number or bool, got {} of type {} (for out {})", expr_str(i.init), t.name(),
                          ty(i.out)));
    if (t != i.out.dtype())
      fail(i, fmt::format("init {} has type {} but out is {}: the init must have the out's dtype", expr_str(i.init),
                          t.name(), ty(i.out)));
  }
}

void check_slice_shared(const SliceSharedInst& i) {
  expect_offsets(i, i.offsets, "src", i.src);
  expect_dims(i, i.dims, "out", i.out, "src", i.src);
  expect_same_dtype(i, "src", i.src, "out", i.out);
  auto src = dims_of(i.src), out = dims_of(i.out);
  for (size_t k = 0; k < i.dims.size(); ++k)
    if (out[k] > src[i.dims[k]])
      fail(i, fmt::format("out is {} and src is {}: out dim {} ({}) is larger than src dim {} ({})", ty(i.out),
                          ty(i.src), k, out[k], i.dims[k], src[i.dims[k]]));
  // Constant offsets must keep the slice inside src.
  for (int d = 0; d < i.src.rank(); ++d) {
    if (!i.offsets[d].is_int_const()) continue;
    int64_t o = i.offsets[d].int_value();
    auto it = std::find(i.dims.begin(), i.dims.end(), d);
    int64_t extent = it == i.dims.end() ? 1 : out[it - i.dims.begin()];
    if (o < 0 || o + extent > src[d])
      fail(i, fmt::format("offsets {}: dim {} takes [{}, {}), outside src {} (out {})", exprs_str(i.offsets), d, o,
                          o + extent, ty(i.src), ty(i.out)));
  }
}

void check_reshape_shared(const ReshapeSharedInst& i) {
  expect_same_dtype(i, "src", i.src, "out", i.out);
  if (i.src.defined() && i.out.defined() && i.src.num_elements() != i.out.num_elements())
    fail(i, fmt::format("out is {} and src is {}: a reshape keeps the number of elements ({} != {})", ty(i.out),
                        ty(i.src), i.out.num_elements(), i.src.num_elements()));
}

void check_load_global(const LoadGlobalInst& i) {
  expect_offsets(i, i.offsets, "src", i.src);
  expect_dims(i, i.dims, "out", i.out, "src", i.src);
  expect_same_dtype(i, "src", i.src, "out", i.out);
}

void check_store_global(const StoreGlobalInst& i) {
  expect_offsets(i, i.offsets, "dst", i.dst);
  expect_dims(i, i.dims, "src", i.src, "dst", i.dst);
  expect_same_dtype(i, "dst", i.dst, "src", i.src);
}

void check_load_shared(const LoadSharedInst& i) {
  expect_same_shape(i, "src", i.src, "out", i.out);
  expect_same_dtype(i, "src", i.src, "out", i.out);
}

void check_store_shared(const StoreSharedInst& i) {
  expect_same_shape(i, "dst", i.dst, "src", i.src);
  expect_same_dtype(i, "dst", i.dst, "src", i.src);
}

void check_copy_async(const CopyAsyncInst& i) {
  expect_offsets(i, i.offsets, "src", i.src);
  expect_dims(i, i.dims, "dst", i.dst, "src", i.src);
  expect_same_dtype(i, "src", i.src, "dst", i.dst);
}

void check_copy_async_wait_group(const CopyAsyncWaitGroupInst& i) {
  if (i.n < 0) fail(i, fmt::format("n must be >= 0 (the number of groups left pending), got {}", i.n));
}

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

void check_region(const InstNode& i, const char* role, const CopyRegion& r) {
  const Tensor& t = r.tensor;
  if (r.offsets.size() != size_t(t.rank()))
    fail(i, fmt::format("{} region needs {} offsets (one per dim of {}), got {}: {}", role, t.rank(), ty(t),
                        r.offsets.size(), exprs_str(r.offsets)));
  if (r.extents.size() != size_t(t.rank()))
    fail(i, fmt::format("{} region needs {} extents (one per dim of {}), got {}: {}", role, t.rank(), ty(t),
                        r.extents.size(), exprs_str(r.extents)));
  for (auto* list : {&r.offsets, &r.extents})
    for (auto& e : *list)
      if (!is_integer_expr(e))
        fail(i, fmt::format("{} region of {}: offsets and extents must be integer expressions, got {} of type {}", role,
                            ty(t), expr_str(e), dtype_str(e)));
  for (auto& e : r.extents)
    if (e.is_int_const() && e.int_value() <= 0)
      fail(i, fmt::format("{} region of {}: extents {} must be positive", role, ty(t), exprs_str(r.extents)));
  if (t.is_register()) {
    // Register regions are always the whole tensor.
    for (int d = 0; d < t.rank(); ++d)
      if (!r.offsets[d].is_int_const(0) || !same_shape_expr(r.extents[d], t.shape()[d]))
        fail(i, fmt::format("{} is {}: a register region must be the whole tensor, got offsets {} and extents {}", role,
                            ty(t), exprs_str(r.offsets), exprs_str(r.extents)));
  } else if (t.is_shared()) {
    for (auto& e : r.extents)
      if (!e.is_int_const())
        fail(i, fmt::format("{} region of {}: extents {} must be constants (a shared tile is static), got {}", role,
                            ty(t), exprs_str(r.extents), expr_str(e)));
    auto shape = dims_of(t);
    for (int d = 0; d < t.rank(); ++d) {
      if (!r.offsets[d].is_int_const() || !r.extents[d].is_int_const()) continue;
      int64_t o = r.offsets[d].int_value(), e = r.extents[d].int_value();
      if (o < 0 || o + e > shape[d])
        fail(i, fmt::format("{} region (offsets {}, extents {}) leaves {} in dim {} ([{}, {}) vs extent {})", role,
                            exprs_str(r.offsets), exprs_str(r.extents), ty(t), d, o, o + e, shape[d]));
    }
  }
}

// An mbarrier operand: one uint64 element in shared memory (mbarrier.alloc's tensor or a
// view of one of its elements).
void check_barrier(const InstNode& i, const Tensor& b) {
  if (!b.defined() || !b.is_shared() || b.dtype() != dtypes::uint64 || b.num_elements() != 1)
    fail(i, fmt::format("the barrier must be one mbarrier (a uint64 shared element: mbarrier.alloc(...)[i]), got {}",
                        ty(b)));
}

void check_mbarrier_init(const MbarrierInitInst& i) {
  const Tensor& b = i.barriers;
  if (!b.defined() || !b.is_shared() || b.dtype() != dtypes::uint64 || b.rank() != 1 ||
      b.num_elements() != int64_t(i.counts.size()))
    fail(i, fmt::format("barriers must be a uint64 shared tensor of shape [{}] (one per count), got {}",
                        i.counts.size(), ty(b)));
  if (i.counts.empty()) fail(i, "counts must name at least one barrier");
  for (auto& c : i.counts) {
    if (!is_integer_expr(c))
      fail(i, fmt::format("counts must be integers, got {} of type {}", expr_str(c), dtype_str(c)));
    if (c.is_int_const() && (c.int_value() < 1 || c.int_value() > (int64_t(1) << 20) - 1))
      fail(i, fmt::format("an arrival count must be in [1, 2^20 - 1], got {}", c.int_value()));
  }
}

// The element types each PTX atom operation takes (red/atom .add: s32 u32 u64 f32 f64 f16 bf16;
// .min/.max: 32- and 64-bit integers; .exch: b32 b64; .cas: b16 b32 b64); sub is add of the
// negated operand (integers wrap, floats negate exactly).
bool atomic_dtype_ok(AtomicOp op, DataType t) {
  int bits = t.bits();
  bool wide_int = t.is_integer() && !t.is_bool() && (bits == 32 || bits == 64);
  switch (op) {
    case AtomicOp::Add:
    case AtomicOp::Sub:
      return wide_int || t == dtypes::float32 || t == dtypes::float64 || t == dtypes::float16 || t == dtypes::bfloat16;
    case AtomicOp::Min:
    case AtomicOp::Max: return wide_int;
    case AtomicOp::Exch: return !t.is_subbyte() && !t.is_bool() && (bits == 32 || bits == 64);
    case AtomicOp::Cas: return !t.is_subbyte() && !t.is_bool() && (bits == 16 || bits == 32 || bits == 64);
  }
  return false;
}

void check_atomic(const AtomicInst& i) {
  if (!i.dst.defined() || !i.values.defined()) fail(i, "needs dst and values");
  if (i.scatter() != i.indices.defined()) fail(i, "a scatter needs both dim and indices");
  if (i.store && (!i.scatter() || i.op != AtomicOp::Exch)) fail(i, "a plain store is a scatter with op exch");
  if (i.scatter()) {
    if (!i.indices.is_register() || !i.indices.dtype().is_integer())
      fail(i, fmt::format("indices must be a register tensor of integers, got {}", ty(i.indices)));
    expect_same_shape(i, "indices", i.indices, "values", i.values);
    if (i.dst.rank() != i.values.rank())
      fail(i, fmt::format("dst {} and values {} must have the same rank", ty(i.dst), ty(i.values)));
    if (i.scatter_dim >= i.dst.rank())
      fail(i, fmt::format("dim {} is out of range for dst {}", i.scatter_dim, ty(i.dst)));
    if (i.dst.is_shared()) {
      auto d = i.dst.static_shape(), v = i.values.static_shape();
      for (size_t k = 0; k < d.size() && k < v.size(); ++k)
        if (int(k) != i.scatter_dim && d[k] != v[k])
          fail(i, fmt::format("dst {} and values {} differ in dim {}, which is not the scatter dim {}", ty(i.dst),
                              ty(i.values), k, i.scatter_dim));
    }
  }
  if (i.dst.is_global()) {
    expect_offsets(i, i.offsets, "dst", i.dst);
    expect_dims(i, i.dims, "values", i.values, "dst", i.dst);
  } else {
    if (!i.offsets.empty()) fail(i, "a shared dst is the whole tensor (slice it first): no offsets");
    if (!i.scatter()) expect_same_shape(i, "dst", i.dst, "values", i.values);
  }
  expect_same_dtype(i, "dst", i.dst, "values", i.values);
  if (i.out.defined()) {
    expect_same_shape(i, "out", i.out, "values", i.values);
    expect_same_dtype(i, "out", i.out, "values", i.values);
  }
  if ((i.op == AtomicOp::Cas) != i.compare.defined())
    fail(i, i.compare.defined() ? "only cas takes compare" : "cas needs compare (the value each element must equal)");
  if (i.compare.defined()) {
    expect_same_shape(i, "compare", i.compare, "values", i.values);
    expect_same_dtype(i, "compare", i.compare, "values", i.values);
  }
  if (i.store) {
    if (i.values.dtype().is_subbyte()) fail(i, fmt::format("values are {}: cast to a byte-sized type first", ty(i.values)));
  } else if (!atomic_dtype_ok(i.op, i.values.dtype()))
    fail(i, fmt::format("values are {}: atomic {} takes {}", ty(i.values), to_string(i.op),
                        i.op == AtomicOp::Add || i.op == AtomicOp::Sub
                            ? "32- or 64-bit integers, float32, float64, float16 or bfloat16"
                        : i.op == AtomicOp::Min || i.op == AtomicOp::Max ? "32- or 64-bit integers"
                        : i.op == AtomicOp::Exch ? "32- or 64-bit elements"
                                                 : "16-, 32- or 64-bit elements"));
  if (i.sem != "relaxed" && i.sem != "acquire" && i.sem != "release" && i.sem != "acq_rel")
    fail(i, fmt::format("sem='{}' is not one of 'relaxed', 'acquire', 'release', 'acq_rel'", i.sem));
  if (i.scope != "cta" && i.scope != "cluster" && i.scope != "gpu" && i.scope != "sys")
    fail(i, fmt::format("scope='{}' is not one of 'cta', 'cluster', 'gpu', 'sys'", i.scope));
}

void check_item(const ItemInst& i) {
  if (!i.x.defined() || !i.x.is_register() || i.x.num_elements() != 1)
    fail(i, fmt::format("x must be a register tensor of one element, got {}", ty(i.x)));
  if (i.x.dtype().is_subbyte()) fail(i, fmt::format("x is {}: cast it to a byte-sized type first", ty(i.x)));
  if (!i.var.defined() || i.var.dtype() != i.x.dtype() || i.var->role != VarRole::Local)
    fail(i, "var must be a local scalar of x's dtype");
}

void check_shared_item_ptr(const SharedItemPtrInst& i) {
  if (!i.x.defined() || !i.x.is_shared()) fail(i, fmt::format("x must be a shared tensor, got {}", ty(i.x)));
  if (i.x.dtype().is_subbyte())
    fail(i, fmt::format("x is {}: its elements are packed below a byte and have no address of their own", ty(i.x)));
  if (!i.var.defined() || i.var.dtype() != i.x.dtype().pointer_to() || i.var->role != VarRole::Local)
    fail(i, "var must be a local scalar pointing to x's dtype");
}

void check_semaphore(const SemaphoreInst& i) {
  if (!i.semaphore.defined() || !i.semaphore.dtype().is_pointer() ||
      i.semaphore.dtype().pointee() != dtypes::int32)
    fail(i, fmt::format("the semaphore must be the address of an int32 in global memory (~int32, such as "
                        "g[i, j].item_ptr() of an int32 global_tensor), got {} of type {}",
                        expr_str(i.semaphore), dtype_str(i.semaphore)));
  if (!i.value.defined() || !i.value.dtype().is_integer())
    fail(i, fmt::format("value must be an integer (the semaphore is int32), got {} of type {}", expr_str(i.value),
                        dtype_str(i.value)));
}

void check_mbarrier(const MbarrierInst& i) {
  check_barrier(i, i.barrier);
  if (i.value_tensor.defined()) {
    const Tensor& t = i.value_tensor;
    if (i.op != MbarrierOp::Wait) fail(i, "only a wait takes its value from a register tensor");
    if (!t.is_register() || t.num_elements() != 1 || !(t.dtype().is_integer() || t.dtype().is_bool()))
      fail(i, fmt::format("phase must be a scalar or a one-element integer register tensor, got {}", ty(t)));
    return;
  }
  if (i.op == MbarrierOp::CpAsyncArrive) {
    if (i.cta_id.defined() || i.sem != "release" || i.scope != "cta")
      fail(i, "arrives on a barrier of this block, with release semantics at block scope (no cta_id, sem or scope)");
    return;
  }
  const char* what = i.op == MbarrierOp::Wait ? "phase" : i.op == MbarrierOp::Arrive ? "count" : "transaction_bytes";
  if (!is_integer_expr(i.value) && !(i.value.defined() && i.value.dtype().is_bool()))
    fail(i, fmt::format("{} must be an integer, got {} of type {}", what, expr_str(i.value), dtype_str(i.value)));
  if (i.value.is_int_const()) {
    int64_t v = i.value.int_value();
    if (i.op == MbarrierOp::Wait && v != 0 && v != 1)
      fail(i, fmt::format("phase is a parity, 0 or 1, got {}", v));
    if (i.op == MbarrierOp::Arrive && (v < 1 || v >= (int64_t(1) << 20)))
      fail(i, fmt::format("count must be in [1, 2^20 - 1], got {}", v));
    if (i.op != MbarrierOp::Wait && i.op != MbarrierOp::Arrive && (v < 0 || v >= (int64_t(1) << 20)))
      fail(i, fmt::format("transaction_bytes must be in [0, 2^20 - 1], got {}", v));
  }
  bool wait = i.op == MbarrierOp::Wait;
  if (wait ? (i.sem != "acquire" && i.sem != "relaxed") : (i.sem != "release" && i.sem != "relaxed"))
    fail(i, fmt::format("sem='{}' is not one of {}", i.sem, wait ? "'acquire', 'relaxed'" : "'release', 'relaxed'"));
  if (i.scope != "cta" && i.scope != "cluster")
    fail(i, fmt::format("scope='{}' is not one of 'cta', 'cluster'", i.scope));
  if (i.cta_id.defined() && !is_integer_expr(i.cta_id))
    fail(i, fmt::format("the peer block (cta_id / target_rank) must be an integer, got {} of type {}", expr_str(i.cta_id),
                        dtype_str(i.cta_id)));
}

void check_tma_wait_group(const TmaWaitGroupInst& i) {
  if (i.n < 0) fail(i, fmt::format("n must be >= 0 (the number of groups left pending), got {}", i.n));
}

void check_wgmma_wait_group(const WgmmaWaitGroupInst& i) {
  if (i.n < 0 || i.n > 7) fail(i, fmt::format("n must be from 0 to 7 (the wgmma groups left pending), got {}", i.n));
}

// wgmma.mma's operand rules that do not depend on layouts (select_instructions checks those).
void check_wgmma_mma(const WgmmaMmaInst& i) {
  if (!i.a.defined() || !(i.a.is_shared() || i.a.is_register()) || i.a.rank() != 2)
    fail(i, fmt::format("a must be a rank-2 shared or register tensor [m, k], got {}", ty(i.a)));
  if (!i.b.defined() || !i.b.is_shared() || i.b.rank() != 2)
    fail(i, fmt::format("b must be a rank-2 shared tensor [k, n] (a transposed [n, k] tile), got {}", ty(i.b)));
  if (!i.d.defined() || !i.d.is_register() || i.d.rank() != 2)
    fail(i, fmt::format("d must be a rank-2 register tensor [m, n], got {}", ty(i.d)));
  auto a = i.a.static_shape(), b = i.b.static_shape(), d = i.d.static_shape();
  if (a[1] != b[0])
    fail(i, fmt::format("a is {} and b is {}: the inner dims differ ({} vs {})", ty(i.a), ty(i.b), a[1], b[0]));
  if (d[0] != a[0] || d[1] != b[1])
    fail(i, fmt::format("a is {} and b is {}, so d must be [{}, {}], got {}", ty(i.a), ty(i.b), a[0], b[1], ty(i.d)));
  DataType ab = i.a.dtype(), dt = i.d.dtype();
  auto is_f8 = [](DataType t) { return t == dtypes::float8_e4m3 || t == dtypes::float8_e5m2; };
  bool f16 = ab == dtypes::float16, bf16 = ab == dtypes::bfloat16;
  bool f8 = is_f8(ab) && is_f8(i.b.dtype());
  if (!f16 && !bf16 && !is_f8(ab))
    fail(i, fmt::format("a and b must be float16, bfloat16, float8_e4m3 or float8_e5m2, got a {} and b {}", ty(i.a),
                        ty(i.b)));
  // wgmma's kinds: f16 x f16, bf16 x bf16, and any pair of the fp8 types (e4m3 and e5m2 mix).
  if (ab != i.b.dtype() && !f8)
    fail(i, fmt::format("a is {} and b is {}: a and b must have one dtype (only the fp8 types e4m3 and e5m2 mix)",
                        ty(i.a), ty(i.b)));
  if (!(dt == dtypes::float32 || (dt == dtypes::float16 && !bf16)))
    fail(i, fmt::format("d must be float32{} for {} operands, got {}", bf16 ? "" : " or float16", ab.name(), ty(i.d)));
  if (i.a.is_register() && f8)
    fail(i, fmt::format("a in registers must be float16 or bfloat16 (fp8 operands come from shared memory), got {}",
                        ty(i.a)));
  int64_t k = f8 ? 32 : 16;
  if (a[0] % 64 != 0) fail(i, fmt::format("m (a is {}) must be a multiple of 64 (wgmma's m64)", ty(i.a)));
  if (b[1] % 8 != 0) fail(i, fmt::format("n (b is {}) must be a multiple of 8", ty(i.b)));
  if (a[1] % k != 0) fail(i, fmt::format("k (a is {}) must be a multiple of {} for {}", ty(i.a), k, ab.name()));
}

void check_fence_proxy_async(const FenceProxyAsyncInst& i) {
  if (i.space != "shared" && i.space != "global")
    fail(i, fmt::format("space='{}' is not one of 'shared', 'global'", i.space));
}

void check_im2col(const Im2colInst& i) {
  if (!i.img.defined() || !i.img.is_global() || i.img.rank() != 4)
    fail(i, fmt::format("img must be a global NHWC tensor of rank 4, got {}", ty(i.img)));
  if (!i.col.defined() || !i.col.is_shared() || i.col.rank() != 2)
    fail(i, fmt::format("col must be a shared tensor of rank 2 ([pixels, kernel * kernel * channels] tile), got {}",
                        ty(i.col)));
  expect_same_dtype(i, "img", i.img, "col", i.col);
  for (auto* e : {&i.nhw_step, &i.c_step})
    if (!is_integer_expr(*e))
      fail(i, fmt::format("nhw_step and c_step must be integers, got {} of type {}", expr_str(*e), dtype_str(*e)));
  if (i.kernel < 1 || i.stride < 1 || i.dilation < 1 || i.pad < 0)
    fail(i, fmt::format("kernel, stride and dilation must be positive and pad non-negative, got kernel={}, stride={}, "
                        "dilation={}, pad={}",
                        i.kernel, i.stride, i.dilation, i.pad));
  if (i.barrier.defined()) check_barrier(i, i.barrier);
}

void check_copy(const CopyInst& i) {
  check_region(i, "src", i.src);
  check_region(i, "dst", i.dst);
  const Tensor& s = i.src.tensor;
  const Tensor& d = i.dst.tensor;
  if (s.is_register() && d.is_register())
    fail(i, fmt::format("src is {} and dst is {}: a register to register copy is an assign (use assign)", ty(s), ty(d)));
  expect_same_dtype(i, "src", s, "dst", d);
  // Extents pair right-aligned: equal, a 1 that broadcasts, or a dynamic extent.
  const auto& se = i.src.extents;
  const auto& de = i.dst.extents;
  size_t common = std::min(se.size(), de.size());
  for (size_t k = 0; k < common; ++k) {
    const Expr& a = se[se.size() - 1 - k];
    const Expr& b = de[de.size() - 1 - k];
    if (!a.is_int_const() || !b.is_int_const()) continue;
    int64_t x = a.int_value(), y = b.int_value();
    if (x != y && x != 1 && y != 1)
      fail(i, fmt::format("src is {} with extents {} and dst is {} with extents {}: extents {} and {} do not match "
                          "(right-aligned, equal or 1)",
                          ty(s), exprs_str(se), ty(d), exprs_str(de), x, y));
  }
  // Leading src dims that dst lacks have nowhere to go: they must be single elements (dst
  // dims that src lacks broadcast it).
  for (size_t k = 0; k + common < se.size(); ++k)
    if (se[k].is_int_const() && se[k].int_value() != 1)
      fail(i, fmt::format("src is {} with extents {} and dst is {} with extents {}: the leading src extents that dst "
                          "does not have must be 1",
                          ty(s), exprs_str(se), ty(d), exprs_str(de)));
  bool tma_load = i.api == CopyApi::TmaCopy || i.api == CopyApi::TmaGlobalToShared;
  bool tma_store = i.api == CopyApi::TmaSharedToGlobal || (i.api == CopyApi::TmaCopy && s.is_shared());
  if (i.api == CopyApi::TmaCopy && !((s.is_global() && d.is_shared()) || (s.is_shared() && d.is_global())))
    fail(i, fmt::format("TMA copies global to shared or shared to global memory, got src {} and dst {}", ty(s), ty(d)));
  if (i.api == CopyApi::TmaGlobalToShared && !(s.is_global() && d.is_shared()))
    fail(i, fmt::format("src must be a global tensor and dst a shared tensor, got src {} and dst {}", ty(s), ty(d)));
  if (i.api == CopyApi::TmaSharedToGlobal && !(s.is_shared() && d.is_global()))
    fail(i, fmt::format("src must be a shared tensor and dst a global tensor, got src {} and dst {}", ty(s), ty(d)));
  if (tma_load && !tma_store) {
    if (!i.barrier.defined())
      fail(i, fmt::format("a TMA load completes on an mbarrier: pass mbarrier= (a barrier from mbarrier.alloc); src {}, "
                          "dst {}",
                          ty(s), ty(d)));
  } else if (i.barrier.defined()) {
    fail(i, fmt::format("only TMA loads complete on an mbarrier; src {}, dst {}", ty(s), ty(d)));
  }
  if (i.barrier.defined()) check_barrier(i, i.barrier);
  if (i.multicast_mask.defined() && (i.api != CopyApi::TmaGlobalToShared || !i.multicast_mask.dtype().is_integer()))
    fail(i, fmt::format("multicast_mask is an integer mask of the cluster's blocks, for tma.global_to_shared only; got "
                        "{} on {} (src {}, dst {})",
                        i.multicast_mask.dtype().name(), i.display_name(), ty(s), ty(d)));
  if (i.cache_policy.defined()) {
    if (i.api != CopyApi::TmaGlobalToShared && i.api != CopyApi::TmaSharedToGlobal)
      fail(i, "cache_policy is for tma.global_to_shared and tma.shared_to_global; other copies take eviction_policy");
    if (!is_integer_expr(i.cache_policy))
      fail(i, fmt::format("cache_policy is a 64-bit L2 cache policy (an integer), got {} of type {}",
                          expr_str(i.cache_policy), dtype_str(i.cache_policy)));
    if (i.eviction_policy)
      fail(i, "give the L2 hint once: cache_policy or eviction_policy, not both");
  }
  if ((i.api == CopyApi::AsyncCopy || i.use_cp_async) && !(s.is_global() && d.is_shared()))
    fail(i, fmt::format("cp.async copies global to shared memory, got src {} and dst {}", ty(s), ty(d)));
  if (i.coalesced_width && !is_pow2(*i.coalesced_width))
    fail(i, fmt::format("coalesced_width must be a positive power of two, got {} (src {}, dst {})", *i.coalesced_width,
                        ty(s), ty(d)));
  if (i.scalar) {
    for (auto* list : {&se, &de})
      for (auto& e : *list)
        if (!e.is_int_const(1))
          fail(i, fmt::format("a scalar copy moves one element, got src extents {} and dst extents {}", exprs_str(se),
                              exprs_str(de)));
  }
  if (i.loop_layout.defined()) {
    // The copy's extents: right-aligned broadcast of the two sides (static only).
    size_t rank = std::max(se.size(), de.size());
    std::vector<int64_t> extents(rank, 1);
    bool is_static = true;
    for (size_t k = 0; k < rank; ++k) {
      int64_t v = 1;
      for (auto* list : {&se, &de}) {
        if (k >= list->size()) continue;
        const Expr& e = (*list)[list->size() - 1 - k];
        if (!e.is_int_const()) is_static = false;
        else v = std::max(v, e.int_value());
      }
      extents[rank - 1 - k] = v;
    }
    if (is_static) {
      auto strip = [](std::vector<int64_t> v) {
        while (!v.empty() && v.front() == 1) v.erase(v.begin());
        return v;
      };
      if (strip(i.loop_layout.shape()) != strip(extents))
        fail(i, fmt::format("loop_layout has shape {} but the copy from {} to {} has extents {}",
                            ints_str(i.loop_layout.shape()), ty(s), ty(d), ints_str(extents)));
    }
  }
}

void check_dot(const DotInst& i) {
  int r = i.a.rank();
  if (r != 2 && r != 3)
    fail(i, fmt::format("a must have rank 2 ([m, k]) or 3 ([batch, m, k]), got {}", ty(i.a)));
  for (auto [role, t] : {std::pair<const char*, const Tensor*>{"b", &i.b}, {"c", &i.c}, {"out", &i.out}})
    if (t->rank() != r)
      fail(i, fmt::format("a is {} and {} is {}: the ranks differ ({} vs {})", ty(i.a), role, ty(*t), r, t->rank()));
  auto a = dims_of(i.a), b = dims_of(i.b), c = dims_of(i.c), out = dims_of(i.out);
  int o = r - 2;  // the first matrix dim
  if (r == 3 && (a[0] != b[0] || a[0] != c[0]))
    fail(i, fmt::format("a is {}, b is {} and c is {}: the batch dims differ", ty(i.a), ty(i.b), ty(i.c)));
  int64_t m = a[o], k = a[o + 1], n = b[o + 1];
  if (b[o] != k)
    fail(i, fmt::format("a is {} and b is {}: the inner dims differ ({} vs {})", ty(i.a), ty(i.b), k, b[o]));
  if (c[o] != m || c[o + 1] != n)
    fail(i, fmt::format("a is {} and b is {}, so c must be [{}, {}], got {}", ty(i.a), ty(i.b), m, n, ty(i.c)));
  if (out != c) fail(i, fmt::format("c is {} but out is {}: the shapes differ", ty(i.c), ty(i.out)));
  DataType ab = i.a.dtype(), ct = i.c.dtype();
  if (ab != i.b.dtype())
    fail(i, fmt::format("a is {} and b is {}: a and b must have one dtype ({} vs {})", ty(i.a), ty(i.b), ab.name(),
                        i.b.dtype().name()));
  if (!ab.is_numeric())
    fail(i, fmt::format("a and b must be numeric, got a {} and b {}", ty(i.a), ty(i.b)));
  if (!ct.is_numeric()) fail(i, fmt::format("the accumulator c must be numeric, got {}", ty(i.c)));
  if (ab.is_float() && !ct.is_float())
    fail(i, fmt::format("a is {} and b is {}: float operands need a float accumulator, got c {}", ty(i.a), ty(i.b),
                        ty(i.c)));
  if (ab.is_integer() && !ct.is_integer())
    fail(i, fmt::format("a is {} and b is {}: integer operands need an integer accumulator, got c {}", ty(i.a), ty(i.b),
                        ty(i.c)));
  if (i.out.dtype() != ct)
    fail(i, fmt::format("c is {} but out is {}: out must have c's dtype ({} vs {})", ty(i.c), ty(i.out), ct.name(),
                        i.out.dtype().name()));
}

void check_cast(const CastInst& i) {
  expect_same_shape(i, "x", i.x, "out", i.out);
  for (auto* t : {&i.x, &i.out})
    if (!(t->dtype().is_numeric() || t->dtype().is_bool()))
      fail(i, fmt::format("cannot cast {} to {}: casts convert numbers and bools ({} is neither)", ty(i.x), ty(i.out),
                          t->dtype().name()));
}

void check_view(const ViewInst& i) {
  int64_t xbits = product(dims_of(i.x)) * i.x.dtype().bits();
  int64_t obits = product(dims_of(i.out)) * i.out.dtype().bits();
  if (xbits != obits)
    fail(i, fmt::format("cannot view {} ({} bits) as {} ({} bits): the total bits differ", ty(i.x), xbits, ty(i.out),
                        obits));
  const RegisterLayout& xl = i.x->layout;
  const RegisterLayout& ol = i.out->layout;
  if (xl.defined() && ol.defined()) {
    if (xl.num_threads() != ol.num_threads())
      fail(i, fmt::format("cannot view {} as {}: the layouts span {} vs {} threads", ty(i.x), ty(i.out),
                          xl.num_threads(), ol.num_threads()));
    int64_t xt = xl.local_size() * i.x.dtype().bits();
    int64_t ot = ol.local_size() * i.out.dtype().bits();
    if (xt != ot)
      fail(i, fmt::format("cannot view {} as {}: each thread holds {} bits of x but {} bits of out", ty(i.x), ty(i.out),
                          xt, ot));
  }
}

void check_reshape(const ReshapeInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  int64_t a = product(dims_of(i.x)), b = product(dims_of(i.out));
  if (a != b)
    fail(i, fmt::format("cannot reshape {} ({} elements) to {} ({} elements)", ty(i.x), a, ty(i.out), b));
}

void check_squeeze(const SqueezeInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  expect_dim_set(i, i.dims, i.x.rank(), "x " + ty(i.x));
  auto x = dims_of(i.x);
  std::vector<int64_t> expect;
  for (int d = 0; d < i.x.rank(); ++d) {
    bool squeezed = std::find(i.dims.begin(), i.dims.end(), d) != i.dims.end();
    if (squeezed && x[d] != 1)
      fail(i, fmt::format("dims {}: dim {} of x {} has extent {}, not 1", ints_str(i.dims), d, ty(i.x), x[d]));
    if (!squeezed) expect.push_back(x[d]);
  }
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("squeezing dims {} of x {} gives {}, but out is {}", ints_str(i.dims), ty(i.x), ints_str(expect),
                        ty(i.out)));
}

void check_unsqueeze(const UnsqueezeInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  int out_rank = i.x.rank() + int(i.dims.size());
  expect_dim_set(i, i.dims, out_rank, fmt::format("the output of unsqueezing x {}", ty(i.x)));
  auto x = dims_of(i.x);
  std::vector<int64_t> expect;
  size_t k = 0;
  for (int d = 0; d < out_rank; ++d) {
    if (std::find(i.dims.begin(), i.dims.end(), d) != i.dims.end()) expect.push_back(1);
    else expect.push_back(x[k++]);
  }
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("unsqueezing x {} at dims {} gives {}, but out is {}", ty(i.x), ints_str(i.dims),
                        ints_str(expect), ty(i.out)));
}

void check_transpose(const TransposeInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  if (i.x.rank() != 2) fail(i, fmt::format("x must have rank 2, got {}", ty(i.x)));
  auto x = dims_of(i.x);
  std::vector<int64_t> expect{x[1], x[0]};
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("transposing x {} gives {}, but out is {}", ty(i.x), ints_str(expect), ty(i.out)));
}

void check_repeat(const RepeatInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  for (auto r : i.repeats)
    if (r <= 0) fail(i, fmt::format("repeats {} must be positive (x {})", ints_str(i.repeats), ty(i.x)));
  auto x = dims_of(i.x);
  size_t rank = std::max(x.size(), i.repeats.size());
  std::vector<int64_t> expect(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    int64_t sd = d + x.size() >= rank ? x[d + x.size() - rank] : 1;
    int64_t rd = d + i.repeats.size() >= rank ? i.repeats[d + i.repeats.size() - rank] : 1;
    expect[d] = sd * rd;
  }
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("repeating x {} by {} gives {}, but out is {}", ty(i.x), ints_str(i.repeats), ints_str(expect),
                        ty(i.out)));
}

void check_elementwise(const ElementwiseInst& i) {
  if (i.inputs.empty()) fail(i, fmt::format("needs at least one input tensor (out {})", ty(i.out)));
  if (i.inputs.size() != i.params.size())
    fail(i, fmt::format("has {} inputs but {} params (one param per input)", i.inputs.size(), i.params.size()));
  std::vector<std::vector<int64_t>> shapes;
  std::string operands;
  for (size_t k = 0; k < i.inputs.size(); ++k) {
    std::string role = fmt::format("input {}", k);
    shapes.push_back(dims_of(i.inputs[k]));
    operands += (k ? " and " : "") + ty(i.inputs[k]);
    const Var& p = i.params[k];
    if (!p.defined()) fail(i, fmt::format("param {} (for input {}) is undefined", k, ty(i.inputs[k])));
    if (p.dtype() != i.inputs[k].dtype())
      fail(i, fmt::format("param {} '{}' has type {} but input {} is {}", k, p.name(), p.dtype().name(), k,
                          ty(i.inputs[k])));
  }
  auto shape = broadcast_shapes(shapes);
  if (!shape) fail(i, fmt::format("cannot broadcast {}", operands));
  if (dims_of(i.out) != *shape)
    fail(i, fmt::format("broadcasting {} gives {}, but out is {}", operands, ints_str(*shape), ty(i.out)));
  if (!i.body.defined()) fail(i, fmt::format("the body is undefined (inputs {}, out {})", operands, ty(i.out)));
  if (i.body.dtype() != i.out.dtype())
    fail(i, fmt::format("the body {} has type {} but out is {}", expr_str(i.body), i.body.dtype().name(), ty(i.out)));
}

void check_reduce(const ReduceInst& i) {
  expect_dim_set(i, i.dims, i.x.rank(), "x " + ty(i.x));
  auto x = dims_of(i.x);
  std::vector<int64_t> expect;
  for (int d = 0; d < i.x.rank(); ++d) {
    bool reduced = std::find(i.dims.begin(), i.dims.end(), d) != i.dims.end();
    if (!reduced) expect.push_back(x[d]);
    else if (i.keepdim) expect.push_back(1);
  }
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("reducing dims {} of x {} (keepdim={}) gives {}, but out is {}", ints_str(i.dims), ty(i.x),
                        i.keepdim, ints_str(expect), ty(i.out)));
  DataType xt = i.x.dtype();
  bool logical = i.op == ReduceOp::Any || i.op == ReduceOp::All;
  if (logical && !xt.is_bool()) fail(i, fmt::format("needs a bool tensor, got x {}", ty(i.x)));
  if (!logical && !xt.is_numeric()) fail(i, fmt::format("needs a numeric tensor, got x {}", ty(i.x)));
  DataType expect_dt = logical ? dtypes::boolean : xt;
  if (i.out.dtype() != expect_dt)
    fail(i, fmt::format("x is {} so out must be {}, got {}", ty(i.x), expect_dt.name(), ty(i.out)));
}

void check_sync(const SyncInst& i) {
  if (i.scope == SyncScope::Named) {
    if (i.barrier_id < 1 || i.barrier_id > 15)
      fail(i, fmt::format("barrier_id {} is not a named barrier: use 1 to 15 (0 is the block's barrier, "
                          "__syncthreads)",
                          i.barrier_id));
    if (i.arrive_count < 32 || i.arrive_count % 32 != 0)
      fail(i, fmt::format("arrive_count {} (barrier_id {}) must be a positive multiple of 32 (whole warps arrive)",
                          i.arrive_count, i.barrier_id));
  }
  if (i.mask.defined() && !(i.mask.dtype().is_integer()))
    fail(i, fmt::format("mask must be an integer lane mask, got {} of type {}", expr_str(i.mask), dtype_str(i.mask)));
}

void check_set_max_nreg(const SetMaxNRegInst& i) {
  if (i.reg_count < 24 || i.reg_count > 256 || i.reg_count % 8 != 0)
    fail(i, fmt::format("reg_count {} must be a multiple of 8 from 24 to 256 (setmaxnreg)", i.reg_count));
}

const char* const kThreadIndexOps[] = {"get_lane_idx", "get_warp_idx_sync", "get_warp_idx", "get_warp_group_idx",
                                       "shuffle_elect"};

void check_thread_index(const ThreadIndexInst& i) {
  if (std::none_of(std::begin(kThreadIndexOps), std::end(kThreadIndexOps), [&](const char* o) { return i.op == o; }))
    fail(i, fmt::format("unknown thread index '{}'", i.op));
  if (i.warp_size < 1) fail(i, fmt::format("warp_size {} must be positive", i.warp_size));
  if (i.warps_per_group < 1) fail(i, fmt::format("warps_per_group {} must be positive", i.warps_per_group));
  if (i.thread_extent < 0) fail(i, fmt::format("thread_extent {} must be 0 (the whole group) or positive", i.thread_extent));
  DataType want = i.op == "shuffle_elect" ? dtypes::boolean : dtypes::int32;
  if (i.out.rank() != 1 || i.out.dtype() != want)
    fail(i, fmt::format("out must be a rank-1 {} tensor (one element per thread), got {}", want.name(), ty(i.out)));
}

void check_shuffle(const ShuffleInst& i) {
  static const char* ops[] = {"shfl_xor", "shfl_down", "shfl_up", "shfl_sync"};
  if (std::none_of(std::begin(ops), std::end(ops), [&](const char* o) { return i.op == o; }))
    fail(i, fmt::format("unknown shuffle '{}'", i.op));
  const char* lane_name = i.op == "shfl_sync" ? "srcLane" : "offset";
  if (!is_integer_expr(i.lane))
    fail(i, fmt::format("{} must be an integer scalar, got {} of type {} (value {})", lane_name, expr_str(i.lane),
                        dtype_str(i.lane), ty(i.value)));
  if (i.lane.is_int_const() && (i.lane.int_value() < 0 || i.lane.int_value() > 31))
    fail(i, fmt::format("{} {} must be a lane from 0 to 31 (value {})", lane_name, i.lane.int_value(), ty(i.value)));
  if (i.mask.defined() && !i.mask.dtype().is_integer())
    fail(i, fmt::format("mask must be an integer lane mask, got {} of type {}", expr_str(i.mask), dtype_str(i.mask)));
  if (!is_pow2(i.width) || i.width > 32)
    fail(i, fmt::format("width {} must be a power of two from 1 to 32 (value {})", i.width, ty(i.value)));
  if (i.value.dtype().is_subbyte() || i.value.dtype().bits() > 64)
    fail(i, fmt::format("value {} must have an element type of 8 to 64 bits", ty(i.value)));
  expect_same_dtype(i, "out", i.out, "value", i.value);
  expect_same_shape(i, "out", i.out, "value", i.value);
}

// ldg / stg: a contiguous global region of exactly bits / 8 bytes, and its register tensor.
void check_global_vector(const InstNode& i, const char* role, const CopyRegion& r, const Tensor& reg, int64_t bits,
                         const Expr& pred) {
  if (bits != 32 && bits != 64 && bits != 128 && bits != 256)
    fail(i, fmt::format("loads and stores 32, 64, 128 or 256 bits, not {}", bits));
  check_region(i, role, r);
  const Tensor& g = r.tensor;
  std::vector<int64_t> extents;
  for (auto& e : r.extents) {
    if (!e.is_int_const())
      fail(i, fmt::format("the {} region of {} must have constant extents, got {}", role, ty(g), exprs_str(r.extents)));
    extents.push_back(e.int_value());
  }
  for (size_t d = 0; d + 1 < extents.size(); ++d)
    if (extents[d] != 1)
      fail(i, fmt::format("the {} region of {} (extents {}) must be contiguous: only its last dim may span more than "
                          "one element",
                          role, ty(g), exprs_str(r.extents)));
  int64_t bytes = g.dtype().storage_bytes(product(extents));
  if (bytes * 8 != bits)
    fail(i, fmt::format("the {} region of {} (extents {}) holds {} bytes of {}, but {} moves {} bytes", role, ty(g),
                        exprs_str(r.extents), bytes, g.dtype().name(), inst_name(i), bits / 8));
  if (!g->strides.empty() && !g->strides.back().is_int_const(1))
    fail(i, fmt::format("the {} region of {} must be contiguous, but the tensor's last stride is {}", role, ty(g),
                        expr_str(g->strides.back())));
  if (reg.defined() && (dims_of(reg) != extents || reg.dtype() != g.dtype()))
    fail(i, fmt::format("the register tensor {} must have the {} region's dtype {} and shape {}", ty(reg), role,
                        g.dtype().name(), ints_str(extents)));
  if (pred.defined() && !pred.dtype().is_bool())
    fail(i, fmt::format("pred must be a bool scalar, got {} of type {}", expr_str(pred), dtype_str(pred)));
}

void check_assign(const AssignInst& i) {
  expect_same_dtype(i, "dst", i.dst, "src", i.src);
  expect_same_shape(i, "dst", i.dst, "src", i.src);
}

// The format as a C string literal would spell it.
std::string escaped(const std::string& f) {
  std::string out;
  for (char c : f) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else out += c;
  }
  return out;
}

void check_printf(const PrintfInst& i) {
  int64_t conversions = 0;
  const std::string& f = i.format;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k] != '%') continue;
    if (k + 1 < f.size() && f[k + 1] == '%') {
      ++k;
      continue;
    }
    if (k + 1 == f.size())
      fail(i, fmt::format("the format \"{}\" ends with a lone '%' (write %% for a percent sign)", escaped(f)));
    ++conversions;
  }
  if (conversions != int64_t(i.args.size()))
    fail(i, fmt::format("the format \"{}\" has {} % conversions but {} arguments were given: {}", escaped(f), conversions,
                        i.args.size(), exprs_str(i.args)));
  for (auto& a : i.args)
    if (!a.defined() || !(a.dtype().is_numeric() || a.dtype().is_bool() || a.dtype().is_pointer()))
      fail(i, fmt::format("arguments must be scalar numbers, bools or pointers, got {} of type {}", expr_str(a),
                          dtype_str(a)));
}

void check_assume(const AssumeInst& i) {
  if (!i.cond.defined() || !i.cond.dtype().is_bool())
    fail(i, fmt::format("the condition must be a bool expression, got {} of type {}", expr_str(i.cond),
                        dtype_str(i.cond)));
}

void check_annotate_layout(const AnnotateLayoutInst& i) {
  const Tensor& t = i.tensor;
  if (t.is_register()) {
    if (!i.layout.defined() || i.shared_layout.defined())
      fail(i, fmt::format("a register tensor takes a register layout, got {} with {}", ty(t),
                          i.shared_layout.defined() ? "a shared layout " + i.shared_layout.str() : "no layout"));
    if (i.layout.shape() != dims_of(t))
      fail(i, fmt::format("layout {} has shape {} but tensor is {}", i.layout.str(), ints_str(i.layout.shape()), ty(t)));
  } else {
    if (!i.shared_layout.defined() || i.layout.defined())
      fail(i, fmt::format("a shared tensor takes a shared layout, got {} with {}", ty(t),
                          i.layout.defined() ? "a register layout " + i.layout.str() : "no layout"));
    if (i.shared_layout.shape() != dims_of(t))
      fail(i, fmt::format("shared layout {} has shape {} but tensor is {}", i.shared_layout.str(),
                          ints_str(i.shared_layout.shape()), ty(t)));
  }
}

// Expressions of an instruction may use its own binders but no other instruction's.
struct FieldCollector : FieldVisitor {
  std::vector<std::pair<const char*, Expr>> exprs_;
  std::vector<Var> binders_;
  void expr(const char* name, Expr& e) override { exprs_.emplace_back(name, e); }
  void binder(const char*, Var& v) override { binders_.push_back(v); }
};

void check_binders(const InstNode& inst) {
  FieldCollector c;
  inst.visit_fields(c);
  std::unordered_set<const void*> own;
  for (auto& b : c.binders_) own.insert(b.get());
  for (auto& [field, e] : c.exprs_) {
    if (!e.defined()) continue;
    for (auto& v : free_vars(e)) {
      if (v->role != VarRole::Binder || own.count(v.get())) continue;
      std::vector<std::string> names;
      for (auto& b : c.binders_) names.push_back(b.defined() ? b.name() : "<undefined>");
      fail(inst, fmt::format("{} {} uses '{}', a variable bound by another instruction (this one binds [{}])", field,
                             expr_str(e), v.name(), fmt::join(names, ", ")));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Whole-kernel verification
// ---------------------------------------------------------------------------------------

class KernelVerifier {
 public:
  KernelVerifier(const Kernel& k, const VerifyOptions& opts) : kernel_(k), opts_(opts) {}

  void run() {
    check_attributes();
    scopes_.push_back(Scope{Scope::Body, kernel_.num_threads()});
    walk(kernel_.body);
    scopes_.pop_back();
    check_shared_budget();
  }

 private:
  struct Scope {
    enum Kind { Body, Loop, Branch, Group } kind;
    int64_t threads;  // threads of the innermost thread group
    std::unordered_set<const TensorNode*> tensors;
    std::unordered_set<const void*> vars;      // loop vars, lets and declares
    std::unordered_set<const void*> mutables;  // declares
    int64_t begin = 0;  // the group's first thread in the block
  };

  struct SharedAlloc {
    const InstNode* inst;
    Tensor tensor;
    int64_t bytes;
  };

  [[noreturn]] void fail_kernel(const std::string& what) const {
    throw CompileError(fmt::format("kernel {}: {}", kernel_.name, what), kernel_.loc);
  }
  [[noreturn]] void fail_stmt(const StmtNode& s, const std::string& ctx, const std::string& what) const {
    throw CompileError(fmt::format("{}: {}", ctx, what), s.loc.valid() ? s.loc : kernel_.loc);
  }

  // Rule A.
  void check_attributes() {
    if (kernel_.warps < 1 || kernel_.warps > kMaxWarps)
      fail_kernel(fmt::format("warps = {}: a block has 1 to {} warps", kernel_.warps, kMaxWarps));
    if (kernel_.grid.empty() || kernel_.grid.size() > 3)
      fail_kernel(fmt::format("the grid needs 1 to 3 block counts, got {}: {}", kernel_.grid.size(),
                              exprs_str(kernel_.grid)));
    for (auto& p : kernel_.params)
      if (p.defined()) params_.insert(p.get());
    for (const GlobalScratch& g : kernel_.global_tensors) {
      std::string what = fmt::format("global_tensor {}", g.ptr.defined() ? g.ptr.name() : "<undefined>");
      auto fail_at = [&](const std::string& why) { throw CompileError(fmt::format("{}: {}", what, why), g.loc.valid() ? g.loc : kernel_.loc); };
      if (!g.ptr.defined() || g.ptr->role != VarRole::Param || !g.ptr.dtype().is_pointer() ||
          g.ptr.dtype().pointee().is_void())
        fail_at("its pointer must be a typed pointer parameter");
      for (auto& d : g.shape) {
        if (!is_integer_expr(d))
          fail_at(fmt::format("shape {}: dims must be integer expressions, got {} of type {}", exprs_str(g.shape),
                              expr_str(d), dtype_str(d)));
        if (d.is_int_const() && d.int_value() < 0)
          fail_at(fmt::format("shape {}: dim {} is negative", exprs_str(g.shape), d.int_value()));
        for (auto& v : free_vars(d))
          if (v->role != VarRole::Param || !params_.count(v.get()))
            fail_at(fmt::format("shape {}: the runtime sizes it before the launch, so its dims may use only the "
                                "kernel's parameters, but {} uses '{}' ({})",
                                exprs_str(g.shape), expr_str(d), v.name(), role_str(v->role)));
      }
      params_.insert(g.ptr.get());
    }
    for (auto& g : kernel_.grid) {
      if (!is_integer_expr(g))
        fail_kernel(fmt::format("grid {}: block counts must be integer expressions, got {} of type {}",
                                exprs_str(kernel_.grid), expr_str(g), dtype_str(g)));
      if (g.is_int_const() && g.int_value() <= 0)
        fail_kernel(fmt::format("grid {}: block count {} is not positive", exprs_str(kernel_.grid), g.int_value()));
      for (auto& v : free_vars(g))
        if (v->role != VarRole::Param || !params_.count(v.get()))
          fail_kernel(fmt::format("grid {}: block counts may use only the kernel's parameters, but {} uses '{}' ({})",
                                  exprs_str(kernel_.grid), expr_str(g), v.name(),
                                  v->role == VarRole::Param ? "a parameter of another kernel" : role_str(v->role)));
    }
    std::string cluster = fmt::format("cluster_blocks [{}]", fmt::join(kernel_.cluster, ", "));
    int64_t cluster_size = 1;
    for (auto c : kernel_.cluster) {
      if (c < 1) fail_kernel(fmt::format("{}: cluster dimensions must be positive", cluster));
      cluster_size *= c;
    }
    if (cluster_size > kMaxPortableClusterBlocks)
      fail_kernel(fmt::format("{}: a cluster of {} blocks is larger than the portable maximum of {}", cluster,
                              cluster_size, kMaxPortableClusterBlocks));
    // A grid dimension the launch cannot see before it runs is checked there (launch_grid).
    for (size_t d = 0; d < 3; ++d) {
      int64_t blocks = d < kernel_.grid.size() ? (kernel_.grid[d].is_int_const() ? kernel_.grid[d].int_value() : 0) : 1;
      if (blocks > 0 && blocks % kernel_.cluster[d] != 0)
        fail_kernel(fmt::format("{}: grid {} has {} blocks in dimension {}, not a multiple of the cluster's {}", cluster,
                                exprs_str(kernel_.grid), blocks, d, kernel_.cluster[d]));
    }
  }

  bool tensor_visible(const Tensor& t) const {
    for (auto& s : scopes_)
      if (s.tensors.count(t.get())) return true;
    return false;
  }
  bool var_visible(const Var& v) const {
    for (auto& s : scopes_)
      if (s.vars.count(v.get())) return true;
    return false;
  }
  bool var_mutable(const Var& v) const {
    for (auto& s : scopes_)
      if (s.mutables.count(v.get())) return true;
    return false;
  }
  int64_t group_threads() const { return scopes_.back().threads; }
  bool in_group() const {
    return std::any_of(scopes_.begin(), scopes_.end(), [](const Scope& sc) { return sc.kind == Scope::Group; });
  }

  // Rule B for scalars: the variables `e` uses are visible here.
  void check_vars(const Expr& e, const std::unordered_set<const void*>& binders, const SourceLoc& loc,
                  const std::string& ctx, const char* field) const {
    if (!e.defined()) return;
    for (auto& v : free_vars(e)) {
      bool ok = false;
      switch (v->role) {
        case VarRole::Param: ok = params_.count(v.get()) > 0; break;
        case VarRole::Builtin: ok = true; break;
        case VarRole::Binder: ok = binders.count(v.get()) > 0; break;
        case VarRole::Loop:
        case VarRole::Local: ok = var_visible(v); break;
      }
      if (ok) continue;
      std::string why = v->role == VarRole::Param ? "it is not a parameter of this kernel"
                        : v->role == VarRole::Binder
                            ? "it is bound by another instruction"
                            : "it is used outside the scope that defines it, or before its definition";
      throw CompileError(fmt::format("{}: {} {} uses '{}' ({}) where it is not visible: {}", ctx, field, expr_str(e),
                                     v.name(), role_str(v->role), why),
                         loc.valid() ? loc : kernel_.loc);
    }
  }

  void walk(const Stmt& s) {
    if (!s) return;
    switch (s->kind) {
      case StmtKind::Seq:
        for (auto& c : static_cast<const SeqStmtNode&>(*s).stmts) walk(c);
        return;
      case StmtKind::For: return visit_for(static_cast<const ForStmtNode&>(*s));
      case StmtKind::If: return visit_if(static_cast<const IfStmtNode&>(*s));
      case StmtKind::While: return visit_while(static_cast<const WhileStmtNode&>(*s));
      case StmtKind::Break: return visit_jump(*s, "break");
      case StmtKind::Continue: return visit_jump(*s, "continue");
      case StmtKind::Return: return;  // leaves the kernel from anywhere
      case StmtKind::Let: return visit_let(static_cast<const LetStmtNode&>(*s));
      case StmtKind::Declare: return visit_declare(static_cast<const DeclareStmtNode&>(*s));
      case StmtKind::Assign: return visit_assign(static_cast<const AssignStmtNode&>(*s));
      case StmtKind::Inst: return visit_inst(static_cast<const InstStmtNode&>(*s));
      case StmtKind::ThreadGroup: return visit_group(static_cast<const ThreadGroupStmtNode&>(*s));
    }
    throw CompileError(fmt::format("kernel {}: a statement of unknown kind {}", kernel_.name, int(s->kind)), s->loc);
  }

  void push(Scope::Kind kind, int64_t threads) {
    int64_t begin = scopes_.empty() ? 0 : scopes_.back().begin;
    scopes_.push_back(Scope{kind, threads, {}, {}, {}, begin});
  }
  void pop() { scopes_.pop_back(); }

  // Rule D (loops) and B.
  void visit_for(const ForStmtNode& s) {
    const std::unordered_set<const void*> none;
    for (auto [what, e] : {std::pair<const char*, const Expr*>{"begin", &s.begin}, {"end", &s.end}, {"step", &s.step}}) {
      if (!is_integer_expr(*e))
        fail_stmt(s, "for", fmt::format("loop bounds must be integers, got {} {} of type {}", what, expr_str(*e),
                                        dtype_str(*e)));
      check_vars(*e, none, s.loc, "for", what);
    }
    if (s.step.is_int_const(0)) fail_stmt(s, "for", "the step must not be zero");
    if (!s.var.defined() || !s.var.dtype().is_integer())
      fail_stmt(s, "for", fmt::format("the loop variable must be an integer variable, got {} of type {}",
                                      expr_str(s.var), dtype_str(s.var)));
    push(Scope::Loop, group_threads());
    scopes_.back().vars.insert(s.var.get());
    walk(s.body);
    pop();
  }

  void check_condition(const StmtNode& s, const char* ctx, const Expr& cond) {
    if (!cond.defined() || !cond.dtype().is_bool())
      fail_stmt(s, ctx, fmt::format("the condition must be a bool expression, got {} of type {}", expr_str(cond),
                                    dtype_str(cond)));
    check_vars(cond, {}, s.loc, ctx, "condition");
  }

  void visit_if(const IfStmtNode& s) {
    check_condition(s, "if", s.cond);
    push(Scope::Branch, group_threads());
    walk(s.then_body);
    pop();
    if (s.else_body) {
      push(Scope::Branch, group_threads());
      walk(s.else_body);
      pop();
    }
  }

  void visit_while(const WhileStmtNode& s) {
    check_condition(s, "while", s.cond);
    push(Scope::Loop, group_threads());
    walk(s.body);
    pop();
  }

  // Rule C.
  void visit_jump(const StmtNode& s, const char* what) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (it->kind == Scope::Loop) return;
      if (it->kind == Scope::Group)
        fail_stmt(s, what, "cannot leave a thread group: the nearest enclosing loop is outside the thread group");
    }
    fail_stmt(s, what, "outside of a loop (for or while)");
  }

  void visit_let(const LetStmtNode& s) {
    std::string ctx = fmt::format("let {}", s.var.defined() ? s.var.name() : "<undefined>");
    if (!s.var.defined()) fail_stmt(s, ctx, "the variable is undefined");
    if (!s.value.defined()) fail_stmt(s, ctx, "the value is undefined");
    if (s.var->role != VarRole::Local)
      fail_stmt(s, ctx, fmt::format("binds a {}; let binds local variables", role_str(s.var->role)));
    if (s.value.dtype() != s.var.dtype())
      fail_stmt(s, ctx, fmt::format("the variable has type {} but the value {} has type {}", s.var.dtype().name(),
                                    expr_str(s.value), s.value.dtype().name()));
    check_vars(s.value, {}, s.loc, ctx, "value");
    scopes_.back().vars.insert(s.var.get());
  }

  void visit_declare(const DeclareStmtNode& s) {
    std::string ctx = fmt::format("declare {}", s.var.defined() ? s.var.name() : "<undefined>");
    if (!s.var.defined()) fail_stmt(s, ctx, "the variable is undefined");
    if (!s.init.defined()) fail_stmt(s, ctx, "the initial value is undefined");
    if (s.var->role != VarRole::Local)
      fail_stmt(s, ctx, fmt::format("declares a {}; declare makes local variables", role_str(s.var->role)));
    if (s.init.dtype() != s.var.dtype())
      fail_stmt(s, ctx, fmt::format("the variable has type {} but the initial value {} has type {}",
                                    s.var.dtype().name(), expr_str(s.init), s.init.dtype().name()));
    check_vars(s.init, {}, s.loc, ctx, "init");
    scopes_.back().vars.insert(s.var.get());
    scopes_.back().mutables.insert(s.var.get());
  }

  // Rule H.
  void visit_assign(const AssignStmtNode& s) {
    std::string name = s.var.defined() ? s.var.name() : "<undefined>";
    std::string ctx = fmt::format("assignment to '{}'", name);
    if (!s.var.defined()) fail_stmt(s, ctx, "the variable is undefined");
    if (s.var->role != VarRole::Local || !var_mutable(s.var)) {
      std::string what = s.var->role != VarRole::Local ? fmt::format("'{}' is a {}", name, role_str(s.var->role))
                         : var_visible(s.var)          ? fmt::format("'{}' is bound by let", name)
                                                       : fmt::format("'{}' is not declared in an enclosing scope", name);
      fail_stmt(s, ctx, fmt::format("{}; only variables made by declare() can be assigned", what));
    }
    if (!s.value.defined()) fail_stmt(s, ctx, "the value is undefined");
    if (s.value.dtype() != s.var.dtype())
      fail_stmt(s, ctx, fmt::format("'{}' has type {} but the value {} has type {}", name, s.var.dtype().name(),
                                    expr_str(s.value), s.value.dtype().name()));
    check_vars(s.value, {}, s.loc, ctx, "value");
  }

  // Rule E.
  void visit_group(const ThreadGroupStmtNode& s) {
    const char* ctx = to_string(s.group_kind);
    if (s.thread_begin < 0 || s.num_threads < 1)
      fail_stmt(s, ctx, fmt::format("needs thread_begin >= 0 and num_threads >= 1, got thread_begin={}, num_threads={}",
                                    s.thread_begin, s.num_threads));
    int64_t parent = group_threads();
    if (s.thread_begin + s.num_threads > parent)
      fail_stmt(s, ctx, fmt::format("threads [{}, {}) do not fit in the enclosing {} of {} threads", s.thread_begin,
                                    s.thread_begin + s.num_threads,
                                    in_group() ? "thread group" : fmt::format("block ({} warps)", kernel_.warps),
                                    parent));
    // Warp-collective instructions and named barriers need whole warps; a smaller group must
    // not straddle two.
    if (s.num_threads >= 32 && s.thread_begin % 32 != 0)
      fail_stmt(s, ctx, fmt::format("a group of {} threads must start at a multiple of 32 (got thread_begin={})",
                                    s.num_threads, s.thread_begin));
    if (s.num_threads < 32 && s.thread_begin / 32 != (s.thread_begin + s.num_threads - 1) / 32)
      fail_stmt(s, ctx, fmt::format("a group of {} threads must lie within one warp (threads [{}, {}))",
                                    s.num_threads, s.thread_begin, s.thread_begin + s.num_threads));
    push(Scope::Group, s.num_threads);
    scopes_.back().begin += s.thread_begin;
    walk(s.body);
    pop();
  }

  // Rule I: the thread-level builtins and the thread group they run in.
  void check_thread_context(const InstNode& inst) const {
    int64_t threads = group_threads(), begin = scopes_.back().begin, block = kernel_.num_threads();
    std::string group = in_group() ? fmt::format("the thread group of threads [{}, {})", begin, begin + threads)
                                   : fmt::format("the block of {} threads", block);
    if (auto* i = dynamic_cast<const SyncInst*>(&inst)) {
      if (i->scope == SyncScope::Named) {
        if (i->arrive_count > block)
          fail(inst, fmt::format("arrive_count {} (barrier_id {}) is more than the block's {} threads", i->arrive_count,
                                 i->barrier_id, block));
        if (i->arrive_count < threads)
          fail(inst, fmt::format("arrive_count {} (barrier_id {}) is fewer than the {} threads of {} that arrive at it",
                                 i->arrive_count, i->barrier_id, threads, group));
      }
      if (i->scope == SyncScope::Grid && in_group())
        fail(inst, fmt::format("every thread of every block must reach a grid barrier, but it is inside {}", group));
    } else if (inst.kind() == InstKind::SetMaxNReg || inst.kind() == InstKind::WgmmaFence ||
               inst.kind() == InstKind::WgmmaMma || inst.kind() == InstKind::WgmmaCommitGroup ||
               inst.kind() == InstKind::WgmmaWaitGroup) {
      if (begin % 128 != 0 || threads % 128 != 0)
        fail(inst, fmt::format("{} runs on whole warp groups: {} is not warp-group aligned (its first thread "
                               "and its size must be multiples of 128)",
                               inst.kind() == InstKind::SetMaxNReg ? "setmaxnreg" : inst.display_name(), group));
      if (auto* w = dynamic_cast<const WgmmaMmaInst*>(&inst); w && w->a.rank() == 2 &&
          w->a.static_shape()[0] % (64 * (threads / 128)) != 0)
        fail(inst, fmt::format("{} splits m over its {} warp groups in blocks of 64 rows, but a is {}", group,
                               threads / 128, ty(w->a)));
    } else if (auto* i = dynamic_cast<const ShuffleInst*>(&inst)) {
      if (threads % 32 != 0)
        fail(inst, fmt::format("shuffles exchange within whole warps, but {} has {} threads (value {})", group, threads,
                               ty(i->value)));
    }
  }

  // Rule F for one tensor defined (or annotated) here.
  void check_register_layout(const InstNode& inst, const Tensor& t, const RegisterLayout& layout, const char* role) {
    if (!layout.defined()) {
      if (opts_.require_layouts)
        fail(inst, fmt::format("{} {} has no register layout (layouts are required after layout inference)", role, ty(t)));
      return;
    }
    if (layout.shape() != dims_of(t))
      fail(inst, fmt::format("{} {} has a layout of shape {}: {}", role, ty(t), ints_str(layout.shape()), layout.str()));
    if (layout.num_threads() != group_threads())
      fail(inst, fmt::format("{} {} has a layout over {} threads but the {} has {} threads: {}", role, ty(t),
                             layout.num_threads(),
                             in_group() ? "enclosing thread group" : "block",
                             group_threads(), layout.str()));
  }

  // Rule F': a register tensor fits in what its threads can hold (a tile far too large for
  // registers is a mistake on every target; the CPU backend would exhaust its stack).
  void check_register_footprint(const InstNode& inst, const Tensor& t) const {
    int64_t elements = 1;
    for (auto& d : t.shape()) {
      if (!d.is_int_const()) return;  // reported by verify_inst
      elements *= std::max<int64_t>(1, d.int_value());
      if (elements > (int64_t(1) << 40)) break;
    }
    int64_t threads = std::max<int64_t>(1, group_threads());
    int64_t per_thread = (t.dtype().storage_bytes(elements) + threads - 1) / threads;
    if (per_thread > kMaxRegisterBytesPerThread)
      fail(inst, fmt::format("out {} needs {} bytes per thread of the {} threads that hold it, more than the {} a "
                             "thread can hold (CUDA's local memory per thread): split it into smaller tiles, or keep "
                             "it in shared or global memory",
                             ty(t), per_thread, threads, kMaxRegisterBytesPerThread));
  }

  void visit_inst(const InstStmtNode& s) {
    if (!s.inst) fail_stmt(s, fmt::format("kernel {}", kernel_.name), "an instruction statement without an instruction");
    const InstNode& inst = *s.inst;
    verify_inst(inst);

    check_thread_context(inst);

    // Rule B: operands defined earlier in a visible scope; variables visible.
    struct Collect : FieldVisitor {
      std::vector<std::pair<const char*, Tensor>> operands;
      std::vector<std::pair<const char*, Expr>> exprs;
      std::unordered_set<const void*> binders;
      Tensor out;
      void output(const char*, Tensor& t, uint8_t) override { out = t; }
      void operand(const char* n, Tensor& t, Access, uint8_t, const CopyRegion*) override { operands.emplace_back(n, t); }
      void expr(const char* n, Expr& e) override { exprs.emplace_back(n, e); }
      void binder(const char*, Var& v) override { binders.insert(v.get()); }
    } c;
    inst.visit_fields(c);
    std::string name = inst_name(inst);
    for (auto& [role, t] : c.operands) {
      if (!t.defined()) fail(inst, fmt::format("{} is an undefined tensor", role));
      if (!tensor_visible(t))
        fail(inst, fmt::format("{} {} ('{}') is not defined here: it is used before its definition or outside the "
                               "scope that defines it",
                               role, ty(t), t->name));
    }
    for (auto& [field, e] : c.exprs) check_vars(e, c.binders, inst.loc, name, field);
    if (c.out.defined()) {
      // Global views evaluate their shape and strides where they are defined.
      for (auto& d : c.out.shape()) check_vars(d, {}, inst.loc, name, "out shape");
      for (auto& d : c.out->strides) check_vars(d, {}, inst.loc, name, "out strides");
      if (c.out.is_register()) {
        check_register_layout(inst, c.out, c.out->layout, "out");
        check_register_footprint(inst, c.out);
      }
      if (c.out.is_shared() && c.out->shared_layout.defined() && c.out->shared_layout.shape() != dims_of(c.out))
        fail(inst, fmt::format("out {} has a shared layout of shape {}: {}", ty(c.out),
                               ints_str(c.out->shared_layout.shape()), c.out->shared_layout.str()));
      scopes_.back().tensors.insert(c.out.get());
    }
    if (inst.kind() == InstKind::AnnotateLayout) {
      auto& a = static_cast<const AnnotateLayoutInst&>(inst);
      if (a.layout.defined()) check_register_layout(inst, a.tensor, a.layout, "tensor");
    }
    // item defines its scalar for what follows in this scope.
    if (inst.kind() == InstKind::Item) scopes_.back().vars.insert(static_cast<const ItemInst&>(inst).var.get());
    if (inst.kind() == InstKind::SharedItemPtr)
      scopes_.back().vars.insert(static_cast<const SharedItemPtrInst&>(inst).var.get());

    // Rule G: collect the allocations.
    if (inst.kind() == InstKind::AllocateShared) {
      const Tensor& t = static_cast<const AllocateSharedInst&>(inst).out;
      int64_t elements = t->shared_layout.defined() ? t->shared_layout.storage_elements() : product(dims_of(t));
      int64_t bytes = t.dtype().storage_bytes(elements);
      bytes = (bytes + 127) / 128 * 128;
      shared_.push_back(SharedAlloc{&inst, t, bytes});
    }
  }

  // Rule G.
  void check_shared_budget() const {
    if (opts_.shared_memory_limit <= 0) return;
    int64_t total = 0;
    for (auto& a : shared_) total += a.bytes;
    if (total <= opts_.shared_memory_limit) return;
    int64_t running = 0;
    for (auto& a : shared_) {
      running += a.bytes;
      if (running <= opts_.shared_memory_limit) continue;
      throw CompileError(
          fmt::format("{}: kernel {} needs {} bytes of shared memory, more than the limit of {} bytes; this "
                      "allocation of {} ({} bytes) brings the total to {} bytes",
                      inst_name(*a.inst), kernel_.name, total, opts_.shared_memory_limit, ty(a.tensor), a.bytes, running),
          a.inst->loc.valid() ? a.inst->loc : kernel_.loc);
    }
  }

  const Kernel& kernel_;
  const VerifyOptions& opts_;
  std::unordered_set<const void*> params_;
  std::vector<Scope> scopes_;
  std::vector<SharedAlloc> shared_;
};

}  // namespace

void verify_inst(const InstNode& inst) {
  expect_traits(inst);
  switch (inst.kind()) {
    case InstKind::GlobalView: check_global_view(static_cast<const GlobalViewInst&>(inst)); break;
    case InstKind::AllocateShared:
    case InstKind::FreeShared: break;
    case InstKind::AllocateRegister: check_allocate_register(static_cast<const AllocateRegisterInst&>(inst)); break;
    case InstKind::SliceShared: check_slice_shared(static_cast<const SliceSharedInst&>(inst)); break;
    case InstKind::ReshapeShared: check_reshape_shared(static_cast<const ReshapeSharedInst&>(inst)); break;
    case InstKind::LoadGlobal: check_load_global(static_cast<const LoadGlobalInst&>(inst)); break;
    case InstKind::StoreGlobal: check_store_global(static_cast<const StoreGlobalInst&>(inst)); break;
    case InstKind::LoadShared: check_load_shared(static_cast<const LoadSharedInst&>(inst)); break;
    case InstKind::StoreShared: check_store_shared(static_cast<const StoreSharedInst&>(inst)); break;
    case InstKind::CopyAsync: check_copy_async(static_cast<const CopyAsyncInst&>(inst)); break;
    case InstKind::CopyAsyncWaitGroup: check_copy_async_wait_group(static_cast<const CopyAsyncWaitGroupInst&>(inst)); break;
    case InstKind::Copy: check_copy(static_cast<const CopyInst&>(inst)); break;
    case InstKind::Im2col: check_im2col(static_cast<const Im2colInst&>(inst)); break;
    case InstKind::Dot: check_dot(static_cast<const DotInst&>(inst)); break;
    case InstKind::Cast: check_cast(static_cast<const CastInst&>(inst)); break;
    case InstKind::View: check_view(static_cast<const ViewInst&>(inst)); break;
    case InstKind::Reshape: check_reshape(static_cast<const ReshapeInst&>(inst)); break;
    case InstKind::Squeeze: check_squeeze(static_cast<const SqueezeInst&>(inst)); break;
    case InstKind::Unsqueeze: check_unsqueeze(static_cast<const UnsqueezeInst&>(inst)); break;
    case InstKind::Transpose: check_transpose(static_cast<const TransposeInst&>(inst)); break;
    case InstKind::Repeat: check_repeat(static_cast<const RepeatInst&>(inst)); break;
    case InstKind::Elementwise: check_elementwise(static_cast<const ElementwiseInst&>(inst)); break;
    case InstKind::Reduce: check_reduce(static_cast<const ReduceInst&>(inst)); break;
    case InstKind::Assign: check_assign(static_cast<const AssignInst&>(inst)); break;
    case InstKind::Printf: check_printf(static_cast<const PrintfInst&>(inst)); break;
    case InstKind::Assume: check_assume(static_cast<const AssumeInst&>(inst)); break;
    case InstKind::AnnotateLayout: check_annotate_layout(static_cast<const AnnotateLayoutInst&>(inst)); break;
    case InstKind::Sync: check_sync(static_cast<const SyncInst&>(inst)); break;
    case InstKind::SetMaxNReg: check_set_max_nreg(static_cast<const SetMaxNRegInst&>(inst)); break;
    case InstKind::ThreadIndex: check_thread_index(static_cast<const ThreadIndexInst&>(inst)); break;
    case InstKind::Shuffle: check_shuffle(static_cast<const ShuffleInst&>(inst)); break;
    case InstKind::LoadGlobalVector: {
      auto& i = static_cast<const LoadGlobalVectorInst&>(inst);
      check_global_vector(i, "src", i.src, i.out, i.bits, i.pred);
      break;
    }
    case InstKind::StoreGlobalVector: {
      auto& i = static_cast<const StoreGlobalVectorInst&>(inst);
      check_global_vector(i, "dst", i.dst, i.value, i.bits, i.pred);
      break;
    }
    case InstKind::Atomic: check_atomic(static_cast<const AtomicInst&>(inst)); break;
    case InstKind::Item: check_item(static_cast<const ItemInst&>(inst)); break;
    case InstKind::SharedItemPtr: check_shared_item_ptr(static_cast<const SharedItemPtrInst&>(inst)); break;
    case InstKind::Semaphore: check_semaphore(static_cast<const SemaphoreInst&>(inst)); break;
    case InstKind::MbarrierInit: check_mbarrier_init(static_cast<const MbarrierInitInst&>(inst)); break;
    case InstKind::Mbarrier: check_mbarrier(static_cast<const MbarrierInst&>(inst)); break;
    case InstKind::TmaWaitGroup: check_tma_wait_group(static_cast<const TmaWaitGroupInst&>(inst)); break;
    case InstKind::FenceProxyAsync: check_fence_proxy_async(static_cast<const FenceProxyAsyncInst&>(inst)); break;
    case InstKind::WgmmaWaitGroup: check_wgmma_wait_group(static_cast<const WgmmaWaitGroupInst&>(inst)); break;
    case InstKind::WgmmaMma: check_wgmma_mma(static_cast<const WgmmaMmaInst&>(inst)); break;
    case InstKind::TmaCommitGroup:
    case InstKind::WgmmaFence:
    case InstKind::WgmmaCommitGroup:
    case InstKind::CopyAsyncCommitGroup:
    case InstKind::CopyAsyncWaitAll: break;
  }
  check_binders(inst);
}

void verify(const Kernel& kernel, const VerifyOptions& opts) { KernelVerifier(kernel, opts).run(); }

void verify(const Program& program, const VerifyOptions& opts) {
  for (auto& k : program.kernels) verify(k, opts);
}

}  // namespace tilus
