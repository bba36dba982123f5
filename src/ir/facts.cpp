#include "tilus/ir/facts.h"
#include "tilus/ir/inst.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_set>

#include "tilus/ir/functor.h"

namespace tilus {

namespace {

// The largest block index the hardware allows in each grid dim (gridDim.x < 2^31,
// gridDim.y, gridDim.z < 2^16).
constexpr int64_t kMaxBlockIndex[3] = {(int64_t(1) << 31) - 2, 65534, 65534};

Interval hull(const Interval& a, const Interval& b) {
  Interval r;
  if (a.lo && b.lo) r.lo = std::min(*a.lo, *b.lo);
  if (a.hi && b.hi) r.hi = std::max(*a.hi, *b.hi);
  return r;
}

// `ptr` as `param + offset` (offset in elements of param's pointee, int64), when it is the
// parameter moved by integers; nullopt for any other pointer expression.
std::optional<Expr> offset_from(const Expr& ptr, const Var& param) {
  if (ptr.get() == param.get()) return int_const(0, dtypes::int64);
  auto b = ptr.as<BinaryNode>();
  if (!b || (b->op != BinaryOp::Add && b->op != BinaryOp::Sub) || param.dtype().pointee().is_void()) return std::nullopt;
  bool left = b->a.dtype().is_pointer();
  const Expr& p = left ? b->a : b->b;
  const Expr& i = left ? b->b : b->a;
  if (!i.dtype().is_integer()) return std::nullopt;
  auto base = offset_from(p, param);
  if (!base) return std::nullopt;
  Expr o = cast(i, dtypes::int64);
  return b->op == BinaryOp::Add ? *base + o : *base - o;
}

// The argument contract of one global view of parameter `param` (see ViewContract).
ViewContract view_contract(const KernelFacts& f, const GlobalViewInst& v, int param) {
  const Kernel& k = f.kernel();
  ViewContract c;
  c.loc = v.loc;
  c.type = v.out.type_str();
  c.dtype = v.out.dtype();
  c.shape = v.out.shape();
  c.strides = v.out->strides;
  const Tensor row_major = Tensor::global("", c.dtype, c.shape);
  for (size_t d = 0; d < c.strides.size(); ++d)
    c.row_major = c.row_major && structural_equal(f.simplify(c.strides[d]), f.simplify(row_major->strides[d]));
  auto offset = offset_from(v.ptr, k.params[param]);
  if (!offset) return c;
  const DataType i64 = dtypes::int64;
  Expr span = *offset + int_const(1, i64);
  Expr nonempty = bool_const(true);
  for (size_t d = 0; d < c.shape.size() && d < c.strides.size(); ++d) {
    Expr n = cast(c.shape[d], i64), s = cast(c.strides[d], i64);
    span = span + (n - int_const(1, i64)) * max(s, -s);
    nonempty = nonempty && n > int_const(0, i64);
  }
  Expr extent = f.simplify(select(nonempty, span, int_const(0, i64)));
  for (const Var& x : free_vars(extent)) {
    bool scalar_param = false;
    for (const Var& p : k.params) scalar_param |= p.get() == x.get() && !p.dtype().is_pointer();
    if (!scalar_param) return c;
  }
  c.extent = extent;
  return c;
}


}  // namespace

// One walk of the body in program order; every fact is recorded where its variable is bound.
class FactCollector : public StmtVisitor {
 public:
  explicit FactCollector(KernelFacts& f) : f_(f) {}

  // Facts of a variable bound more than once (which the tracers never do) are the hull of
  // every binding, so they stay true.
  void range(const Var& v, Interval r) {
    if (bound_.count(v.get())) r = hull(r, f_.ctx_.range_of(v));
    bound_.insert(v.get());
    f_.ctx_.set_range(v, r);
  }
  void divisor(const Var& v, int64_t d) {
    if (divided_.count(v.get())) d = std::gcd(d, f_.ctx_.divisor_of(v));
    divided_.insert(v.get());
    if (d > 1) f_.ctx_.set_divisor(v, d);
  }

