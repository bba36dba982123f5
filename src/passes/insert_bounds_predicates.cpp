#include "tilus/passes/insert_bounds_predicates.h"

#include <optional>
#include <unordered_set>
#include <vector>

#include "tilus/ir/facts.h"
#include "tilus/ir/functor.h"

namespace tilus {

namespace {

// Walks a kernel with its facts (ir/facts.h) and records, on every global access, the dims
// those facts cannot prove in bounds: the one place that decides which predicates the
// emitters generate (check_bounds=False included). Expressions are left as they are.
class BoundsPredicateInserter : public StmtMutator {
 public:
  explicit BoundsPredicateInserter(const Kernel& k) : facts_(k) {}

 protected:
  Stmt mutate_for(const Stmt& s, const ForStmtNode& n) override {
    // Only loops whose end cannot change while they run give the loop-end rule a fact.
    bool fact = n.step.is_int_const() && n.step.int_value() > 0 && immutable(n.begin) && immutable(n.end);
    if (fact) loops_.push_back(LoopFact{n.var, n.begin, n.end, n.step.int_value()});
    Stmt r = StmtMutator::mutate_for(s, n);
    if (fact) loops_.pop_back();
    return r;
  }

  Stmt mutate_declare(const Stmt& s, const DeclareStmtNode& n) override {
    mutable_.insert(n.var.get());
    return StmtMutator::mutate_declare(s, n);
  }

  Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
    if (auto i = inst_as<LoadGlobalInst>(inst)) {
      std::vector<int> dims = checked(i->src, i->offsets, i->dims, i->out);
      if (dims.empty() && i->other.defined()) {  // every element is in bounds: the fill is never read
        auto copy = std::make_shared<LoadGlobalInst>(*i);
        copy->checked_dims = std::move(dims);
        copy->other = Expr();
        return make_inst_stmt(copy);
      }
      return update<LoadGlobalInst>(s, *i, std::move(dims));
    }
    if (auto i = inst_as<StoreGlobalInst>(inst)) {
      return update<StoreGlobalInst>(s, *i, checked(i->dst, i->offsets, i->dims, i->src));
    }
    if (auto i = inst_as<AtomicInst>(inst); i && i->dst.is_global()) {
      return update<AtomicInst>(s, *i, checked(i->dst, i->offsets, i->dims, i->values));
    }
    if (auto i = inst_as<CopyAsyncInst>(inst)) {
      // check_bounds=false: the user promised the box is in bounds, so no predicate at all.
      std::vector<int> dims = i->check_bounds ? checked(i->src, i->offsets, i->dims, i->dst) : std::vector<int>{};
      return update<CopyAsyncInst>(s, *i, std::move(dims));
    }
    if (auto i = inst_as<CopyInst>(inst)) {
      // Each global end of a copy gets its own checked dims.
      auto c = std::make_shared<CopyInst>(*i);
      bool changed = false;
      for (CopyRegion* r : {&c->src, &c->dst}) {
        if (!r->tensor.defined() || !r->tensor.is_global()) continue;
        auto dims = checked(r->tensor, r->offsets, r->extents);
        changed = changed || !r->checked_dims || *r->checked_dims != dims;
        r->checked_dims = std::move(dims);
      }
      return changed ? make_inst_stmt(c) : s;
    }
    return s;
  }

 private:
  // for var in range(begin, end, step), with begin and end fixed while it runs.
  struct LoopFact {
    Var var;
    Expr begin, end;
    int64_t step;
  };

  KernelFacts facts_;
  std::vector<LoopFact> loops_;              // enclosing loops, outermost first
  std::unordered_set<const void*> mutable_;  // declared (assignable) scalars

  template <class T>
  Stmt update(const Stmt& s, const T& inst, std::vector<int> dims) {
    if (inst.checked_dims && *inst.checked_dims == dims) return s;
    auto copy = std::make_shared<T>(inst);
    copy->checked_dims = std::move(dims);
    return make_inst_stmt(copy);
  }

