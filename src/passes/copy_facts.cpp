#include "tilus/passes/copy_facts.h"

#include <algorithm>
#include <numeric>

namespace tilus {

namespace {

int64_t pow2_floor(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

int64_t bytes_of(DataType t) { return std::max<int64_t>(1, t.bits() / 8); }

int64_t divisor(const BoundContext& ctx, const Expr& e) { return ctx.divisor(simplify(e, ctx)); }

// The largest power of two w <= min(run, 16 bytes) with fits(w).
template <class Fits>
int64_t widest(int64_t run, DataType dtype, Fits fits) {
  int64_t w = pow2_floor(std::min<int64_t>(run, 16 / bytes_of(dtype)));
  while (w > 1 && (run % w || !fits(w))) w /= 2;
  return w;
}

}  // namespace

std::vector<int> region_dims(int tile_rank, const std::vector<Expr>& extents) {
  std::vector<int> dims(tile_rank, -1);
  int rank = int(extents.size());
  for (int k = 0; k < tile_rank; ++k) {
    int d = k - tile_rank + rank;
    if (d >= 0 && !extents[d].is_int_const(1)) dims[k] = d;
  }
  return dims;
}

SharedView region_view(SharedView v, const CopyRegion& r, int tile_rank) {
  for (size_t d = 0; d < r.offsets.size() && d < v.dims.size(); ++d)
    if (v.dims[d] >= 0) v.offsets[v.dims[d]] = simplify(v.offsets[v.dims[d]] + r.offsets[d]);
  std::vector<int> dims;
  for (int d : region_dims(tile_rank, r.extents)) dims.push_back(d < 0 ? -1 : v.dims[d]);
  v.dims = dims;
  return v;
}

GlobalAccess region_access(GlobalAccess g, const CopyRegion& r, int tile_rank) {
  return tile_access(std::move(g), r.offsets, region_dims(tile_rank, r.extents), r.checked_dims);
}

GlobalAccess global_access(const Kernel& kernel, const GlobalViewInst& view) {
  GlobalAccess a;
  a.dtype = view.out.dtype();
  a.pointer_alignment = pointer_alignment(kernel, view.ptr);
  a.shape = view.out.shape();
  a.strides = view.out->strides;
  return a;
}

SharedView root_view(const AllocateSharedInst& alloc) {
  SharedView v;
  v.root = alloc.out;
  v.base_bytes = std::max<int64_t>(0, alloc.offset);
  v.offsets.assign(alloc.out.rank(), int_const(0));
  v.dims.resize(alloc.out.rank());
  std::iota(v.dims.begin(), v.dims.end(), 0);
  return v;
}

SharedView slice_view(const SharedView& src, const SliceSharedInst& slice) {
  SharedView v = src;
  for (size_t j = 0; j < slice.offsets.size() && j < src.dims.size(); ++j)
    v.offsets[src.dims[j]] = simplify(v.offsets[src.dims[j]] + slice.offsets[j]);
  v.dims.clear();
  for (int d : slice.dims) v.dims.push_back(src.dims[d]);
  return v;
}

GlobalAccess tile_access(GlobalAccess g, std::vector<Expr> offsets, std::vector<int> dims,
                         const std::optional<std::vector<int>>& checked) {
  g.offsets = std::move(offsets);
  g.dims = std::move(dims);
  if (checked) {
    g.checked = *checked;
  } else {
    g.checked.resize(g.shape.size());
    std::iota(g.checked.begin(), g.checked.end(), 0);
  }
  return g;
}

int64_t pointer_alignment(const Kernel& kernel, const Expr& ptr) {
  if (auto v = ptr.as<VarNode>()) {
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      if (kernel.params[i].get() != v) continue;
      auto it = kernel.param_divisibility.find(int(i));
      return it == kernel.param_divisibility.end() ? 1 : it->second;
    }
  }
  return 1;
}

int64_t global_vector_width(const BoundContext& ctx, const GlobalAccess& g, int dim, int64_t run) {
  if (dim < 0 || dim >= int(g.dims.size()) || g.dims[dim] < 0) return 1;
  int gd = g.dims[dim];
  if (!g.strides[gd].is_int_const(1)) return 1;
  bool checked = std::find(g.checked.begin(), g.checked.end(), gd) != g.checked.end();
  return widest(run, g.dtype, [&](int64_t w) {
    if (g.pointer_alignment % (w * bytes_of(g.dtype))) return false;
    if (divisor(ctx, g.offsets[gd]) % w) return false;
    for (size_t d = 0; d < g.strides.size(); ++d)
      if (int(d) != gd && divisor(ctx, g.strides[d]) % w) return false;
    // A checked dim must be all-in or all-out across a vector.
    return !checked || divisor(ctx, g.shape[gd]) % w == 0;
  });
}

int64_t shared_vector_width(const BoundContext& ctx, const SharedView& s, int dim, int64_t run) {
  if (dim < 0 || dim >= int(s.dims.size()) || s.dims[dim] < 0) return 1;
  const SharedLayout& layout = s.root->shared_layout;
  int rd = s.dims[dim];
  if (layout.strides()[rd] != 1) return 1;
  int64_t eb = bytes_of(s.root.dtype());
  return widest(run, s.root.dtype(), [&](int64_t w) {
    // The swizzle leaves the low `base` bits of the offset alone.
    if (!layout.swizzle().none() && (int64_t(1) << layout.swizzle().base) % w) return false;
    if (s.base_bytes % (w * eb)) return false;
    if (divisor(ctx, s.offsets[rd]) % w) return false;
    for (int d = 0; d < layout.rank(); ++d)
      if (d != rd && layout.strides()[d] % w) return false;
    return true;
  });
}

Contiguity contiguity(const RegisterLayout& l) {
  Contiguity c;
  if (!l.defined() || l.local_modes().empty()) return c;
  int m = l.local_modes().back();
  int d = l.mode_dim(m);
  for (int later = m + 1; later < int(l.mode_shape().size()); ++later)
    if (l.mode_dim(later) == d && l.mode_shape()[later] > 1) return c;  // a more minor mode exists
  c.dim = d;
  c.run = l.mode_shape()[m];
  return c;
}

std::optional<std::vector<MatrixGroup>> match_matrix_fragments(const RegisterLayout& l, int cdim, int64_t threads) {
  if (!l.defined() || l.rank() != 2 || cdim < 0 || cdim > 1 || threads % 32 || l.num_threads() != threads ||
      l.local_size() % 2)
    return std::nullopt;
  int rdim = 1 - cdim;
  // Where lane `lane`'s half `h` of a matrix sits relative to the matrix origin.
  auto expect = [&](bool trans, int64_t lane, int64_t h) {
    std::vector<int64_t> d(2);
    d[trans ? cdim : rdim] = lane / 4;
    d[trans ? rdim : cdim] = 2 * (lane % 4) + h;
    return d;
  };
  auto matches = [&](int64_t s0, int64_t n, bool trans) {
    for (int64_t t = 0; t < threads; ++t)
      for (int64_t j = 0; j < n; ++j) {
        auto origin = l.map(t - t % 32, s0 + 2 * j);  // lane 0 of the warp, half 0
        if (origin[cdim] % 8) return false;
        for (int64_t h = 0; h < 2; ++h) {
          auto got = l.map(t, s0 + 2 * j + h);
          auto d = expect(trans, t % 32, h);
          if (got[0] != origin[0] + d[0] || got[1] != origin[1] + d[1]) return false;
        }
      }
    return true;
  };
  std::vector<MatrixGroup> groups;
  for (int64_t s = 0; s < l.local_size();) {
    std::optional<MatrixGroup> found;
    for (int64_t n : {4, 2, 1}) {
      if (found || s + 2 * n > l.local_size()) continue;
      for (bool trans : {false, true})
        if (!found && matches(s, n, trans)) found = MatrixGroup{s, n, trans};
    }
    if (!found) return std::nullopt;
    groups.push_back(*found);
    s += 2 * found->n;
  }
  return groups;
}

std::optional<MatrixPlan> plan_matrix_copy(const BoundContext& ctx, int sm, const SharedView& view,
                                           const Tensor& reg, int64_t threads, int64_t begin, bool load) {
  DataType dt = reg.dtype();
  if (dt.bits() != 16 || dt.is_subbyte() || reg.rank() != 2 || view.dims.size() != 2 || !reg->layout.defined())
    return std::nullopt;
  if (sm < (load ? 80 : 90) || begin % 32) return std::nullopt;
  const SharedLayout& root = view.root->shared_layout;
  MatrixPlan plan;
  plan.cdim = -1;
  for (int d = 0; d < 2; ++d)
    if (view.dims[d] >= 0 && root.strides()[view.dims[d]] == 1) plan.cdim = d;
  if (plan.cdim < 0 || view.dims[1 - plan.cdim] < 0) return std::nullopt;
  // 16-byte aligned rows (the swizzle keeps 16-byte units).
  if (shared_vector_width(ctx, view, plan.cdim, 8) < 8) return std::nullopt;
  auto groups = match_matrix_fragments(reg->layout, plan.cdim, threads);
  if (!groups) return std::nullopt;
  plan.groups = *groups;
  return plan;
}


std::vector<Expr> global_index(const GlobalAccess& g, const std::vector<Expr>& tile) {
  std::vector<Expr> idx = g.offsets;
  for (size_t k = 0; k < g.dims.size() && k < tile.size(); ++k)
    if (g.dims[k] >= 0) idx[g.dims[k]] = idx[g.dims[k]] + tile[k];
  return idx;
}

Expr global_offset(const GlobalAccess& g, const std::vector<Expr>& tile) {
  auto idx = global_index(g, tile);
  Expr off = int_const(0, dtypes::int64);
  for (size_t d = 0; d < idx.size(); ++d) off = off + cast(idx[d], dtypes::int64) * cast(g.strides[d], dtypes::int64);
  return off;
}

Expr global_predicate(const GlobalAccess& g, const std::vector<Expr>& tile) {
  auto idx = global_index(g, tile);
  Expr p = bool_const(true);
  for (int d : g.checked) p = p && (idx[d] >= 0) && (idx[d] < g.shape[d]);
  return p;
}

Expr shared_offset(const SharedView& s, const std::vector<Expr>& tile) {
  std::vector<Expr> idx = s.offsets;
  for (size_t k = 0; k < s.dims.size() && k < tile.size(); ++k)
    if (s.dims[k] >= 0) idx[s.dims[k]] = idx[s.dims[k]] + tile[k];
  return s.root->shared_layout.offset(idx);
}

}  // namespace tilus