 protected:
  void visit_for(const ForStmtNode& n) override {
    const BoundContext& ctx = f_.ctx_;
    Expr b = f_.simplify(n.begin), e = f_.simplify(n.end), st = f_.simplify(n.step);
    if (st.is_int_const() && st.int_value() > 0) {
      int64_t s = st.int_value();
      Interval lo = ctx.bound(b), hi = ctx.bound(e);
      Interval r{lo.lo, hi.hi ? std::optional<int64_t>(*hi.hi - 1) : std::nullopt};
      // The variable takes begin + s * j only, so with a constant begin the last value is
      // the largest such number below end.
      if (lo.is_exact() && r.hi && *r.hi >= *lo.lo) r.hi = *lo.lo + (*r.hi - *lo.lo) / s * s;
      range(n.var, r);
      divisor(n.var, std::gcd(ctx.divisor(b), s));
    } else {
      range(n.var, Interval::everything());
      divisor(n.var, 1);
    }
    StmtVisitor::visit_for(n);
  }

  void visit_let(const LetStmtNode& n) override {
    f_.lets_[n.var.get()] = n.value;
    Expr v = f_.simplify(n.value);
    range(n.var, f_.ctx_.bound(v));
    divisor(n.var, f_.ctx_.divisor(v));
  }

  void visit_thread_group(const ThreadGroupStmtNode& n) override {
    Var t("tg", dtypes::int32, VarRole::Local);
    f_.group_threads_[&n] = t;
    range(t, Interval::range(0, std::max<int64_t>(1, n.num_threads) - 1));
    StmtVisitor::visit_thread_group(n);
  }

