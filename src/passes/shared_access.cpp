#include "shared_access.h"

#include <algorithm>

#include <fmt/format.h>

#include "tilus/ir/functor.h"
#include "tilus/ir/simplify.h"

namespace tilus {

namespace {

// A sum of terms as (the terms that are not constants, the constants' sum): `b + (i - 3)` is
// (b + i, -3). An undefined first: no such term.
std::pair<Expr, int64_t> split_constant(const Expr& e) {
  if (e.is_int_const()) return {Expr(), e.int_value()};
  auto* bin = e.as<BinaryNode>();
  if (!bin || (bin->op != BinaryOp::Add && bin->op != BinaryOp::Sub)) return {e, 0};
  auto [ra, ca] = split_constant(bin->a);
  auto [rb, cb] = split_constant(bin->b);
  bool add = bin->op == BinaryOp::Add;
  Expr rest = !rb.defined() ? ra : !ra.defined() ? (add ? rb : Expr(int64_t(0)) - rb) : (add ? ra + rb : ra - rb);
  return {rest, add ? ca + cb : ca - cb};
}

// (x + c) % m as (x, c, m), however the constants are spread over the sum; nullopt for any
// other form.
std::optional<std::tuple<Expr, int64_t, int64_t>> mod_form(const Expr& e) {
  auto* mod = e.as<BinaryNode>();
  if (!mod || (mod->op != BinaryOp::Mod && mod->op != BinaryOp::FloorMod) || !mod->b.is_int_const() ||
      mod->b.int_value() <= 0)
    return std::nullopt;
  auto [x, c] = split_constant(mod->a);
  if (!x.defined()) return std::nullopt;
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

const Tensor& barrier_operand(const InstNode& inst) {
  static const Tensor none;
  if (auto* copy = dynamic_cast<const CopyInst*>(&inst)) return copy->barrier;
  if (auto* im2col = dynamic_cast<const Im2colInst*>(&inst)) return im2col->barrier;
  // A definition-driven write that completes on an mbarrier (clc.try_cancel's response).
  if (auto* d = dynamic_cast<const DefinedInst*>(&inst); d && d->definition->traits.completion == Completion::MbarrierTx)
    return d->tensor("mbarrier");
  return none;
}

const TensorNode* shared_root(const KernelFacts& facts, const InstNode& user, const Tensor& t) {
  return facts.shared(user, t).root.get();
}

std::vector<SharedAccess> SharedAccessMap::accesses(const InstNode& inst) const {
  std::vector<SharedAccess> out;
  const Lowering& low = inst.lowering;
  for (auto& o : inst.traits()) {
    const Tensor& t = o.tensor;
    if (!t.defined() || !t.is_shared() || o.access == Access::Alias || o.defines) continue;
    // The box of the root allocation: the view's offsets, narrowed by a copy region with
    // constant extents.
    SharedView view = facts_.shared(inst, t);
    std::vector<Expr> lo = view.offsets;
    std::vector<int64_t> extent(lo.size(), 1);
    auto shape = t.static_shape();
    for (size_t k = 0; k < view.dims.size(); ++k)
      if (view.dims[k] >= 0) extent[view.dims[k]] = shape[k];
    const CopyRegion* r = o.region;
    if (r && r->offsets.size() == shape.size() && r->extents.size() == shape.size() &&
        std::all_of(r->extents.begin(), r->extents.end(), [](const Expr& e) { return e.is_int_const(); })) {
      for (size_t k = 0; k < view.dims.size(); ++k) {
        if (view.dims[k] < 0) continue;
        lo[view.dims[k]] = lo[view.dims[k]] + r->offsets[k];
        extent[view.dims[k]] = r->extents[k].int_value();
      }
    }
    if (view.alias.defined()) {  // a reshape: all of the allocation it reshapes
      lo.assign(size_t(view.alias.rank()), int_const(0));
      extent = view.alias.static_shape();
    }
    SharedAccess a;
    a.inst = &inst;
    a.root = view.alias.defined() ? view.alias.get() : view.root.get();
    a.lo = lo;
    a.extent = extent;
    if (view.planned) {
      const Tensor& root = view.alias.defined() ? view.alias : view.root;
      int64_t elements = root->shared_layout.defined() ? root->shared_layout.storage_elements() : root.num_elements();
      a.begin = view.base_bytes;
      a.end = a.begin + root.dtype().storage_bytes(elements);
    }
    a.write = o.access != Access::Read;
    if (low.thread_private && low.mapping.defined()) {
      a.mapping = low.mapping.str();
      for (auto& e : a.lo) a.mapping += fmt::format("|{}", to_string(e));
      for (int64_t e : a.extent) a.mapping += fmt::format("|{}", e);
    }
    // Asynchronous writes, and the shared sources that a TMA store or a wgmma reads after it
    // is issued.
    bool async_read = low.completion == Completion::TmaStoreGroup || low.completion == Completion::WgmmaGroup ||
                      low.completion == Completion::Tcgen05;
    bool async = low.is_async() && (a.write || async_read) && t.get() != barrier_operand(inst).get();
    if (async) {
      a.async = true, a.awaited = false;
      a.completion = low.completion;
      // A copy that commits its own group; async_copy leaves the wait to the kernel.
      if (low.commits_group) a.commits = 1;
      auto* copy = dynamic_cast<const CopyInst*>(&inst);
      const Tensor& bar = barrier_operand(inst);
      a.explicit_wait = (copy && copy->user_waits()) || bar.defined() || low.op == MachineOp::Wgmma ||
                        low.completion == Completion::Tcgen05;
      a.barrier = load_barrier_root(inst);
    }
    out.push_back(a);
  }
  return out;
}

bool may_overlap(const SharedAccess& a, const SharedAccess& b) {
  if (a.root != b.root) return a.begin >= 0 && b.begin >= 0 && a.begin < b.end && b.begin < a.end;
  for (size_t d = 0; d < a.lo.size(); ++d)
    if (provably_disjoint(a.lo[d], a.extent[d], b.lo[d], b.extent[d])) return false;
  return true;
}

bool same_box(const SharedAccess& a, const SharedAccess& b) {
  if (a.inst != b.inst || a.root != b.root || a.lo.size() != b.lo.size()) return false;
  for (size_t d = 0; d < a.lo.size(); ++d)
    if (!structural_equal(a.lo[d], b.lo[d])) return false;
  return true;
}

bool at_most_one_trip(const ForStmtNode& loop) {
  Expr b = simplify(loop.begin), e = simplify(loop.end), st = simplify(loop.step);
  if (!b.is_int_const() || !e.is_int_const() || !st.is_int_const() || st.int_value() <= 0) return false;
  return e.int_value() - b.int_value() <= st.int_value();
}

SharedAccess previous_iteration(const SharedAccess& a, const Var* var, const Expr& step) {
  SharedAccess s = a;
  for (auto& e : s.lo) {
    if (!var) {
      e = Expr(Var("unknown_shift", e.dtype())) + e;
      continue;
    }
    e = substitute(e, [&](const Var& v) { return v.same_as(*var) ? Expr(v) - step : Expr(); });
    // A ring's stage (x + c) % m comes round to itself after m shifts, with c kept in [0, m)
    // (the disjointness rule compares c mod m): the fixpoint sees the access it had already.
    Expr se = simplify(e);
    if (auto mf = mod_form(se)) {
      auto [x, c, m] = *mf;
      int64_t r = (c % m + m) % m;
      e = binary(se.as<BinaryNode>()->op, r ? x + Expr(r) : x, se.as<BinaryNode>()->b);
    }
  }
  return s;
}

}  // namespace tilus
