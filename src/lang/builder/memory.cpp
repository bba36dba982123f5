// The tracer entries of the memory instructions: loads, stores, atomics, cp.async, copy (its regions
// legalized), im2col, ldg / stg.
#include "../builder_util.h"

namespace tilus {

using namespace builder_detail;

Tensor Builder::load_global(const Tensor& src, std::vector<Expr> offsets, std::vector<int64_t> shape,
                            std::vector<int> dims, SourceLoc loc, Expr other) {
  auto i = make_inst<LoadGlobalInst>(loc);
  i->src = src;
  i->offsets = std::move(offsets);
  i->dims = dims.empty() ? default_dims(src, shape.size()) : normalize_dims(dims, src, "load_global", loc);
  check_static_shape(shape, "load_global", loc);
  i->out = Tensor::reg("x", src.defined() ? src.dtype() : dtypes::void_t, shape);
  // In the tile's dtype (a constant folded); the verifier reports a scalar of another kind.
  if (other.defined()) i->other = simplify(adopt_scalar(other, i->out.dtype()));
  return emit_with_output(i);
}

namespace {

// The fields every atomic (and scatter) sets; its old values are `values`-shaped.
void set_atomic(AtomicInst& i, AtomicOp op, const Tensor& dst, const Tensor& values, const std::string& sem,
                const std::string& scope) {
  i.op = op;
  i.dst = dst;
  i.values = values;
  i.sem = sem;
  i.scope = scope;
  i.out = Tensor::reg("old", values.defined() ? values.dtype() : dtypes::void_t,
                      values.defined() && values.is_register() ? static_dims(values) : std::vector<int64_t>{});
}

}  // namespace

Tensor Builder::atomic(AtomicOp op, const Tensor& dst, const Tensor& values, const Tensor& compare,
                       std::vector<Expr> offsets, std::vector<int> dims, const std::string& sem,
                       const std::string& scope, SourceLoc loc) {
  auto i = make_inst<AtomicInst>(loc);
  i->compare = compare;
  std::string name = fmt::format("atomic.{}_{}", dst.defined() && dst.is_shared() ? "shared" : "global", to_string(op));
  if (!dst.defined() || !(dst.is_global() || dst.is_shared()) || !values.defined() || !values.is_register())
    throw CompileError(fmt::format("{}: expected a global or shared dst and register values, got {} and {}", name,
                                   type_of(dst), type_of(values)),
                       loc);
  if (dst.is_global()) {
    i->offsets = std::move(offsets);
    if (i->offsets.empty()) i->offsets.assign(size_t(dst.rank()), Expr(0));  // the tile at the origin
    i->dims = dims.empty() ? default_dims(dst, values.rank()) : normalize_dims(dims, dst, name.c_str(), loc);
  } else if (!offsets.empty() || !dims.empty()) {
    throw CompileError(fmt::format("{}: a shared dst is the whole tensor {} (slice_shared it); offsets and dims are "
                                   "for a global dst",
                                   name, type_of(dst)),
                       loc);
  }
  set_atomic(*i, op, dst, values, sem, scope);
  return emit_with_output(i);
}

Tensor Builder::atomic_scatter(AtomicOp op, bool store, const Tensor& dst, int dim, const Tensor& indices,
                               const Tensor& values, const std::string& sem, const std::string& scope, SourceLoc loc) {
  const char* space = dst.defined() && dst.is_shared() ? "shared" : "global";
  std::string name = store ? fmt::format("store_{}_scatter", space)
                           : fmt::format("atomic.{}_scatter_{}", space, to_string(op));
  if (!dst.defined() || !(dst.is_global() || dst.is_shared()) || !values.defined() || !values.is_register() ||
      !indices.defined() || !indices.is_register())
    throw CompileError(fmt::format("{}: expected a global or shared dst and register indices and values, got {}, {} "
                                   "and {}",
                                   name, type_of(dst), type_of(indices), type_of(values)),
                       loc);
  if (dst.rank() != values.rank())
    throw CompileError(fmt::format("{}: dst {} and values {} must have the same rank (each element keeps its other "
                                   "coordinates)",
                                   name, type_of(dst), type_of(values)),
                       loc);
  dim = normalize_dims({dim}, dst, name.c_str(), loc)[0];
  auto i = make_inst<AtomicInst>(loc);
  set_atomic(*i, store ? AtomicOp::Exch : op, dst, values, sem, scope);
  i->store = store;
  i->indices = indices;
  i->scatter_dim = dim;
  if (dst.is_global()) {
    i->offsets.assign(size_t(dst.rank()), Expr(0));
    i->dims = default_dims(dst, values.rank());
  }
  return emit_with_output(i);
}

void Builder::store_global(const Tensor& dst, const Tensor& src, std::vector<Expr> offsets, std::vector<int> dims,
                           SourceLoc loc) {
  auto i = make_inst<StoreGlobalInst>(loc);
  i->dst = dst;
  i->src = src;
  i->offsets = std::move(offsets);
  i->dims = dims.empty() ? default_dims(dst, src.defined() ? src.rank() : 0) : normalize_dims(dims, dst, "store_global", loc);
  emit(i);
}

Tensor Builder::load_shared(const Tensor& src, SourceLoc loc) {
  auto i = make_inst<LoadSharedInst>(loc);
  i->src = src;
  std::vector<int64_t> shape = src.defined() && src.is_shared() ? static_dims(src) : std::vector<int64_t>{};
  i->out = Tensor::reg("y", src.defined() ? src.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

void Builder::store_shared(const Tensor& dst, const Tensor& src, SourceLoc loc) {
  emit(dst_src_inst<StoreSharedInst>(dst, src, std::move(loc)));
}

void Builder::copy_async(const Tensor& src, const Tensor& dst, std::vector<Expr> offsets, std::vector<int> dims,
                         const std::optional<std::string>& evict, bool check_bounds, SourceLoc loc) {
  auto i = make_inst<CopyAsyncInst>(loc);
  i->src = src;
  i->dst = dst;
  i->offsets = std::move(offsets);
  i->dims = dims.empty() ? default_dims(src, dst.defined() ? dst.rank() : 0) : normalize_dims(dims, src, "copy_async", loc);
  if (evict) {
    auto e = parse_evict_policy(*evict);
    if (!e)
      throw CompileError(fmt::format("copy_async: evict='{}' is not one of 'evict_normal', 'evict_first', "
                                     "'evict_last'",
                                     *evict),
                         loc);
    i->evict = *e;
  }
  i->check_bounds = check_bounds;
  emit(i);
}

void Builder::copy_async_commit_group(SourceLoc loc) { emit(make_inst<CopyAsyncCommitGroupInst>(loc)); }

void Builder::copy_async_wait_group(int64_t n, SourceLoc loc) {
  if (n < 0) throw CompileError(fmt::format("copy_async_wait_group: n = {} must be >= 0", n), loc);
  auto i = make_inst<CopyAsyncWaitGroupInst>(loc);
  i->n = n;
  emit(i);
}

void Builder::copy_async_wait_all(SourceLoc loc) { emit(make_inst<CopyAsyncWaitAllInst>(loc)); }

namespace {

std::optional<bool> parse_bool(const std::string& s) {
  if (s == "true" || s == "True" || s == "1") return true;
  if (s == "false" || s == "False" || s == "0") return false;
  return std::nullopt;
}

std::string region_str(const char* role, const CopyRegion& r) {
  return fmt::format("{} {} (offsets {}, extents {})", role, type_of(r.tensor), shape_str(r.offsets),
                     shape_str(r.extents));
}

// A global region whose box reaches its tensor's end in dim d: the bounds predicates stop a
// copy where the region stops, whatever the tile's extent.
bool reaches_end(const CopyRegion& r, size_t d) {
  return r.tensor.is_global() && d < r.offsets.size() && d < size_t(r.tensor.rank()) &&
         structural_equal(simplify(r.offsets[d] + r.extents[d]), simplify(r.tensor.shape()[d]));
}

// Pairwise extent legalization over the trailing dims, so that the copy moves a tile of
// constant extents that both regions agree on: equal stays; a memory side's 1 broadcasts; a
// dynamic extent takes the other side's constant when its region is global and reaches its
// tensor's end there (the bounds predicates stop the copy where the region stops). Any other
// dynamic extent would move another tile than the region says: an error naming both regions.
// A static mismatch is reported by verify.
void legalize_extents(CopyRegion& src, CopyRegion& dst, const std::string& name, const SourceLoc& loc) {
  auto both = [&] { return region_str("src", src) + " and " + region_str("dst", dst); };
  size_t common = std::min(src.extents.size(), dst.extents.size());
  for (size_t k = 0; k < common; ++k) {
    size_t da = src.extents.size() - 1 - k, db = dst.extents.size() - 1 - k;
    Expr& a = src.extents[da];
    Expr& b = dst.extents[db];
    if (!a.is_int_const() || !b.is_int_const()) {
      // The constant the tile takes here: a register side's extent, or a memory side's but a
      // broadcasting 1.
      Expr tile;
      if (a.is_int_const() && (src.tensor.is_register() || !a.is_int_const(1))) tile = a;
      if (b.is_int_const() && (dst.tensor.is_register() || !b.is_int_const(1))) tile = b;
      if (!tile.defined())
        throw CompileError(fmt::format("{}: the extent of the copied tile in its dim {} is not a constant ({} and {}): "
                                       "{}; memory-to-memory copies need constant extents: slice with one "
                                       "(g[i0:i0 + 16])",
                                       name, common - 1 - k, to_string(a), to_string(b), both()),
                           loc);
      for (auto [e, r, d] : {std::tuple<Expr*, const CopyRegion*, size_t>{&a, &src, da}, {&b, &dst, db}}) {
        if (e->is_int_const()) continue;
        const char* role = r == &src ? "src" : "dst";
        if (!r->tensor.is_global())
          throw CompileError(fmt::format("{}: extent {} of dim {} of the {} region is not a constant, but a {} tile's "
                                         "extents are: {}; slice with a constant extent (s[i0:i0 + {}])",
                                         name, to_string(*e), d, role, to_string(r->tensor.scope()), both(),
                                         to_string(tile)),
                             loc);
        if (!reaches_end(*r, d))
          throw CompileError(
              fmt::format("{}: extent {} of dim {} of the {} region is not a constant and the region stops before its "
                          "tensor's end, so the copy would move {} elements there, past the region: {}; slice with a "
                          "constant extent (g[i0:i0 + {}]) or to the end (g[i0:])",
                          name, to_string(*e), d, role, to_string(tile), both(), to_string(tile)),
              loc);
        *e = tile;
      }
    }
    if (a.is_int_const(1) && !b.is_int_const(1)) {
      if (!src.tensor.is_register()) a = b;
    } else if (b.is_int_const(1) && !a.is_int_const(1)) {
      if (!dst.tensor.is_register()) b = a;
    }
  }
  // Leading dims that only one side has: their extents are the tile's too.
  for (auto [r, n] : {std::pair<const CopyRegion*, size_t>{&src, src.extents.size()}, {&dst, dst.extents.size()}})
    for (size_t d = 0; d + common < n; ++d)
      if (!r->extents[d].is_int_const())
        throw CompileError(fmt::format("{}: the extent of the copied tile in its dim {} is not a constant ({}): {}; "
                                       "memory-to-memory copies need constant extents: slice with one (g[i0:i0 + 16])",
                                       name, d, to_string(r->extents[d]), both()),
                           loc);
}

}  // namespace

void Builder::copy(CopyRegion src, CopyRegion dst, const CopyArgs& args, SourceLoc loc) {
  auto i = make_inst<CopyInst>(loc);
  i->api = args.api;
  const std::string name = i->display_name();
  if (!src.tensor.defined() || !dst.tensor.defined())
    throw CompileError(fmt::format("{}: source and destination must be tensors, got {} and {}", name, type_of(src.tensor),
                                   type_of(dst.tensor)),
                       loc);
  bool src_head = !src.offsets.empty() && src.extents.empty();
  bool dst_head = !dst.offsets.empty() && dst.extents.empty();
  complete_region(src);
  complete_region(dst);
  // A slice's extent is stop - start: `g[i0:i0 + 16]` has extent 16, not a dynamic one (which
  // would take the other side's and copy a larger tile).
  for (CopyRegion* r : {&src, &dst})
    for (Expr& e : r->extents)
      if (e.defined()) e = simplify(e);
  if (src_head && dst_head) {
    // Two scalars: a direct store of one element.
    i->scalar = true;
    src.extents.assign(src.offsets.size(), int_const(1));
    dst.extents.assign(dst.offsets.size(), int_const(1));
  } else if (src_head || dst_head) {
    // Head-element sugar: the region starts at the element and takes the other side's
    // extents (right-aligned; the remaining leading dims have extent 1).
    CopyRegion& head = src_head ? src : dst;
    const CopyRegion& other = src_head ? dst : src;
    size_t n = head.offsets.size();
    head.extents.assign(n, int_const(1));
    for (size_t k = 0; k < std::min(n, other.extents.size()); ++k)
      head.extents[n - 1 - k] = other.extents[other.extents.size() - 1 - k];
  }
  legalize_extents(src, dst, name, loc);
  i->src = std::move(src);
  i->dst = std::move(dst);
  // Keyword arguments, then annotations on top (user annotations win).
  auto evict = [&](const std::string& value, const char* what) {
    auto e = parse_evict_policy(value);
    if (!e)
      throw CompileError(fmt::format("{}: {}='{}' is not one of 'evict_normal', 'evict_first', 'evict_last'", name,
                                     what, value),
                         loc);
    return *e;
  };
  auto boolean = [&](const std::string& key, const std::string& value) {
    auto b = parse_bool(value);
    if (!b) throw CompileError(fmt::format("{}: annotation {}='{}' is not a boolean", name, key, value), loc);
    return *b;
  };
  i->coalesced_width = args.coalesced_width;
  i->disable_tma = args.disable_tma;
  if (args.eviction_policy) i->eviction_policy = evict(*args.eviction_policy, "eviction_policy");
  for (auto& [key, value] : args.annotations) {
    if (key == "coalesced_width") {
      char* end = nullptr;
      long long w = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0')
        throw CompileError(fmt::format("{}: annotation coalesced_width='{}' is not an integer", name, value), loc);
      i->coalesced_width = w;
    } else if (key == "disable_tma") {
      i->disable_tma = boolean(key, value);
    } else if (key == "use_tma") {
      i->use_tma = boolean(key, value);
    } else if (key == "use_cp_async") {
      i->use_cp_async = boolean(key, value);
    } else if (key == "eviction_policy") {
      i->eviction_policy = evict(value, "annotation eviction_policy");
    } else {
      throw CompileError(fmt::format("{}: unknown annotation '{}' (known: coalesced_width, disable_tma, "
                                     "eviction_policy, use_tma, use_cp_async)",
                                     name, key),
                         loc);
    }
    i->annotations[key] = value;
  }
  i->loop_layout = args.loop_layout;
  i->barrier = args.barrier;
  if (args.api == CopyApi::TmaCopy) i->use_tma = true;
  emit(i);
}

void Builder::c2d_im2col(const Tensor& img, const Tensor& col, Expr nhw_step, Expr c_step, int64_t kernel,
                         int64_t stride, int64_t dilation, int64_t pad, const std::optional<std::string>& eviction_policy,
                         SourceLoc loc, const Tensor& barrier) {
  auto i = make_inst<Im2colInst>(loc);
  i->barrier = barrier;
  i->img = img;
  i->col = col;
  i->nhw_step = nhw_step;
  i->c_step = c_step;
  i->kernel = kernel;
  i->stride = stride;
  i->dilation = dilation;
  i->pad = pad;
  if (eviction_policy) {
    auto e = parse_evict_policy(*eviction_policy);
    if (!e)
      throw CompileError(fmt::format("c2d_im2col: eviction_policy='{}' is not one of 'evict_normal', 'evict_first', "
                                     "'evict_last'",
                                     *eviction_policy),
                         loc);
    i->eviction_policy = *e;
  }
  emit(i);
}

namespace {

// The region of an explicit-width access: a whole tensor, a box, or a head element (the
// `bits`-bit vector that starts there: the last dim takes the rest). Extents simplified.
CopyRegion vector_region(CopyRegion r, int64_t bits) {
  if (r.offsets.empty() && r.extents.empty()) {
    for (int d = 0; d < r.tensor.rank(); ++d) r.offsets.push_back(int_const(0));
    r.extents = r.tensor.shape();
  } else if (r.extents.empty() || std::all_of(r.extents.begin(), r.extents.end(),
                                               [](const Expr& e) { return e.defined() && e.is_int_const(1); })) {
    // A single element (`g[i]`) stands for the vector that starts there.
    r.extents.assign(r.offsets.size(), int_const(1));
    int64_t eb = r.tensor.dtype().bits();
    if (!r.extents.empty() && eb > 0 && bits % eb == 0) r.extents.back() = int_const(bits / eb);
  }
  for (Expr& e : r.extents)
    if (e.defined()) e = simplify(e);
  // No bounds predicate: only `pred` guards the access (the CPU's checked mode still checks).
  r.checked_dims = std::vector<int>{};
  return r;
}

Expr vector_pred(const Expr& pred, const std::string& what, const SourceLoc& loc) {
  if (!pred.defined()) return pred;
  if (pred.dtype().is_bool()) return pred;
  if (pred.dtype().is_integer()) return pred != make_const(pred.dtype(), 0);
  throw CompileError(fmt::format("{}: pred must be a bool scalar, got {} of type {}", what, to_string(pred),
                                 pred.dtype().name()),
                     loc);
}

}  // namespace

Tensor Builder::ldg(int64_t bits, CopyRegion src, Expr pred, SourceLoc loc) {
  std::string name = fmt::format("ldg{}", bits);
  if (!src.tensor.defined() || !src.tensor.is_global())
    throw CompileError(fmt::format("{}: src must be a global tensor or region, got {}", name, type_of(src.tensor)), loc);
  auto i = make_inst<LoadGlobalVectorInst>(loc);
  i->bits = bits;
  i->src = vector_region(std::move(src), bits);
  i->pred = vector_pred(pred, name, loc);
  std::vector<int64_t> shape;
  for (auto& e : i->src.extents) shape.push_back(e.is_int_const() ? e.int_value() : 1);
  int64_t n = group_threads(name.c_str(), loc);
  bool positive = std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d > 0; });
  // Every thread holds the whole vector (a bad extent is the verifier's error).
  i->out = Tensor::reg("v", i->src.tensor.dtype(), shape, positive ? replicated(n) * local(shape) : RegisterLayout());
  return emit_with_output(i);
}

void Builder::stg(int64_t bits, CopyRegion dst, const Tensor& value, Expr pred, SourceLoc loc) {
  std::string name = fmt::format("stg{}", bits);
  if (!dst.tensor.defined() || !dst.tensor.is_global())
    throw CompileError(fmt::format("{}: dst must be a global tensor or region, got {}", name, type_of(dst.tensor)), loc);
  auto i = make_inst<StoreGlobalVectorInst>(loc);
  i->bits = bits;
  i->dst = vector_region(std::move(dst), bits);
  i->value = value;
  i->pred = vector_pred(pred, name, loc);
  emit(i);
}

}  // namespace tilus