  void visit_inst(const InstNode& inst) override {
    note_writes(inst);
    switch (inst.kind()) {
      case InstKind::AllocateRegister: {
        auto& a = static_cast<const AllocateRegisterInst&>(inst);
        if (!a.out.defined()) return;
        auto shape = a.out.static_shape();
        for (size_t d = 0; d < a.axes.size() && d < shape.size(); ++d)
          range(a.axes[d], Interval::range(0, shape[d] - 1));
        return;
      }
      case InstKind::GlobalView: {
        auto& v = static_cast<const GlobalViewInst&>(inst);
        if (!v.out.defined()) return;
        GlobalAccess a;
        a.dtype = v.out.dtype();
        a.pointer_alignment = f_.pointer_alignment(v.ptr);
        a.shape = v.out.shape();
        a.strides = v.out->strides;
        f_.globals_[v.out.get()] = a;
        // Views of the kernel's own global tensors (global_tensor) have no argument: no
        // contract, no TMA map over a parameter.
        if (int p = f_.pointer_param(v.ptr); p >= 0 && p < int(f_.kernel_.params.size())) {
          a.param = p;
          const Var& param = f_.kernel_.params[p];
          if (auto o = offset_from(v.ptr, param))
            a.param_offset_bytes = f_.simplify(
                *o * int_const(param.dtype().pointee().is_void() ? 1 : param.dtype().pointee().storage_bytes(1),
                               dtypes::int64));
          f_.globals_[v.out.get()] = a;
          f_.view_params_[v.out.get()] = p;
          f_.contracts_[p].views.push_back(view_contract(f_, v, p));
        }
        return;
      }
      case InstKind::AllocateShared: {
        auto& alloc = static_cast<const AllocateSharedInst&>(inst);
        if (!alloc.out.defined()) return;
        f_.shared_[alloc.out.get()] = whole(alloc.out, std::max<int64_t>(0, alloc.offset), alloc.offset >= 0);
        return;
      }
      case InstKind::SliceShared: {
        auto& slice = static_cast<const SliceSharedInst&>(inst);
        auto it = f_.shared_.find(slice.src.get());
        if (it == f_.shared_.end() || !slice.out.defined()) return;
        SharedView v = it->second;
        const SharedView& src = it->second;
        for (size_t j = 0; j < slice.offsets.size() && j < src.dims.size(); ++j)
          if (src.dims[j] >= 0) v.offsets[src.dims[j]] = tilus::simplify(v.offsets[src.dims[j]] + slice.offsets[j]);
        v.dims.clear();
        for (int d : slice.dims) v.dims.push_back(d >= 0 && d < int(src.dims.size()) ? src.dims[d] : -1);
        f_.shared_[slice.out.get()] = v;
        return;
      }
      case InstKind::Tcgen05Alloc: {
        auto& a = static_cast<const Tcgen05AllocInst&>(inst);
        if (!a.out.defined() || !a.out.is_tmem()) return;
        TmemView v;
        v.root = a.out;
        v.alloc = &a;
        v.col_bits = int_const(0);
        auto shape = a.out.static_shape();
        v.col_strides_bits.assign(shape.size(), 0);
        int64_t stride = a.out.dtype().bits();
        for (int d = int(shape.size()) - 1; d >= 1; --d) {
          v.col_strides_bits[size_t(d)] = stride;
          stride *= shape[size_t(d)];
        }
        f_.tmem_[a.out.get()] = v;
        return;
      }
      case InstKind::Tcgen05Slice: {
        auto& sl = static_cast<const Tcgen05SliceInst&>(inst);
        auto it = f_.tmem_.find(sl.src.get());
        if (it == f_.tmem_.end() || !sl.out.defined() || sl.offsets.empty()) return;
        const TmemView& src = it->second;
        TmemView v = src;
        if (sl.offsets[0].is_int_const()) v.lane_offset += sl.offsets[0].int_value();
        Expr bits = src.col_bits;
        for (size_t d = 1; d < sl.offsets.size() && d < src.col_strides_bits.size(); ++d)
          bits = bits + sl.offsets[d] * Expr(src.col_strides_bits[d]);
        v.col_bits = f_.simplify(bits);
        v.col_strides_bits.clear();
        for (int d : sl.dims) v.col_strides_bits.push_back(d >= 0 && d < int(src.col_strides_bits.size()) ? src.col_strides_bits[size_t(d)] : 0);
        f_.tmem_[sl.out.get()] = v;
        return;
      }
      case InstKind::Tcgen05View: {
        auto& vw = static_cast<const Tcgen05ViewInst&>(inst);
        auto it = f_.tmem_.find(vw.src.get());
        if (it == f_.tmem_.end() || !vw.out.defined()) return;
        TmemView v = it->second;
        v.col_strides_bits.resize(size_t(vw.out.rank()), 0);
        if (vw.out.rank() >= 2) v.col_strides_bits.back() = vw.out.dtype().bits();
        f_.tmem_[vw.out.get()] = v;
        return;
      }
      case InstKind::ReshapeShared: {
        auto& r = static_cast<const ReshapeSharedInst&>(inst);
        auto it = f_.shared_.find(r.src.get());
        if (it == f_.shared_.end() || !r.out.defined()) return;
        SharedView v = whole(r.out, it->second.base_bytes, it->second.planned);
        v.alias = it->second.alias.defined() ? it->second.alias : it->second.root;
        f_.shared_[r.out.get()] = v;
        return;
      }
      default: return;
    }
  }

 private:
  // The view of all of `root`, a tensor whose bytes start at `base_bytes` of shared memory.
  static SharedView whole(const Tensor& root, int64_t base_bytes, bool planned) {
    SharedView v;
    v.root = root;
    v.base_bytes = base_bytes;
    v.planned = planned;
    v.offsets.assign(root.rank(), int_const(0));
    v.dims.resize(root.rank());
    std::iota(v.dims.begin(), v.dims.end(), 0);
    return v;
  }

