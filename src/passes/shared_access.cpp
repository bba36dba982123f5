#include "shared_access.h"

#include <algorithm>

#include "tilus/ir/functor.h"
#include "tilus/ir/simplify.h"

namespace tilus {

namespace {

// (x + c) % m as (x, c, m); nullopt for any other form.
std::optional<std::tuple<Expr, int64_t, int64_t>> mod_form(const Expr& e) {
  auto* mod = e.as<BinaryNode>();
  if (!mod || mod->op != BinaryOp::Mod || !mod->b.is_int_const()) return std::nullopt;
  Expr x = mod->a;
  int64_t c = 0;
  if (auto* add = x.as<BinaryNode>(); add && add->op == BinaryOp::Add && add->b.is_int_const()) {
    c = add->b.int_value();
    x = add->a;
  }
  return std::tuple(x, c, mod->b.int_value());
}

bool provably_disjoint(const Expr& a, int64_t ea, const Expr& b, int64_t eb) {
  Expr diff = simplify(a - b);
  if (diff.is_int_const()) return diff.int_value() >= eb || -diff.int_value() >= ea;
  auto ma = mod_form(simplify(a)), mb = mod_form(simplify(b));
  if (ma && mb && ea == 1 && eb == 1 && std::get<2>(*ma) == std::get<2>(*mb) &&
      structural_equal(std::get<0>(*ma), std::get<0>(*mb))) {
    int64_t m = std::get<2>(*ma);
    return ((std::get<1>(*ma) - std::get<1>(*mb)) % m + m) % m != 0;
  }
  return false;
}

}  // namespace

SharedAccessMap::SharedAccessMap(const Kernel& k) {
  struct Collect : StmtVisitor {
    SharedAccessMap* self;
    void visit_inst(const InstNode& i) override {
      if (auto* a = dynamic_cast<const AllocateSharedInst*>(&i)) self->roots_[a->out.get()] = a;
      if (auto* s = dynamic_cast<const SliceSharedInst*>(&i)) self->slices_[s->out.get()] = s;
    }
  } c;
  c.self = this;
  c.visit(k.body);
}

std::optional<SharedAccess> SharedAccessMap::region(const Tensor& t, const CopyRegion* box) const {
  SharedAccess a;
  std::vector<Expr> lo;
  std::vector<int64_t> extent;
  for (int64_t e : t.static_shape()) lo.push_back(int_const(0, dtypes::int32)), extent.push_back(e);
  // A copy region with constant extents narrows the box.
  if (box && box->offsets.size() == lo.size() && box->extents.size() == lo.size() &&
      std::all_of(box->extents.begin(), box->extents.end(), [](const Expr& e) { return e.is_int_const(); })) {
    lo = box->offsets;
    for (size_t d = 0; d < lo.size(); ++d) extent[d] = box->extents[d].int_value();
  }
  const TensorNode* node = t.get();
  while (slices_.count(node)) {
    const SliceSharedInst* s = slices_.at(node);
    std::vector<Expr> src_lo = s->offsets;
    std::vector<int64_t> src_extent(s->offsets.size(), 1);
    for (size_t k = 0; k < s->dims.size(); ++k) {
      src_lo[s->dims[k]] = src_lo[s->dims[k]] + lo[k];
      src_extent[s->dims[k]] = extent[k];
    }
    lo = src_lo, extent = src_extent;
    node = s->src.get();
  }
  auto root = roots_.find(node);
  if (root == roots_.end()) return std::nullopt;
  a.root = node;
  a.lo = lo;
  a.extent = extent;
  if (root->second->offset >= 0) {
    const Tensor& r = root->second->out;
    int64_t elements = r->shared_layout.defined() ? r->shared_layout.storage_elements() : r.num_elements();
    a.begin = root->second->offset;
    a.end = a.begin + r.dtype().storage_bytes(elements);
  }
  return a;
}

std::vector<SharedAccess> SharedAccessMap::accesses(const InstNode& inst) const {
  std::vector<SharedAccess> out;
  auto* copy = dynamic_cast<const CopyInst*>(&inst);
  for (auto& [t, use] : inst.operands()) {
    if (!t.defined() || !t.is_shared() || use == Access::Alias) continue;
    const CopyRegion* box = nullptr;
    if (copy) box = use == Access::Read ? &copy->src : &copy->dst;
    auto a = region(t, box);
    if (!a) continue;
    a->inst = &inst;
    a->write = use != Access::Read;
    Tensor reg;
    if (auto* l = dynamic_cast<const LoadSharedInst*>(&inst)) reg = l->out;
    if (auto* s = dynamic_cast<const StoreSharedInst*>(&inst)) reg = s->src;
    if (reg.defined() && reg->layout.defined() && reg.dtype().bits() != 16) {
      a->mapping = reg->layout.str();
      for (auto& e : a->lo) a->mapping += "|" + to_string(e);
    }
    if (a->write && inst.is_async()) a->async = true, a->awaited = false;
    // A cp.async copy commits its own group; async_copy leaves the wait to the kernel.
    if (a->write && copy && copy->is_async()) a->commits = 1, a->explicit_wait = copy->async_commit;
    out.push_back(*a);
  }
  return out;
}

bool may_overlap(const SharedAccess& a, const SharedAccess& b) {
  if (a.root != b.root) return a.begin >= 0 && b.begin >= 0 && a.begin < b.end && b.begin < a.end;
  for (size_t d = 0; d < a.lo.size(); ++d)
    if (provably_disjoint(a.lo[d], a.extent[d], b.lo[d], b.extent[d])) return false;
  return true;
}

SharedAccess previous_iteration(const SharedAccess& a, const Var* var, const Expr& step) {
  SharedAccess s = a;
  for (auto& e : s.lo) {
    if (var) e = substitute(e, [&](const Var& v) { return v.same_as(*var) ? Expr(v) - step : Expr(); });
    else e = Expr(Var("unknown_shift", e.dtype())) + e;
  }
  return s;
}

}  // namespace tilus