  bool immutable(const Expr& e) const {
    for (auto& v : free_vars(e))
      if (mutable_.count(v.get())) return false;
    return true;
  }

  // True only when the condition holds wherever this point of the program is reached.
  bool holds(const Expr& cond) const { return facts_.holds(cond); }

  // The loop-end rule: the tile [offset, offset + extent) lies in [0, extent_d) when
  // offset = var + c for an enclosing `for var in range(begin, end, step)` with
  // var's lower bound + c >= 0, c + extent <= step, extent_d >= end, and step dividing
  // end - begin. Then var + step <= end (var < end, and end - var is a multiple of step), so
  // the tile ends inside, and nothing on the way wraps around since it stays below end.
  // This is what a specialization fact (k % 32 == 0) buys `for k0 in range(0, k, 32)`: the
  // interval proof cannot see it, as k0 + 32 might wrap for all it knows of an unknown k.
  bool inside_loop_step(const Expr& offset, int64_t extent, const Expr& global_extent) const {
    for (auto it = loops_.rbegin(); it != loops_.rend(); ++it) {
      Expr c = facts_.simplify(offset - it->var);
      if (!c.is_int_const() || c.int_value() + extent > it->step) continue;
      Interval v = facts_.bounds().range_of(it->var);
      if (!v.lo || *v.lo + c.int_value() < 0) continue;
      Expr slack = facts_.simplify(global_extent - it->end);
      if (!slack.is_int_const() || slack.int_value() < 0) continue;
      if (facts_.divisor(it->end - it->begin) % it->step != 0) continue;
      return true;
    }
    return false;
  }

  // The global dims of `global` that an access of `tile` at `offsets`, with tile dim i on
  // global dim dims[i], may take out of bounds.
  std::vector<int> checked(const Tensor& global, const std::vector<Expr>& offsets, const std::vector<int>& dims,
                           const Tensor& tile) const {
    int rank = global.defined() ? global.rank() : 0;
    // Malformed accesses are the verifier's business; here they just keep every check.
    bool well_formed = global.defined() && tile.defined() && int(offsets.size()) == rank &&
                       int(dims.size()) == tile.rank();
    if (!well_formed) return all_dims(rank);
    // A global dim that no tile dim maps to is fixed at its offset: one index.
    std::vector<Expr> extents(rank, int_const(1));
    std::vector<int64_t> tile_shape = tile.static_shape();
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] >= 0 && dims[i] < rank) extents[dims[i]] = int_const(tile_shape[i]);
    return checked(global, offsets, extents);
  }

  // The global dims of the box [offsets, offsets + extents) of `global` that may be out of
  // bounds.
  std::vector<int> checked(const Tensor& global, const std::vector<Expr>& offsets,
                           const std::vector<Expr>& extents) const {
    int rank = global.defined() ? global.rank() : 0;
    if (int(offsets.size()) != rank || int(extents.size()) != rank) return all_dims(rank);
    std::vector<int> out;
    for (int d = 0; d < rank; ++d) {
      const Expr& offset = offsets[d];
      const Expr& size = global.shape()[d];
      Expr extent = facts_.simplify(extents[d]);
      bool in_bounds = (holds(offset >= 0) && holds(offset + extent <= size)) ||
                       (extent.is_int_const() && inside_loop_step(offset, extent.int_value(), size));
      if (!in_bounds) out.push_back(d);
    }
    return out;
  }

  static std::vector<int> all_dims(int rank) {
    std::vector<int> out(rank);
    for (int d = 0; d < rank; ++d) out[d] = d;
    return out;
  }
};

}  // namespace

Program insert_bounds_predicates(const Program& program) {
  return map_kernels(program, [](const Kernel& k) { return BoundsPredicateInserter(k).mutate(k); });
}

}  // namespace tilus