  // The argument contract: the first write through each pointer parameter's views.
  void note_writes(const InstNode& inst) {
    for (const InstNode::Operand& op : inst.traits()) {
      if (op.defines || !op.tensor.defined() || !op.tensor.is_global()) continue;
      if (op.access != Access::Write && op.access != Access::ReadWrite) continue;
      auto it = f_.view_params_.find(op.tensor.get());
      if (it == f_.view_params_.end()) continue;
      PointerContract& c = f_.contracts_[it->second];
      if (c.writes()) continue;
      c.write_inst = inst.display_name();
      c.write_loc = inst.loc;
    }
  }

  KernelFacts& f_;
  std::unordered_set<const void*> bound_, divided_;
};

KernelFacts::KernelFacts(const Kernel& k) : kernel_(k) {
  // Block indices range over the grid; threads over the block.
  for (size_t d = 0; d < 3; ++d) {
    Interval r = Interval::range(0, 0);
    if (d < k.grid.size()) {
      Interval g = ctx_.bound(k.grid[d]);
      int64_t hi = kMaxBlockIndex[d];
      if (g.hi) hi = std::min(hi, *g.hi - 1);
      r = Interval::range(0, hi);
    }
    ctx_.set_range(builtin::block_idx(int(d)), r);
  }
  ctx_.set_range(builtin::thread_idx(), Interval::range(0, std::max<int64_t>(1, k.num_threads()) - 1));
  // The block's place in its cluster, and the cluster's shape (a constant range).
  int64_t cluster_blocks = 1;
  for (int d = 0; d < 3; ++d) {
    ctx_.set_range(builtin::cluster_block_idx(d), Interval::range(0, k.cluster[d] - 1));
    ctx_.set_range(builtin::cluster_dim(d), Interval::range(k.cluster[d], k.cluster[d]));
    cluster_blocks *= k.cluster[d];
  }
  ctx_.set_range(builtin::cluster_block_rank(), Interval::range(0, cluster_blocks - 1));
  // Integer parameters divisible by their specialization; pointer facts are alignments in
  // bytes (pointer_alignment), not divisors of a value.
  for (auto& [index, d] : k.param_divisibility) {
    if (index < 0 || index >= int(k.params.size()) || d <= 1) continue;
    const Var& p = k.params[index];
    if (p.dtype().is_integer()) ctx_.set_divisor(p, d);
  }
  // assume(...) at the top of the body (reached by every launch) over the scalar parameters
  // only: a fact of every launch, which the launcher checks. `p % k == 0` makes the largest
  // power of two dividing k a divisor of p.
  if (auto* seq = k.body ? dynamic_cast<const SeqStmtNode*>(k.body.get()) : nullptr) {
    auto params_only = [&](const Expr& e) {
      for (const Var& v : free_vars(e))
        if (std::none_of(k.params.begin(), k.params.end(),
                         [&](const Var& p) { return p.same_as(v) && !p.dtype().is_pointer(); }))
          return false;
      return true;
    };
    for (const Stmt& s : seq->stmts) {
      auto* is = s->kind == StmtKind::Inst ? static_cast<const InstStmtNode*>(s.get()) : nullptr;
      auto* a = is ? dynamic_cast<const AssumeInst*>(is->inst.get()) : nullptr;
      if (!a || !a->cond.defined() || !params_only(a->cond)) continue;
      assumptions_.push_back({a->cond, a->loc});
      auto* eq = a->cond.as<BinaryNode>();
      auto* mod = eq && eq->op == BinaryOp::Eq && eq->b.is_int_const(0) ? eq->a.as<BinaryNode>() : nullptr;
      if (!mod || (mod->op != BinaryOp::Mod && mod->op != BinaryOp::FloorMod) || !mod->b.is_int_const() ||
          mod->b.int_value() <= 0 || !mod->a.as<VarNode>())
        continue;
      int64_t k2 = mod->b.int_value() & -mod->b.int_value();  // its largest power-of-two divisor
      Var p(mod->a);
      if (k2 > ctx_.divisor_of(p)) ctx_.set_divisor(p, k2);
    }
  }
  contracts_.resize(k.params.size());
  FactCollector c(*this);
  c.visit(k.body);
}

Expr KernelFacts::inline_lets(const Expr& e) const {
  std::function<Expr(const Expr&, int)> go = [&](const Expr& x, int depth) {
    return substitute(x, [&](const Var& v) -> Expr {
      auto it = lets_.find(v.get());
      return it == lets_.end() || depth > 16 ? Expr() : go(it->second, depth + 1);
    });
  };
  return simplify(go(e, 0));
}

bool KernelFacts::holds(const Expr& cond) const {
  Expr c = simplify(cond);
  if (auto b = c.as<BoolImmNode>()) return b->value;
  auto p = ctx_.prove(c);
  return p && *p;
}

const Var& KernelFacts::group_thread(const ThreadGroupStmtNode& group) const {
  auto it = group_threads_.find(&group);
  if (it == group_threads_.end()) throw InternalError("KernelFacts: a thread group of another kernel");
  return it->second;
}

int KernelFacts::pointer_param(const Expr& ptr) const {
  for (const Var& v : free_vars(ptr)) {
    if (!v.dtype().is_pointer()) continue;
    for (size_t i = 0; i < kernel_.params.size(); ++i)
      if (kernel_.params[i].same_as(v)) return int(i);
    for (size_t i = 0; i < kernel_.global_tensors.size(); ++i)
      if (kernel_.global_tensors[i].ptr.same_as(v)) return int(kernel_.params.size() + i);
  }
  return -1;
}

const Var& KernelFacts::pointer_var(int index) const {
  size_t n = kernel_.params.size();
  return size_t(index) < n ? kernel_.params.at(size_t(index)) : kernel_.global_tensors.at(size_t(index) - n).ptr;
}

int64_t KernelFacts::pointer_alignment(const Expr& ptr) const {
  if (auto v = ptr.as<VarNode>()) {
    // The runtime places global tensors at 128-byte multiples of 256-byte aligned buffers.
    for (const GlobalScratch& g : kernel_.global_tensors)
      if (g.ptr.get() == v) return 128;
    for (size_t i = 0; i < kernel_.params.size(); ++i) {
      if (kernel_.params[i].get() != v) continue;
      auto it = kernel_.param_divisibility.find(int(i));
      return it == kernel_.param_divisibility.end() ? 1 : it->second;
    }
  }
  return 1;
}

const GlobalAccess& KernelFacts::global(const InstNode& user, const Tensor& t) const {
  auto it = globals_.find(t.get());
  if (it == globals_.end())
    throw CompileError(fmt::format("{}: global tensor {} is not a global_view of this kernel", user.display_name(),
                                   t.defined() ? t.type_str() : "<undefined>"),
                       user.loc);
  return it->second;
}

const SharedView& KernelFacts::shared(const InstNode& user, const Tensor& t) const {
  auto it = shared_.find(t.get());
  if (it == shared_.end())
    throw CompileError(fmt::format("{}: shared tensor {} is used before its allocation", user.display_name(),
                                   t.defined() ? t.type_str() : "<undefined>"),
                       user.loc);
  return it->second;
}

const TmemView& KernelFacts::tmem(const InstNode& user, const Tensor& t) const {
  auto it = tmem_.find(t.get());
  if (it == tmem_.end())
    throw CompileError(fmt::format("{}: tensor-memory tensor {} is used before its tcgen05.alloc", user.display_name(),
                                   t.defined() ? t.type_str() : "<undefined>"),
                       user.loc);
  return it->second;
}

Expr TmemView::first_column() const { return tilus::simplify(col_bits / Expr(int64_t(32))); }

GlobalAccess KernelFacts::tile(const InstNode& user, const Tensor& g, std::vector<Expr> offsets, std::vector<int> dims,
                               const std::optional<std::vector<int>>& checked_dims) const {
  GlobalAccess a = global(user, g);
  a.offsets = std::move(offsets);
  a.dims = std::move(dims);
  if (checked_dims) {
    a.checked = *checked_dims;
  } else {
    a.checked.resize(a.shape.size());
    std::iota(a.checked.begin(), a.checked.end(), 0);
  }
  return a;
}

GlobalAccess KernelFacts::global_region(const InstNode& user, const CopyRegion& r, int tile_rank) const {
  return tile(user, r.tensor, r.offsets, region_dims(tile_rank, r.extents), r.checked_dims);
}

SharedView KernelFacts::shared_region(const InstNode& user, const CopyRegion& r, int tile_rank) const {
  SharedView v = shared(user, r.tensor);
  for (size_t d = 0; d < r.offsets.size() && d < v.dims.size(); ++d)
    if (v.dims[d] >= 0) v.offsets[v.dims[d]] = tilus::simplify(v.offsets[v.dims[d]] + r.offsets[d]);
  std::vector<int> dims;
  for (int d : region_dims(tile_rank, r.extents)) dims.push_back(d < 0 ? -1 : v.dims[d]);
  v.dims = dims;
  return v;
}

std::vector<SharedBoundsCheck> KernelFacts::shared_bounds(const SharedView& view,
                                                           const std::vector<int64_t>& tile_shape) const {
  std::vector<SharedBoundsCheck> out;
  if (!view.root.defined()) return out;
  std::vector<int64_t> size = view.root.static_shape();
  for (int d = 0; d < int(view.offsets.size()) && d < int(size.size()); ++d) {
    const Expr& offset = view.offsets[d];
    if (offset.is_int_const()) continue;
    SharedBoundsCheck c;
    c.dim = d;
    c.offset = offset;
    c.size = size[d];
    for (size_t k = 0; k < view.dims.size() && k < tile_shape.size(); ++k)
      if (view.dims[k] == d) c.extent = std::max(c.extent, tile_shape[k]);
    DataType t = offset.dtype();
    c.ok = offset >= int_const(0, t) && offset + int_const(c.extent, t) <= int_const(c.size, t);
    if (holds(c.ok)) continue;
    out.push_back(c);
  }
  return out;
}

TmaStartCheck KernelFacts::tma_start(const Expr& offset, DataType dtype) const {
  TmaStartCheck c;
  c.offset = simplify(offset);
  c.multiple = std::max<int64_t>(1, 16 / std::max<int64_t>(1, dtype.bits() / 8));
  DataType t = c.offset.dtype();
  c.ok = c.offset % int_const(c.multiple, t) == int_const(0, t);
  if (divisor(c.offset) % c.multiple == 0) {
    c.aligned = true;
    return c;
  }
  // Misaligned when the sum's constant terms are not a multiple and every other term is
  // (n * 8 + 2 of float32), or when the ranges decide it.
  int64_t constant = 0;
  bool rest_aligned = true;
  std::function<void(const Expr&, int64_t)> terms = [&](const Expr& e, int64_t sign) {
    if (auto* b = e.as<BinaryNode>(); b && (b->op == BinaryOp::Add || b->op == BinaryOp::Sub)) {
      terms(b->a, sign);
      terms(b->b, b->op == BinaryOp::Add ? sign : -sign);
    } else if (e.is_int_const()) {
      constant += sign * e.int_value();
    } else if (divisor(e) % c.multiple) {
      rest_aligned = false;
    }
  };
  terms(c.offset, 1);
  if ((rest_aligned && constant % c.multiple != 0) || holds(c.offset % int_const(c.multiple, t) != int_const(0, t)))
    c.aligned = false;
  return c;
}

std::vector<int> region_dims(int tile_rank, const std::vector<Expr>& extents) {
  std::vector<int> dims(tile_rank, -1);
  int rank = int(extents.size());
  for (int k = 0; k < tile_rank; ++k) {
    int d = k - tile_rank + rank;
    if (d >= 0 && !extents[d].is_int_const(1)) dims[k] = d;
  }
  return dims;
}

namespace {
// offsets + place(tile): tile dim k moves dim dims[k] (-1: none).
std::vector<Expr> place(std::vector<Expr> offsets, const std::vector<int>& dims, const std::vector<Expr>& tile) {
  for (size_t k = 0; k < dims.size() && k < tile.size(); ++k)
    if (dims[k] >= 0) offsets[dims[k]] = offsets[dims[k]] + tile[k];
  return offsets;
}
}  // namespace

std::vector<Expr> global_index(const GlobalAccess& g, const std::vector<Expr>& tile) {
  return place(g.offsets, g.dims, tile);
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

namespace {
Expr i64(const Expr& e) { return cast(e, dtypes::int64); }
Expr i64(int64_t v) { return int_const(v, dtypes::int64); }
}  // namespace

Im2colGeometry im2col_geometry(const Im2colInst& inst, const GlobalAccess& img) {
  Im2colGeometry g;
  g.n = i64(img.shape[0]), g.h = i64(img.shape[1]), g.w = i64(img.shape[2]), g.c = i64(img.shape[3]);
  Expr span = i64(inst.dilation * (inst.kernel - 1) + 1);
  g.oh = (g.h + i64(2 * inst.pad) - span) / i64(inst.stride) + i64(1);
  g.ow = (g.w + i64(2 * inst.pad) - span) / i64(inst.stride) + i64(1);
  g.nonempty = g.oh > i64(0) && g.ow > i64(0);
  g.rows = g.n * g.oh * g.ow;
  g.cols = i64(inst.kernel * inst.kernel) * g.c;
  return g;
}

Im2colPosition im2col_position(const Im2colInst& inst, const Im2colGeometry& g, const Expr& m, const Expr& k) {
  auto at_least_1 = [](const Expr& e) { return select(e > i64(0), e, i64(1)); };
  Expr oh = at_least_1(g.oh), ow = at_least_1(g.ow), c = at_least_1(g.c);
  Im2colPosition p;
  p.n = m / (oh * ow), p.oh = m / ow % oh, p.ow = m % ow;
  p.kh = k / (i64(inst.kernel) * c), p.kw = k / c % i64(inst.kernel), p.ch = k % c;
  return p;
}

Im2colMap im2col_map(const Im2colInst& inst, const GlobalAccess& img, const std::vector<Expr>& tile) {
  auto shape = inst.col.static_shape();
  Im2colGeometry g = im2col_geometry(inst, img);
  Expr m = i64(inst.nhw_step) * i64(shape[0]) + i64(tile[0]);
  Expr k = i64(inst.c_step) * i64(shape[1]) + i64(tile[1]);
  Im2colPosition p = im2col_position(inst, g, m, k);
  Expr ih = p.oh * i64(inst.stride) + p.kh * i64(inst.dilation) - i64(inst.pad);
  Expr iw = p.ow * i64(inst.stride) + p.kw * i64(inst.dilation) - i64(inst.pad);
  Im2colMap r;
  r.offset = p.n * i64(img.strides[0]) + ih * i64(img.strides[1]) + iw * i64(img.strides[2]) + p.ch * i64(img.strides[3]);
  r.predicate = m < g.rows && k < g.cols && ih >= i64(0) && ih < g.h && iw >= i64(0) && iw < g.w && g.nonempty;
  return r;
}

Expr shared_start_unswizzled(const SharedView& s) {
  const SharedLayout& l = s.root->shared_layout.defined() ? s.root->shared_layout
                                                           : SharedLayout::row_major(s.root.static_shape());
  Expr start = int_const(0);
  for (size_t d = 0; d < s.offsets.size(); ++d) start = start + s.offsets[d] * int_const(l.strides()[d]);
  return start;
}

Expr shared_offset(const SharedView& s, const std::vector<Expr>& tile) {
  return s.root->shared_layout.offset(place(s.offsets, s.dims, tile));
}

}  // namespace tilus
