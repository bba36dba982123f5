// The memory instructions: loads, stores, copies (cp.async, TMA, SIMT), im2col, explicit-width
// global accesses, atomics.
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

// A tile of a global tensor at `offsets`, its dims placed by `dims` (load_global, store_global,
// copy_async): one offset per global dim, the tile's dims onto distinct global dims, one dtype.
void expect_global_tile(const InstNode& i, const std::vector<Expr>& offsets, const std::vector<int>& dims,
                        const char* tile_role, const Tensor& tile, const char* global_role, const Tensor& global) {
  expect_offsets(i, offsets, global_role, global);
  expect_dims(i, dims, tile_role, tile, global_role, global);
  expect_same_dtype(i, global_role, global, tile_role, tile);
}

void check_load_global(const LoadGlobalInst& i) {
  expect_global_tile(i, i.offsets, i.dims, "out", i.out, "src", i.src);
  if (i.other.defined() && i.out.defined()) {
    DataType t = i.out.dtype();
    if (t.is_subbyte())
      fail(i, fmt::format("other= (the value of out-of-bounds elements) needs elements of 8 bits or more, out is {}",
                          ty(i.out)));
    if (i.other.dtype() != t)
      fail(i, fmt::format("other {} is {}, out is {}: the value of out-of-bounds elements is a scalar of out's dtype "
                          "({})",
                          expr_str(i.other), dtype_str(i.other), ty(i.out),
                          t.is_float() ? "a float or int number" : t.is_bool() ? "a bool" : "an int number"));
  }
}

void check_store_global(const StoreGlobalInst& i) {
  expect_global_tile(i, i.offsets, i.dims, "src", i.src, "dst", i.dst);
}

void check_load_shared(const LoadSharedInst& i) {
  expect_same_shape(i, "src", i.src, "out", i.out);
  expect_same_dtype(i, "src", i.src, "out", i.out);
}

void check_store_shared(const StoreSharedInst& i) {
  expect_same_shape(i, "dst", i.dst, "src", i.src);
  expect_same_dtype(i, "dst", i.dst, "src", i.src);
}

void check_copy_async(const CopyAsyncInst& i) { expect_global_tile(i, i.offsets, i.dims, "dst", i.dst, "src", i.src); }

void check_copy_async_wait_group(const CopyAsyncWaitGroupInst& i) {
  if (i.n < 0) fail(i, fmt::format("n must be >= 0 (the number of groups left pending), got {}", i.n));
}

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

}  // namespace

void insts::add_memory(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "load_global", .kind = InstKind::LoadGlobal,
               .summary = "a global tile into registers, zero (or other=) outside", .verify = hook(check_load_global)});
  d.push_back({.name = "store_global", .kind = InstKind::StoreGlobal, .summary = "registers into a global tile, masked",
               .verify = hook(check_store_global)});
  d.push_back({.name = "load_shared", .kind = InstKind::LoadShared, .summary = "a shared tensor into registers",
               .verify = hook(check_load_shared)});
  d.push_back({.name = "store_shared", .kind = InstKind::StoreShared, .summary = "registers into a shared tensor",
               .verify = hook(check_store_shared)});
  d.push_back({.name = "copy_async", .kind = InstKind::CopyAsync, .traits = {.min_sm = 80},
               .summary = "global to shared tile copy with cp.async",
               .attrs = {{"evict", AttrType::String, "evict_normal", {"evict_normal", "evict_first", "evict_last"}}, {"check_bounds", AttrType::Bool, "true"}},
               .verify = hook(check_copy_async)});
  d.push_back({.name = "copy_async_commit_group", .kind = InstKind::CopyAsyncCommitGroup, .emit = EmitFamily::Memory,
               .traits = {.role = SyncRole::Commit, .completion = Completion::CpAsyncGroup},
               .summary = "closes the group of cp.async copies issued since the last commit"});
  d.push_back({.name = "copy_async_wait_group", .kind = InstKind::CopyAsyncWaitGroup, .emit = EmitFamily::Memory,
               .traits = {.role = SyncRole::Wait, .completion = Completion::CpAsyncGroup},
               .summary = "waits until at most n cp.async groups are pending", .attrs = {{"n", AttrType::Int, "0"}},
               .verify = hook(check_copy_async_wait_group)});
  d.push_back({.name = "copy_async_wait_all", .kind = InstKind::CopyAsyncWaitAll, .emit = EmitFamily::Memory,
               .traits = {.role = SyncRole::Wait, .completion = Completion::CpAsyncGroup},
               .summary = "waits for every cp.async copy, committed or not"});
  d.push_back({.name = "copy", .kind = InstKind::Copy,
               .summary = "a copy between any two of global, shared and register regions (and async_copy, tma_copy, tma.*)",
               .verify = hook(check_copy)});
  d.push_back({.name = "c2d_im2col", .kind = InstKind::Im2col,
               .summary = "a tile of the im2col matrix of an NHWC image into shared memory",
               .verify = hook(check_im2col)});
  d.push_back({.name = "ldg32", .kind = InstKind::LoadGlobalVector, .emit = EmitFamily::Builtin,
               .summary = "explicit 32/64/128/256-bit global loads (ldg32 ... ldg256)",
               .verify = [](const InstNode& n) { auto& i = static_cast<const LoadGlobalVectorInst&>(n); check_global_vector(i, "src", i.src, i.out, i.bits, i.pred); }});
  d.push_back({.name = "stg32", .kind = InstKind::StoreGlobalVector, .emit = EmitFamily::Builtin,
               .summary = "explicit 32/64/128/256-bit global stores (stg32 ... stg256)",
               .verify = [](const InstNode& n) { auto& i = static_cast<const StoreGlobalVectorInst&>(n); check_global_vector(i, "dst", i.dst, i.value, i.bits, i.pred); }});
  d.push_back({.name = "atomic.global_add", .group = "atomic", .kind = InstKind::Atomic,
               .summary = "element-wise atomics and scatters on global or shared tensors (atomic.*, store_*_scatter)",
               .verify = hook(check_atomic)});

}

}  // namespace tilus
