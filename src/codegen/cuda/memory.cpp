// Global and shared memory: views, loads, stores, cp.async and the synchronous copy.
#include <numeric>

#include "emitter.h"
#include "tilus/passes/infer_layouts.h"

namespace tilus::cuda {

namespace {

int64_t pow2_floor(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

// The run of consecutive slots that are consecutive elements of one tile dim: the
// innermost local mode, when it is also the minor-most mode of its dim.
struct Contiguity {
  int dim = -1;     // tile dim, -1 when slots are not contiguous
  int64_t run = 1;  // slots per run
};

Contiguity contiguity(const RegisterLayout& l) {
  Contiguity c;
  if (l.local_modes().empty()) return c;
  int m = l.local_modes().back();
  int d = l.mode_dim(m);
  for (int later = m + 1; later < int(l.mode_shape().size()); ++later)
    if (l.mode_dim(later) == d && l.mode_shape()[later] > 1) return c;  // a more minor mode exists
  c.dim = d;
  c.run = l.mode_shape()[m];
  return c;
}

// One side of a tile access: where element `index` of the tile lives, and how wide a
// vector it can move at once.
struct Side {
  // Element offset of a tile index (as IR, in elements of the underlying array).
  std::function<Expr(const std::vector<Expr>&)> offset;
  // Pointer expression (C) of element offset `off`.
  std::function<std::string(const std::string& off)> address;
  // In-bounds predicate of a tile index (true when unchecked).
  std::function<Expr(const std::vector<Expr>&)> predicate;
  // Largest vector (in elements) that stays contiguous and aligned along tile dim `dim`
  // for every vector start that is a multiple of itself.
  std::function<int64_t(int dim, int64_t run)> vector;
};

Side global_side(Emitter& em, const Tensor& g, const std::vector<Expr>& offsets, const std::vector<int>& dims,
                 const std::optional<std::vector<int>>& checked) {
  const GlobalView& view = em.global(g);
  Side s;
  auto global_index = [offsets, dims](const std::vector<Expr>& tile) {
    std::vector<Expr> idx = offsets;
    for (size_t k = 0; k < dims.size() && k < tile.size(); ++k) idx[dims[k]] = idx[dims[k]] + tile[k];
    return idx;
  };
  s.offset = [&view, global_index](const std::vector<Expr>& tile) {
    auto idx = global_index(tile);
    Expr off = int_const(0, dtypes::int64);
    for (size_t d = 0; d < idx.size(); ++d) off = off + cast(idx[d], dtypes::int64) * cast(view.strides[d], dtypes::int64);
    return off;
  };
  std::string ptr = view.ptr;
  s.address = [ptr](const std::string& off) { return fmt::format("({} + {})", ptr, off); };
  std::vector<int> check;
  if (checked) check = *checked;
  else for (int d = 0; d < g.rank(); ++d) check.push_back(d);
  s.predicate = [&view, global_index, check](const std::vector<Expr>& tile) {
    auto idx = global_index(tile);
    Expr p = bool_const(true);
    for (int d : check) p = p && (idx[d] >= 0) && (idx[d] < view.shape[d]);
    return p;
  };
  s.vector = [&em, &view, dims, offsets, check, g](int dim, int64_t run) -> int64_t {
    if (dim < 0 || dim >= int(dims.size())) return 1;
    int gd = dims[dim];
    if (!view.strides[gd].is_int_const(1)) return 1;
    int64_t w = pow2_floor(std::min<int64_t>(run, 16 / elem_bytes(view.dtype)));
    auto fits = [&](int64_t w) {
      if (run % w) return false;
      if (em.pointer_alignment(view.ptr_expr) % (w * elem_bytes(view.dtype))) return false;
      if (em.divisor(offsets[gd]) % w) return false;
      for (int d = 0; d < g.rank(); ++d)
        if (d != gd && em.divisor(view.strides[d]) % w) return false;
      // A checked dim must be all-in or all-out across a vector.
      if (std::find(check.begin(), check.end(), gd) != check.end() && em.divisor(view.shape[gd]) % w) return false;
      return true;
    };
    while (w > 1 && !fits(w)) w /= 2;
    return w;
  };
  return s;
}

Side shared_side(Emitter& em, const Tensor& t) {
  const SharedView& view = em.shared(t);
  const SharedLayout& layout = view.root->shared_layout;
  Side s;
  auto root_index = [&view](const std::vector<Expr>& tile) {
    std::vector<Expr> idx = view.offsets;
    for (size_t k = 0; k < view.dims.size() && k < tile.size(); ++k) idx[view.dims[k]] = idx[view.dims[k]] + tile[k];
    return idx;
  };
  s.offset = [&layout, root_index](const std::vector<Expr>& tile) { return layout.offset(root_index(tile)); };
  std::string base = fmt::format("reinterpret_cast<{}*>(tilus_smem + {})", ctype(view.root.dtype()), view.base_bytes);
  s.address = [base](const std::string& off) { return fmt::format("({} + {})", base, off); };
  s.predicate = [](const std::vector<Expr>&) { return bool_const(true); };
  s.vector = [&em, &view, &layout, root_index](int dim, int64_t run) -> int64_t {
    if (dim < 0 || dim >= int(view.dims.size())) return 1;
    int rd = view.dims[dim];
    if (layout.strides()[rd] != 1) return 1;
    int64_t eb = elem_bytes(view.root.dtype());
    int64_t w = pow2_floor(std::min<int64_t>(run, 16 / eb));
    auto fits = [&](int64_t w) {
      if (run % w) return false;
      // The swizzle leaves the low `base` bits of the offset alone.
      if (!layout.swizzle().none() && (int64_t(1) << layout.swizzle().base) % w) return false;
      if (view.base_bytes % (w * eb)) return false;
      if (em.divisor(view.offsets[rd]) % w) return false;
      for (int d = 0; d < layout.rank(); ++d)
        if (d != rd && layout.strides()[d] % w) return false;
      return true;
    };
    while (w > 1 && !fits(w)) w /= 2;
    return w;
  };
  return s;
}

// The tile index (as IR) of a slot: the thread part plus the slot's constant part.
std::vector<Expr> slot_index(const std::vector<Expr>& spatial, const std::vector<int64_t>& local) {
  std::vector<Expr> idx;
  for (size_t d = 0; d < spatial.size(); ++d) idx.push_back(spatial[d] + int_const(local[d], spatial[d].dtype()));
  return idx;
}

// Moves a register tensor to or from memory, vector by vector.
void register_access(Emitter& em, const InstNode& inst, bool load, const Tensor& r, const Side& mem,
                     DataType mem_dtype) {
  const RegisterLayout& l = r->layout;
  const std::string& name = em.reg(r);
  Contiguity c = contiguity(l);
  int64_t w = mem.vector(c.dim, c.run);
  int64_t bytes = w * elem_bytes(mem_dtype);
  auto spatial = em.spatial_index(l);
  std::string zero = em.literal(r.dtype(), 0);
  bool guarded = false;
  if (!load) {
    Expr primary = em.primary_replica(l);
    if (!primary.is_const()) {
      em.open(fmt::format("if ({})", em.expr(primary)));
      guarded = true;
    }
  }
  for (int64_t s = 0; s < l.local_size(); s += w) {
    auto idx = slot_index(spatial, Emitter::local_index(l, s));
    std::string off = em.expr(em.simplify(mem.offset(idx)));
    Expr pred = em.simplify(mem.predicate(idx));
    std::string addr = mem.address(off);
    bool always = pred.as<BoolImmNode>() && pred.as<BoolImmNode>()->value;
    bool never = pred.as<BoolImmNode>() && !pred.as<BoolImmNode>()->value;
    std::string p = em.expr(pred);
    if (load) {
      if (w == 1) {
        if (always) em.linef("{}[{}] = *{};", name, s, addr);
        else if (never) em.linef("{}[{}] = {};", name, s, zero);
        else em.linef("{}[{}] = {} ? *{} : {};", name, s, p, addr, zero);
      } else if (always) {
        em.linef("tilus::load_vec<{}>(&{}[{}], {});", bytes, name, s, addr);
      } else if (never) {
        em.linef("tilus::zero_vec<{}>(&{}[{}]);", bytes, name, s);
      } else {
        em.linef("if ({}) tilus::load_vec<{}>(&{}[{}], {}); else tilus::zero_vec<{}>(&{}[{}]);", p, bytes, name, s,
                 addr, bytes, name, s);
      }
    } else {
      if (never) continue;
      std::string stmt = w == 1 ? fmt::format("*{} = {}[{}];", addr, name, s)
                                : fmt::format("tilus::store_vec<{}>({}, &{}[{}]);", bytes, addr, name, s);
      if (always) em.line(stmt);
      else em.linef("if ({}) {}", p, stmt);
    }
  }
  if (guarded) em.close();
}

// ldmatrix for a load_shared whose register layout is a sequence of mma operand
// fragments: in each run of 2N slots (N = 4, 2, 1 matrices) lane l of every warp holds,
// in slots 2j and 2j + 1, the elements (l / 4, 2 (l % 4) + {0, 1}) of an 8x8 matrix j
// (.trans: the transposed position) whose rows are 16 contiguous, aligned bytes of shared
// memory. Checked for every thread and slot; false (and nothing emitted) when the layout,
// dtype or memory does not allow it, so the caller falls back to plain loads.
bool emit_ldmatrix(Emitter& em, const LoadSharedInst& i) {
  const RegisterLayout& l = i.out->layout;
  const ThreadScope& sc = em.scope();
  if (elem_bytes(i.src.dtype()) != 2 || i.src.dtype().is_subbyte() || i.src.rank() != 2) return false;
  if (!em.target.has_cp_async() || sc.threads % 32 || sc.begin % 32 || l.local_size() % 2) return false;
  if (l.num_threads() != sc.threads) return false;
  const SharedView& view = em.shared(i.src);
  const SharedLayout& root = view.root->shared_layout;
  // The contiguous dim of the view (rows of 8 elements run along it) and the other one.
  int cdim = -1;
  for (int d = 0; d < 2; ++d)
    if (view.dims[d] >= 0 && root.strides()[view.dims[d]] == 1) cdim = d;
  if (cdim < 0) return false;
  int rdim = 1 - cdim;
  Side sm = shared_side(em, i.src);
  if (sm.vector(cdim, 8) < 8) return false;  // 16-byte aligned rows (swizzle keeps 16-byte units)

  // The pattern of one matrix for lane `lane` and half `h`: offset from the matrix origin.
  auto expect = [&](bool trans, int64_t lane, int64_t h) {
    std::vector<int64_t> d(2);
    d[trans ? cdim : rdim] = lane / 4;
    d[trans ? rdim : cdim] = 2 * (lane % 4) + h;
    return d;
  };
  auto matches = [&](int64_t s0, int64_t n, bool trans) {
    for (int64_t t = 0; t < sc.threads; ++t)
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
  struct Group {
    int64_t slot, n;
    bool trans;
  };
  std::vector<Group> groups;
  for (int64_t s = 0; s < l.local_size();) {
    bool found = false;
    for (int64_t n : {4, 2, 1}) {
      if (s + 2 * n > l.local_size()) continue;
      for (bool trans : {false, true})
        if (!found && matches(s, n, trans)) {
          groups.push_back({s, n, trans});
          s += 2 * n;
          found = true;
        }
      if (found) break;
    }
    if (!found) return false;
  }
  // Lane l gives row l % 8 of matrix j = l / 8 (lanes past the N matrices repeat valid
  // rows). When the matrices' origins are linear in the bits of j (as in every mma
  // fragment) the row address is arithmetic in the lane, so it is loop-invariant apart from
  // the tile's own offsets; otherwise a select over j.
  Expr thread = sc.thread;
  Expr warp_base = thread / 32 * 32;
  Expr row = thread % 8;
  Expr matrix = thread % 32 / 8;
  for (auto& g : groups) {
    auto origin = [&](int64_t j) {
      std::vector<Expr> idx = l.index_exprs(warp_base, g.slot + 2 * j);
      idx[rdim] = idx[rdim] + row;
      return idx;
    };
    auto delta = [&](int64_t j) {
      auto a = l.map(0, g.slot + 2 * j), b = l.map(0, g.slot);
      return std::vector<int64_t>{a[0] - b[0], a[1] - b[1]};
    };
    Expr off;
    bool linear = g.n < 4 || delta(3) == std::vector<int64_t>{delta(1)[0] + delta(2)[0], delta(1)[1] + delta(2)[1]};
    if (linear) {
      std::vector<Expr> idx = origin(0);
      for (int64_t bit = 1; bit < g.n; bit *= 2) {
        Expr on = thread / (8 * bit) % 2;
        for (int d = 0; d < 2; ++d)
          if (delta(bit)[d]) idx[d] = idx[d] + on * delta(bit)[d];
      }
      off = sm.offset(idx);
    } else {
      for (int64_t j = g.n - 1; j >= 0; --j) {
        Expr o = sm.offset(origin(j));
        off = off.defined() ? select(matrix == j, o, off) : o;
      }
    }
    em.linef("tilus::ldmatrix<{}, {}>(&{}[{}], {});", g.n, g.trans ? "true" : "false", em.reg(i.out), g.slot,
             sm.address(em.expr(em.simplify(off))));
  }
  return true;
}

}  // namespace

void Emitter::emit_memory(const InstNode& inst) {
  switch (inst.kind()) {
    case InstKind::GlobalView: {
      auto& i = static_cast<const GlobalViewInst&>(inst);
      GlobalView v;
      v.dtype = i.out.dtype();
      v.ptr_expr = i.ptr;
      v.shape = i.out.shape();
      v.strides = i.out->strides;
      std::string name = fresh(i.out->name.empty() ? "g" : i.out->name);
      std::string p = expr(simplify(i.ptr));
      if (i.ptr.dtype().pointee() != v.dtype) p = fmt::format("reinterpret_cast<{}*>({})", ctype(v.dtype), p);
      linef("{}* const {} = {};", ctype(v.dtype), name, p);
      v.ptr = name;
      globals_[i.out.get()] = v;
      return;
    }
    case InstKind::AllocateShared: {
      auto& i = static_cast<const AllocateSharedInst&>(inst);
      if (i.offset < 0) fail(inst, "shared tensor has no planned offset; run the pass pipeline first");
      SharedView v;
      v.root = i.out;
      v.base_bytes = i.offset;
      v.offsets.assign(i.out.rank(), int_const(0));
      v.dims.resize(i.out.rank());
      std::iota(v.dims.begin(), v.dims.end(), 0);
      shared_[i.out.get()] = v;
      return;
    }
    case InstKind::FreeShared: return;
    case InstKind::SliceShared: {
      auto& i = static_cast<const SliceSharedInst&>(inst);
      const SharedView& src = shared(i.src);
      SharedView v = src;
      for (size_t j = 0; j < i.offsets.size() && j < src.dims.size(); ++j)
        v.offsets[src.dims[j]] = simplify(v.offsets[src.dims[j]] + i.offsets[j]);
      v.dims.clear();
      for (int d : i.dims) v.dims.push_back(src.dims[d]);
      shared_[i.out.get()] = v;
      return;
    }
    case InstKind::LoadGlobal: {
      auto& i = static_cast<const LoadGlobalInst&>(inst);
      declare_reg(i.out);
      register_access(*this, inst, true, i.out, global_side(*this, i.src, i.offsets, i.dims, i.checked_dims),
                      i.src.dtype());
      return;
    }
    case InstKind::StoreGlobal: {
      auto& i = static_cast<const StoreGlobalInst&>(inst);
      register_access(*this, inst, false, i.src, global_side(*this, i.dst, i.offsets, i.dims, i.checked_dims),
                      i.dst.dtype());
      return;
    }
    case InstKind::LoadShared: {
      auto& i = static_cast<const LoadSharedInst&>(inst);
      declare_reg(i.out);
      if (emit_ldmatrix(*this, i)) return;
      register_access(*this, inst, true, i.out, shared_side(*this, i.src), i.src.dtype());
      return;
    }
    case InstKind::StoreShared: {
      auto& i = static_cast<const StoreSharedInst&>(inst);
      register_access(*this, inst, false, i.src, shared_side(*this, i.dst), i.dst.dtype());
      return;
    }
    case InstKind::CopyAsync: {
      auto& i = static_cast<const CopyAsyncInst&>(inst);
      std::vector<int64_t> shape = i.dst.static_shape();
      RegisterLayout l = default_register_layout(shape, i.dst.dtype(), scope().threads);
      std::optional<std::vector<int>> checked = i.check_bounds ? i.checked_dims : std::optional(std::vector<int>{});
      Side g = global_side(*this, i.src, i.offsets, i.dims, checked);
      Side sm = shared_side(*this, i.dst);
      Contiguity c = contiguity(l);
      int64_t w = std::min(g.vector(c.dim, c.run), sm.vector(c.dim, c.run));
      int64_t bytes = w * elem_bytes(i.dst.dtype());
      auto spatial = spatial_index(l);
      open("");
      Expr primary = primary_replica(l);
      bool guarded = !primary.is_const();
      if (guarded) open(fmt::format("if ({})", expr(primary)));
      std::string policy;
      if (bytes >= 4 && i.evict != EvictPolicy::Normal) {
        policy = fresh("policy");
        linef("const uint64_t {} = tilus::policy_evict_{}();", policy, i.evict == EvictPolicy::First ? "first" : "last");
      }
      std::string zero = literal(i.dst.dtype(), 0);
      for (int64_t s = 0; s < l.local_size(); s += w) {
        auto idx = slot_index(spatial, Emitter::local_index(l, s));
        std::string gaddr = g.address(expr(simplify(g.offset(idx))));
        std::string saddr = sm.address(expr(simplify(sm.offset(idx))));
        Expr pred = simplify(g.predicate(idx));
        if (bytes >= 4) {
          if (policy.empty()) linef("tilus::cp_async<{}>({}, {}, {});", bytes, saddr, gaddr, expr(pred));
          else linef("tilus::cp_async_hint<{}>({}, {}, {}, {});", bytes, saddr, gaddr, expr(pred), policy);
        } else {
          // No 4-byte vector is legal here: copy element by element (synchronously).
          linef("*{} = {} ? *{} : {};", saddr, expr(pred), gaddr, zero);
        }
      }
      if (guarded) close();
      close();
      return;
    }
    case InstKind::CopyAsyncCommitGroup: line("tilus::cp_async_commit();"); return;
    case InstKind::CopyAsyncWaitGroup:
      linef("tilus::cp_async_wait<{}>();", static_cast<const CopyAsyncWaitGroupInst&>(inst).n);
      return;
    case InstKind::CopyAsyncWaitAll: line("tilus::cp_async_wait_all();"); return;
    case InstKind::Copy: {
      auto& i = static_cast<const CopyInst&>(inst);
      auto side_of = [&](const CopyRegion& r) -> Side {
        if (r.tensor.is_global()) {
          std::vector<int> dims(r.tensor.rank());
          std::iota(dims.begin(), dims.end(), 0);
          return global_side(*this, r.tensor, r.offsets, dims, std::nullopt);
        }
        if (r.tensor.is_shared()) {
          // A region of a shared tensor: offset it like a slice.
          Side s = shared_side(*this, r.tensor);
          auto base = s.offset;
          auto offs = r.offsets;
          s.offset = [base, offs](const std::vector<Expr>& tile) {
            std::vector<Expr> idx;
            for (size_t d = 0; d < tile.size(); ++d) idx.push_back(offs[d] + tile[d]);
            return base(idx);
          };
          s.vector = [](int, int64_t) -> int64_t { return 1; };
          return s;
        }
        fail(inst, "register regions are moved with load/store instructions");
      };
      if (i.src.tensor.is_register() || i.dst.tensor.is_register()) {
        // A whole register tensor to or from memory: the register layout maps the threads.
        bool load = i.dst.tensor.is_register();
        const CopyRegion& mem = load ? i.src : i.dst;
        const Tensor& r = load ? i.dst.tensor : i.src.tensor;
        if (mem.tensor.rank() != r.rank()) fail(inst, "register regions must have the rank of the other side");
        if (load) declare_reg(r);
        register_access(*this, inst, load, r, side_of(mem), mem.tensor.dtype());
        return;
      }
      std::vector<int64_t> extents;
      for (auto& e : i.dst.extents) {
        Expr s = simplify(e);
        if (!s.is_int_const()) fail(inst, "copy with dynamic extents is not lowered yet: " + to_string(e));
        extents.push_back(s.int_value());
      }
      Side src = side_of(i.src), dst = side_of(i.dst);
      RegisterLayout l = i.scalar ? replicated(scope().threads) * local(std::vector<int64_t>(extents.size(), 1))
                                  : default_register_layout(extents, i.dst.tensor.dtype(), scope().threads);
      auto spatial = spatial_index(l);
      open("");
      Expr primary = primary_replica(l);
      bool guarded = !primary.is_const();
      if (guarded) open(fmt::format("if ({})", expr(primary)));
      std::string zero = literal(i.dst.tensor.dtype(), 0);
      for (int64_t s = 0; s < l.local_size(); ++s) {
        auto didx = slot_index(spatial, Emitter::local_index(l, s));
        // Source index: right-aligned, extent-1 dims broadcast.
        std::vector<Expr> sidx;
        size_t sr = i.src.extents.size(), dr = didx.size();
        for (size_t d = 0; d < sr; ++d) {
          Expr ext = simplify(i.src.extents[d]);
          size_t dd = d + dr - std::min(sr, dr);
          sidx.push_back(ext.is_int_const(1) || dd >= dr ? int_const(0) : didx[dd]);
        }
        std::string v = fmt::format("({} ? *{} : {})", expr(simplify(src.predicate(sidx))),
                                    src.address(expr(simplify(src.offset(sidx)))), zero);
        Expr dp = simplify(dst.predicate(didx));
        std::string store = fmt::format("*{} = {};", dst.address(expr(simplify(dst.offset(didx)))), v);
        if (dp.is_const()) line(store);
        else linef("if ({}) {}", expr(dp), store);
      }
      if (guarded) close();
      close();
      return;
    }
    default: fail(inst, "not a memory instruction");
  }
}

}  // namespace tilus::cuda
