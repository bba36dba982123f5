#include "tilus/passes/pipeline_loops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/facts.h"
#include "tilus/ir/functor.h"
#include "tilus/passes/select_instructions.h"

namespace tilus {

namespace {

std::vector<Stmt> flatten(const Stmt& s) {
  std::vector<Stmt> out;
  if (!s) return out;
  if (auto* q = stmt_as<SeqStmtNode>(s)) {
    for (auto& c : q->stmts) {
      auto f = flatten(c);
      out.insert(out.end(), f.begin(), f.end());
    }
    return out;
  }
  out.push_back(s);
  return out;
}

const InstNode* inst_of(const Stmt& s) {
  auto* i = stmt_as<InstStmtNode>(s);
  return i ? i->inst.get() : nullptr;
}

Stmt emit(std::shared_ptr<InstNode> i, const SourceLoc& loc) {
  i->loc = loc;
  return make_inst_stmt(std::move(i));
}

// A fresh tensor like t (a new identity), its shape and strides mapped by f.
Tensor fresh_tensor(const Tensor& t, const std::function<Expr(const Expr&)>& f) {
  auto n = std::make_shared<TensorNode>(*t.get());
  for (auto& e : n->shape) e = f(e);
  for (auto& e : n->strides) e = f(e);
  return Tensor(n);
}

// Where every tensor is defined and used, and which loops hold each instruction (program order).
struct Index : StmtVisitor {
  struct Use {
    const InstNode* inst;
    Access access;
  };
  std::unordered_map<const TensorNode*, const InstNode*> def;
  std::unordered_map<const TensorNode*, std::vector<Use>> uses;
  std::unordered_map<const TensorNode*, Tensor> view_src;  // slice / reshape -> what it views
  std::unordered_map<const InstNode*, std::vector<const ForStmtNode*>> loops_of;
  std::unordered_map<const InstNode*, int64_t> order;
  std::vector<const ForStmtNode*> marked;  // loops the Script asked to pipeline, in program order
  std::vector<const ForStmtNode*> stack;
  int64_t counter = 0;

  void visit_for(const ForStmtNode& f) override {
    if (f.pipeline.requested() && f.pipeline.ring.empty()) marked.push_back(&f);
    stack.push_back(&f);
    StmtVisitor::visit_for(f);
    stack.pop_back();
  }
  void visit_inst(const InstNode& i) override {
    order[&i] = counter++;
    loops_of[&i] = stack;
    for (auto& op : i.traits()) {
      if (!op.tensor.defined()) continue;
      if (op.defines) def[op.tensor.get()] = &i;
      else uses[op.tensor.get()].push_back({&i, op.access});
    }
    if (auto* s = dynamic_cast<const SliceSharedInst*>(&i)) view_src[s->out.get()] = s->src;
    if (auto* r = dynamic_cast<const ReshapeSharedInst*>(&i)) view_src[r->out.get()] = r->src;
  }
  Tensor root(Tensor t) const {
    for (;;) {
      auto it = view_src.find(t.get());
      if (it == view_src.end()) return t;
      t = it->second;
    }
  }
  bool inside(const InstNode* i, const ForStmtNode* loop) const {
    auto it = loops_of.find(i);
    return it != loops_of.end() && std::find(it->second.begin(), it->second.end(), loop) != it->second.end();
  }
  bool defined_inside(const Tensor& t, const ForStmtNode* loop) const {
    auto it = def.find(t.get());
    return it != def.end() && inside(it->second, loop);
  }
  // The slice chain from the root to view t: t's own instruction last.
  std::vector<const SliceSharedInst*> chain(const Tensor& t) const {
    std::vector<const SliceSharedInst*> out;
    Tensor cur = t;
    for (;;) {
      auto it = view_src.find(cur.get());
      if (it == view_src.end()) break;
      out.push_back(dynamic_cast<const SliceSharedInst*>(def.at(cur.get())));
      cur = it->second;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
};

// One copy of a pipelined tile, as the ring issues it: a global tile into a shared tile (the
// fields of copy_async) or an im2col tile.
struct Producer {
  const InstNode* inst = nullptr;       // copy_async / copy / store_shared / c2d_im2col
  const InstNode* load = nullptr;       // the load_global of a load_global + store_shared pair
  Tensor root;                          // the pipelined tile
  Tensor dst;                           // the tensor the body writes: root or a view of it
  // `copy` into a part of dst: the slice of dst it writes (dst_dims empty: all of dst).
  std::vector<Expr> dst_offsets;
  std::vector<int> dst_dims;
  Tensor global;
  std::vector<Expr> offsets;
  std::vector<int> dims;
  EvictPolicy evict = EvictPolicy::Normal;
  std::optional<EvictPolicy> eviction_policy;
  bool check_bounds = true;
  bool disable_tma = false;
  const Im2colInst* im2col = nullptr;
};

// A marked loop and what the analysis found in it.
struct Ring {
  const ForStmtNode* loop = nullptr;
  int64_t stages = 0;
  std::vector<Producer> producers;  // in body order
  std::vector<Tensor> roots;        // the pipelined tiles, in the order their first copy comes
  std::unordered_set<const InstNode*> moved;  // the body's instructions the ring issues itself
  // Tiles' views defined before the loop and used in it (re-made on each stage).
  std::vector<Tensor> outer_views;
  std::unordered_map<const ExprNode*, Expr> lets;  // top-level lets of the body
  bool tma = false;
  std::string note;
  // dots lowered to wgmma that accumulate in place with one iteration's groups in flight: the
  // instructions dropped (the accumulator's copies and the per-iteration wait), the copy of the
  // accumulator each wgmma writes -> the accumulator, and the last such group's commit, after
  // which the iteration waits for the previous one's groups.
  std::unordered_set<const InstNode*> wgmma_dropped;
  std::unordered_map<const TensorNode*, Tensor> wgmma_acc;
  const InstNode* wgmma_last_commit = nullptr;
  int64_t wgmma_groups = 0;
  // Whether every read of the tiles in the body is such a wgmma (one thread of a warp group then
  // releases a stage for the whole group).
  bool only_wgmma_reads = false;
  // The schedule chosen (pipeline_loops decides it from the request and what the kernel allows).
  bool warp_specialized = false;
  bool persistent = false;
  std::string schedule;
  // Global views made before the loop from blockIdx: made again for each tile's copies.
  std::unordered_set<const TensorNode*> remade_globals;
  // The TMA-store epilogue of a persistent ring (choose_epilogue): the store_global after the
  // loop it replaces, the columns of one TMA box, and its TMA stores as the rebuild made them,
  // at the store's own offsets (before blockIdx becomes the tile's), for their legality check.
  const StoreGlobalInst* epilogue_store = nullptr;
  int64_t epilogue_box = 0;
  std::vector<std::shared_ptr<CopyInst>> epilogue_copies;
};

std::string what(const InstNode& i) { return fmt::format("`{}` at {}", i.display_name(), i.loc.str()); }

class Analyzer {
 public:
  explicit Analyzer(const Kernel& k) : facts_(k) {
    index_.visit(k.body);
  }

  const Index& index() const { return index_; }

  std::vector<Ring> run() {
    std::vector<Ring> rings;
    for (const ForStmtNode* loop : index_.marked) {
      Ring r = analyze(*loop);
      if (!r.producers.empty()) rings.push_back(std::move(r));
    }
    return rings;
  }

 private:
  [[noreturn]] void refuse(const ForStmtNode& loop, const std::string& why) const {
    throw CompileError(fmt::format("range(num_stages={}) at {}: cannot pipeline this loop: {}", loop.pipeline.num_stages,
                                   loop.loc.str(), why),
                       loop.loc);
  }

  Ring analyze(const ForStmtNode& loop) {
    Ring ring;
    ring.loop = &loop;
    ring.stages = loop.pipeline.num_stages;
    Expr step = facts_.simplify(loop.step);
    if (!step.is_int_const() || step.int_value() <= 0)
      refuse(loop, fmt::format("its step ({}) is not a positive constant: the ring numbers iterations by it",
                               to_string(loop.step)));
    check_control_flow(loop);
    std::vector<Stmt> body = flatten(loop.body);
    for (auto& s : body)
      if (auto* l = stmt_as<LetStmtNode>(s)) ring.lets[l->var.get()] = l->value;
    // The loads of a load_global + store_shared pair, by their output.
    std::unordered_map<const TensorNode*, const LoadGlobalInst*> loads;
    for (auto& s : body)
      if (auto* l = dynamic_cast<const LoadGlobalInst*>(inst_of(s))) loads[l->out.get()] = l;
    std::unordered_set<const InstNode*> top;
    for (auto& s : body)
      if (auto* i = inst_of(s)) top.insert(i);
    // Every write of a shared tile allocated outside the loop: a copy at the body's top level,
    // or something else.
    std::vector<std::pair<const InstNode*, Tensor>> other_writes;
    struct Walk : StmtVisitor {
      std::function<void(const InstNode&)> f;
      void visit_inst(const InstNode& i) override { f(i); }
    } walk;
    walk.f = [&](const InstNode& i) {
      for (auto& op : i.traits()) {
        if (op.defines || !op.tensor.defined() || !op.tensor.is_shared()) continue;
        if (op.access != Access::Write && op.access != Access::ReadWrite) continue;
        Tensor root = index_.root(op.tensor);
        const InstNode* d = index_.def.count(root.get()) ? index_.def.at(root.get()) : nullptr;
        if (!d || !dynamic_cast<const AllocateSharedInst*>(d) || index_.inside(d, &loop)) continue;
        std::optional<Producer> p = top.count(&i) ? producer(loop, i, op.tensor, root, loads) : std::nullopt;
        if (p) ring.producers.push_back(std::move(*p));
        else other_writes.emplace_back(&i, root);
      }
    };
    walk.visit(loop.body);
    if (ring.producers.empty())
      refuse(loop, "its body copies no tile from global to shared memory at its top level (copy_async, copy, "
                   "load_global + store_shared, c2d_im2col), so there is nothing to issue ahead");
    for (auto& p : ring.producers) {
      if (std::none_of(ring.roots.begin(), ring.roots.end(), [&](const Tensor& t) { return t.same_as(p.root); }))
        ring.roots.push_back(p.root);
      ring.moved.insert(p.inst);
      if (p.load) ring.moved.insert(p.load);
    }
    auto is_root = [&](const Tensor& t) {
      return std::any_of(ring.roots.begin(), ring.roots.end(), [&](const Tensor& r) { return r.same_as(t); });
    };
    for (auto& [i, root] : other_writes)
      if (is_root(root))
        refuse(loop, fmt::format("{} writes the pipelined tile `{}`, which only copies from global memory may fill "
                                 "(each stage holds what one iteration copied)",
                                 what(*i), root->name));
    check_forbidden(loop);
    for (const Tensor& t : ring.roots) check_tile(loop, ring, t);
    for (auto& p : ring.producers) check_relocatable(loop, ring, p);
    check_global_writes(loop, ring);
    check_bounds_invariant(loop);
    plan_async_wgmma(loop, ring, body);
    return ring;
  }

  // lower_dots_to_wgmma made each dot `d = register_tensor(); d = c; wgmma.mma(a, b, d);
  // commit; wait_group(0); c = d`. Where a and b are shared and the body touches c nowhere else,
  // the wgmma accumulates into c itself and the iteration waits only for the previous
  // iteration's groups (after its own last commit): its stages are then free to refill.
  void plan_async_wgmma(const ForStmtNode& loop, Ring& ring, const std::vector<Stmt>& body) const {
    std::unordered_set<const InstNode*> async;
    auto uses_inside = [&](const Tensor& t) {
      int64_t n = 0;
      auto it = index_.uses.find(t.get());
      if (it != index_.uses.end())
        for (auto& u : it->second) n += index_.inside(u.inst, &loop);
      return n;
    };
    for (size_t i = 0; i + 3 < body.size(); ++i) {
      auto* mma = dynamic_cast<const WgmmaMmaInst*>(inst_of(body[i]));
      if (!mma || !mma->from_dot || !mma->a.is_shared() || !mma->b.is_shared()) continue;
      auto* commit = dynamic_cast<const WgmmaCommitGroupInst*>(inst_of(body[i + 1]));
      auto* wait = dynamic_cast<const WgmmaWaitGroupInst*>(inst_of(body[i + 2]));
      auto* out = dynamic_cast<const AssignInst*>(inst_of(body[i + 3]));
      if (!commit || !wait || wait->n != 0 || !out || !out->src.same_as(mma->d)) continue;
      const Tensor& acc = out->dst;
      const AllocateRegisterInst* alloc = nullptr;
      const AssignInst* in = nullptr;
      for (size_t k = 0; k < i; ++k) {
        if (auto* a = dynamic_cast<const AllocateRegisterInst*>(inst_of(body[k])); a && a->out.same_as(mma->d))
          alloc = a;
        if (auto* a = dynamic_cast<const AssignInst*>(inst_of(body[k])); a && a->dst.same_as(mma->d)) in = a;
      }
      if (!alloc || alloc->init.defined() || !in || !in->src.same_as(acc)) continue;
      if (index_.defined_inside(acc, &loop) || uses_inside(acc) != 2 || uses_inside(mma->d) != 3) continue;
      ring.wgmma_dropped.insert({alloc, in, wait, out});
      ring.wgmma_acc[mma->d.get()] = acc;
      ring.wgmma_last_commit = commit;
      ++ring.wgmma_groups;
      async.insert(mma);
    }
    // Every read of a tile (or a view of it) in the body by such a wgmma?
    ring.only_wgmma_reads = ring.wgmma_groups > 0;
    std::vector<const TensorNode*> members;
    for (const Tensor& r : ring.roots) members.push_back(r.get());
    for (size_t k = 0; k < members.size(); ++k)
      for (auto& [view, src] : index_.view_src)
        if (src.get() == members[k] && std::find(members.begin(), members.end(), view) == members.end())
          members.push_back(view);
    for (const TensorNode* m : members) {
      auto it = index_.uses.find(m);
      if (it == index_.uses.end()) continue;
      for (auto& u : it->second)
        if (index_.inside(u.inst, &loop) && u.access != Access::Alias && !ring.moved.count(u.inst) &&
            !async.count(u.inst))
          ring.only_wgmma_reads = false;
    }
  }

  // The copy `i` (a top-level statement of the body) writing `t` (root `root`) as a ring copy, or
  // nullopt when it is not a copy from global memory.
  std::optional<Producer> producer(const ForStmtNode& loop, const InstNode& i, const Tensor& t, const Tensor& root,
                                   const std::unordered_map<const TensorNode*, const LoadGlobalInst*>& loads) const {
    Producer p;
    p.inst = &i;
    p.root = root;
    p.dst = t;
    if (auto* c = dynamic_cast<const CopyAsyncInst*>(&i)) {
      p.global = c->src;
      p.offsets = c->offsets;
      p.dims = c->dims;
      p.evict = c->evict;
      p.check_bounds = c->check_bounds;
      return p;
    }
    if (auto* s = dynamic_cast<const StoreSharedInst*>(&i)) {
      auto it = loads.find(s->src.get());
      if (it == loads.end()) return std::nullopt;
      auto users = index_.uses.find(s->src.get());
      if (users == index_.uses.end() || users->second.size() != 1) return std::nullopt;
      const LoadGlobalInst* l = it->second;
      if (index_.order.at(l) > index_.order.at(&i)) return std::nullopt;
      p.load = l;
      p.global = l->src;
      p.offsets = l->offsets;
      p.dims = l->dims;
      return p;
    }
    if (auto* m = dynamic_cast<const Im2colInst*>(&i)) {
      if (m->barrier.defined()) return std::nullopt;  // split-phase: the Script's own ring (refused below)
      p.im2col = m;
      p.global = m->img;
      p.eviction_policy = m->eviction_policy;
      return p;
    }
    auto* c = dynamic_cast<const CopyInst*>(&i);
    if (!c || c->api != CopyApi::Copy || !c->src.tensor.is_global() || !c->dst.tensor.is_shared()) return std::nullopt;
    // The tile: the extents other than 1, in order, must be the same on both sides.
    std::vector<int> gdims, sdims;
    std::vector<int64_t> gext, sext;
    for (int side = 0; side < 2; ++side) {
      const CopyRegion& r = side ? c->dst : c->src;
      for (size_t d = 0; d < r.extents.size(); ++d) {
        Expr e = facts_.simplify(r.extents[d]);
        if (!e.is_int_const())
          refuse(loop, fmt::format("{} copies a region of extents {} that are not all constants", what(i),
                                   shape_str(r.extents)));
        if (e.int_value() == 1) continue;
        (side ? sdims : gdims).push_back(int(d));
        (side ? sext : gext).push_back(e.int_value());
      }
    }
    if (gext != sext)
      refuse(loop, fmt::format("{} broadcasts a global region of extents {} into a shared region of extents {}; the "
                               "ring copies tiles whose extents match (copy_async(src, dst, offsets) names one)",
                               what(i), shape_str(c->src.extents), shape_str(c->dst.extents)));
    p.global = c->src.tensor;
    p.offsets = c->src.offsets;
    p.dims = gdims;
    p.eviction_policy = c->eviction_policy;
    if (c->eviction_policy) p.evict = *c->eviction_policy;
    p.disable_tma = c->disable_tma || c->use_cp_async;
    bool whole = int(sdims.size()) == t.rank();
    auto shape = t.static_shape();
    for (size_t d = 0; d < c->dst.offsets.size() && whole; ++d)
      whole = facts_.simplify(c->dst.offsets[d]).is_int_const(0) && sext[d] == shape[d];
    if (!whole) {
      p.dst_offsets = c->dst.offsets;
      p.dst_dims = sdims;
    }
    return p;
  }

  void check_control_flow(const ForStmtNode& loop) const {
    struct Walk : StmtVisitor {
      const Analyzer* self;
      const ForStmtNode* loop;
      int depth = 0;  // loops nested in the pipelined one
      void visit_for(const ForStmtNode& f) override {
        if (f.pipeline.requested())
          self->refuse(*loop, fmt::format("the loop at {} inside it is pipelined too; pipeline one of them",
                                          f.loc.str()));
        ++depth;
        StmtVisitor::visit_for(f);
        --depth;
      }
      void visit_while(const WhileStmtNode& w) override {
        ++depth;
        StmtVisitor::visit_while(w);
        --depth;
      }
      void leave(const char* kw, const SourceLoc& at) {
        self->refuse(*loop, fmt::format("`{}` at {} ends an iteration early, and the ring issues each stage's copies "
                                        "at the end of the iteration num_stages - 1 before it",
                                        kw, at.str()));
      }
      void visit_break(const BreakStmtNode& b) override {
        if (!depth) leave("break", b.loc);
      }
      void visit_continue(const ContinueStmtNode& c) override {
        if (!depth) leave("continue", c.loc);
      }
      void visit_return(const ReturnStmtNode& r) override { leave("return", r.loc); }
    } w;
    w.self = this;
    w.loop = &loop;
    w.visit(loop.body);
  }

  // Waits and barriers written in the body belong to a schedule written by hand.
  void check_forbidden(const ForStmtNode& loop) const {
    struct Walk : StmtVisitor {
      const InstNode* found = nullptr;
      void visit_inst(const InstNode& i) override {
        if (found) return;
        switch (i.kind()) {
          case InstKind::CopyAsyncCommitGroup:
          case InstKind::CopyAsyncWaitGroup:
          case InstKind::CopyAsyncWaitAll:
          case InstKind::Sync:
          case InstKind::MbarrierInit:
          case InstKind::Mbarrier:
          case InstKind::TmaCommitGroup:
          case InstKind::TmaWaitGroup:
          case InstKind::FenceProxyAsync: found = &i; return;
          case InstKind::Copy:
            if (static_cast<const CopyInst&>(i).api != CopyApi::Copy) found = &i;
            return;
          case InstKind::Im2col:
            if (static_cast<const Im2colInst&>(i).barrier.defined()) found = &i;
            return;
          default: return;
        }
      }
    } w;
    w.visit(loop.body);
    if (w.found)
      refuse(loop, fmt::format("the ring derives its own waits and barriers, and the body has {}: remove it (or drop "
                               "num_stages and schedule the loop by hand)",
                               what(*w.found)));
  }

  // The tile is read in an iteration only after that iteration's copies, used nowhere outside
  // the loop, and filled whole by the copies.
  void check_tile(const ForStmtNode& loop, Ring& ring, const Tensor& root) {
    const Producer* last = nullptr;
    std::vector<const Producer*> copies;
    for (auto& p : ring.producers)
      if (p.root.same_as(root)) {
        if (!last || index_.order.at(p.inst) > index_.order.at(last->inst)) last = &p;
        copies.push_back(&p);
      }
    // The tile and its views.
    std::vector<const TensorNode*> members{root.get()};
    for (size_t k = 0; k < members.size(); ++k)
      for (auto& [view, src] : index_.view_src)
        if (src.get() == members[k] && std::find(members.begin(), members.end(), view) == members.end())
          members.push_back(view);
    for (size_t k = 1; k < members.size(); ++k)
      if (auto* r = dynamic_cast<const ReshapeSharedInst*>(index_.def.at(members[k])))
        refuse(loop, fmt::format("{} reshapes the pipelined tile `{}`; slice it instead", what(*r), root->name));
    for (const TensorNode* m : members) {
      auto it = index_.uses.find(m);
      if (it == index_.uses.end()) continue;
      for (auto& u : it->second) {
        bool view_def = dynamic_cast<const SliceSharedInst*>(u.inst) || dynamic_cast<const ReshapeSharedInst*>(u.inst);
        if (!index_.inside(u.inst, &loop)) {
          if (view_def) continue;  // its own uses are checked as a member
          refuse(loop, fmt::format("the pipelined tile `{}` is used outside the loop, by {}: its stages hold only "
                                   "what the loop's iterations copied",
                                   root->name, what(*u.inst)));
        }
        if (view_def || u.access == Access::Alias || ring.moved.count(u.inst)) continue;
        if (index_.order.at(u.inst) < index_.order.at(last->inst))
          refuse(loop, fmt::format("{} reads `{}` before {} writes it in the same iteration, so it reads what the "
                                   "previous iteration copied (a dependence through shared memory from one iteration "
                                   "to the next, which a ring of stages would break)",
                                   what(*u.inst), root->name, what(*last->inst)));
      }
    }
    // Views defined before the loop and used in it are made again over each stage.
    for (size_t k = 1; k < members.size(); ++k) {
      const InstNode* d = index_.def.at(members[k]);
      if (index_.inside(d, &loop)) continue;
      auto it = index_.uses.find(members[k]);
      bool used_inside = it != index_.uses.end() && std::any_of(it->second.begin(), it->second.end(), [&](auto& u) {
                           return index_.inside(u.inst, &loop);
                         });
      if (used_inside) ring.outer_views.push_back(static_cast<const SliceSharedInst*>(d)->out);
    }
    // Filled whole: one copy of all of it, or copies of disjoint constant boxes adding up to it.
    auto shape = root.static_shape();
    int64_t volume = 1;
    for (int64_t d : shape) volume *= d;
    int64_t covered = 0;
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> boxes;  // (first, extent) per root dim
    for (const Producer* p : copies) {
      std::vector<int64_t> lo(shape.size(), 0), ext = shape;
      std::vector<int> vmap;  // view dim -> root dim
      for (size_t d = 0; d < shape.size(); ++d) vmap.push_back(int(d));
      bool known = true;
      // A slice of the current view: its dims not in `dims` are fixed at their offset.
      auto slice = [&](const std::vector<Expr>& offsets, const std::vector<int>& dims,
                       const std::vector<int64_t>& vshape) {
        std::vector<bool> kept(vmap.size(), false);
        for (int d : dims) kept[size_t(d)] = true;
        for (size_t d = 0; d < vmap.size(); ++d) {
          Expr o = facts_.simplify(offsets[d]);
          if (!o.is_int_const()) known = false;
          else lo[size_t(vmap[d])] += o.int_value();
          if (!kept[d]) ext[size_t(vmap[d])] = 1;
        }
        std::vector<int> next;
        for (size_t k = 0; k < dims.size(); ++k) {
          next.push_back(vmap[size_t(dims[k])]);
          ext[size_t(vmap[size_t(dims[k])])] = vshape[k];
        }
        vmap = next;
      };
      for (const SliceSharedInst* s : index_.chain(p->dst)) slice(s->offsets, s->dims, s->out.static_shape());
      if (!p->dst_dims.empty()) {
        auto* c = static_cast<const CopyInst*>(p->inst);
        std::vector<int64_t> vshape;
        for (int d : p->dst_dims) vshape.push_back(facts_.simplify(c->dst.extents[size_t(d)]).int_value());
        slice(p->dst_offsets, p->dst_dims, vshape);
      }
      if (!known)
        refuse(loop, fmt::format("{} copies into a part of `{}` at offsets that are not constants, and the ring must "
                                 "know that an iteration's copies fill the whole tile",
                                 what(*p->inst), root->name));
      for (auto& [blo, bext] : boxes) {
        bool overlap = true;
        for (size_t d = 0; d < shape.size(); ++d)
          overlap = overlap && lo[d] < blo[d] + bext[d] && blo[d] < lo[d] + ext[d];
        if (overlap)
          refuse(loop, fmt::format("{} copies into a part of `{}` that another copy of the iteration writes too",
                                   what(*p->inst), root->name));
      }
      int64_t v = 1;
      for (int64_t e : ext) v *= e;
      boxes.emplace_back(lo, ext);
      covered += v;
    }
    if (covered != volume)
      refuse(loop, fmt::format("the iteration's copies into `{}` ({}) fill {} of its {} elements: a stage would keep "
                               "the rest from num_stages iterations before, not from the previous iteration",
                               root->name, what(*copies.front()->inst), covered, volume));
  }

  // The variables a copy's addresses name: the loop variable, lets of the body before it (their
  // values in turn), and what the loop does not change.
  void check_expr(const ForStmtNode& loop, const Ring& ring, const Producer& p, const Expr& e,
                  const std::unordered_set<const ExprNode*>& bound, int depth = 0) const {
    for (const Var& v : free_vars(e)) {
      if (v.same_as(loop.var)) continue;
      if (auto it = ring.lets.find(v.get()); it != ring.lets.end()) {
        if (depth < 16) check_expr(loop, ring, p, it->second, bound, depth + 1);
        continue;
      }
      if (bound.count(v.get()))
        refuse(loop, fmt::format("{} addresses its tile with `{}`, which the loop body computes, so it cannot be "
                                 "issued num_stages - 1 iterations early",
                                 what(*p.inst), v->name));
    }
  }

  void check_relocatable(const ForStmtNode& loop, const Ring& ring, const Producer& p) const {
    // Variables the body binds or assigns (other than its top-level lets, which the ring
    // re-evaluates for the copy's iteration).
    std::unordered_set<const ExprNode*> bound;
    struct Walk : StmtVisitor {
      std::unordered_set<const ExprNode*>* out;
      bool top = true;
      void visit_for(const ForStmtNode& f) override {
        out->insert(f.var.get());
        StmtVisitor::visit_for(f);
      }
      void visit_declare(const DeclareStmtNode& d) override { out->insert(d.var.get()); }
      void visit_assign(const AssignStmtNode& a) override { out->insert(a.var.get()); }
      void visit_inst(const InstNode& i) override {
        if (auto* it = dynamic_cast<const ItemInst*>(&i)) out->insert(it->var.get());
        if (auto* ip = dynamic_cast<const SharedItemPtrInst*>(&i)) out->insert(ip->var.get());
      }
    } w;
    w.out = &bound;
    w.visit(loop.body);
    auto exprs_of = [&](const Tensor& t) {
      std::vector<Expr> out;
      for (auto& e : t->shape) out.push_back(e);
      for (auto& e : t->strides) out.push_back(e);
      return out;
    };
    std::vector<Expr> exprs = p.offsets;
    exprs.insert(exprs.end(), p.dst_offsets.begin(), p.dst_offsets.end());
    if (p.im2col) exprs.insert(exprs.end(), {p.im2col->nhw_step, p.im2col->c_step});
    auto g = exprs_of(p.global);
    exprs.insert(exprs.end(), g.begin(), g.end());
    if (index_.defined_inside(p.global, &loop)) {
      auto* v = dynamic_cast<const GlobalViewInst*>(index_.def.at(p.global.get()));
      if (!v)
        refuse(loop, fmt::format("{} reads `{}`, which the body makes by {}; the ring re-makes only global views",
                                 what(*p.inst), p.global->name, what(*index_.def.at(p.global.get()))));
      exprs.push_back(v->ptr);
    }
    for (const SliceSharedInst* s : index_.chain(p.dst)) exprs.insert(exprs.end(), s->offsets.begin(), s->offsets.end());
    for (auto& e : exprs)
      if (e.defined()) check_expr(loop, ring, p, e, bound);
  }

  // A copy issued early must not read global memory the iterations in between write.
  void check_global_writes(const ForStmtNode& loop, const Ring& ring) const {
    struct Walk : StmtVisitor {
      std::vector<std::pair<const InstNode*, Tensor>> writes;
      void visit_inst(const InstNode& i) override {
        for (auto& op : i.traits())
          if (!op.defines && op.tensor.defined() && op.tensor.is_global() &&
              (op.access == Access::Write || op.access == Access::ReadWrite))
            writes.emplace_back(&i, op.tensor);
      }
    } w;
    w.visit(loop.body);
    for (auto& [i, t] : w.writes) {
      int written = facts_.global(*i, t).param;
      for (auto& p : ring.producers)
        if (facts_.global(*p.inst, p.global).param == written)
          refuse(loop, fmt::format("{} writes global memory that {} reads (the same pointer), and the ring issues that "
                                   "copy num_stages - 1 iterations before the iterations in between have written",
                                   what(*i), what(*p.inst)));
    }
  }

  // The trip count is read once, before the prologue.
  void check_bounds_invariant(const ForStmtNode& loop) const {
    std::unordered_set<const ExprNode*> assigned;
    struct Walk : StmtVisitor {
      std::unordered_set<const ExprNode*>* out;
      void visit_assign(const AssignStmtNode& a) override { out->insert(a.var.get()); }
    } w;
    w.out = &assigned;
    w.visit(loop.body);
    for (const Expr& e : {loop.begin, loop.end})
      for (const Var& v : free_vars(e))
        if (assigned.count(v.get()))
          refuse(loop, fmt::format("its bounds name `{}`, which the body assigns: the ring needs the trip count before "
                                   "the loop starts",
                                   v->name));
  }

  KernelFacts facts_;
  Index index_;
};

// The [S, ...] tile of a pipelined tile: its layout with a leading stage dim whose stride keeps
// each stage on whole 1024-byte swizzle atoms (so TMA boxes and wgmma descriptors address a
// stage as they address the tile).
Tensor staged_tile(const Tensor& root, int64_t stages) {
  const SharedLayout& l = root->shared_layout;
  int64_t bits = root.dtype().bits();
  int64_t align = std::max<int64_t>(1, 1024 * 8 / bits);
  if (!l.swizzle().none())
    align = std::max<int64_t>(align, int64_t(1) << (l.swizzle().bits + l.swizzle().base + l.swizzle().shift));
  int64_t stride = (l.storage_elements() + align - 1) / align * align;
  std::vector<int64_t> shape{stages}, strides{stride};
  for (int64_t d : l.shape()) shape.push_back(d);
  for (int64_t d : l.strides()) strides.push_back(d);
  return Tensor::shared(root->name, root.dtype(), shape, SharedLayout(shape, strides, l.swizzle()));
}

// Stage `stage` of a staged tile (or of the ring's barriers), laid out as the tile.
Stmt stage_view(const Tensor& staged, const Expr& stage, const Tensor& out, const SourceLoc& loc) {
  auto v = make_inst<SliceSharedInst>(loc);
  v->src = staged;
  v->offsets.push_back(stage);
  for (int d = 1; d < staged.rank(); ++d) {
    v->offsets.push_back(int_const(0));
    v->dims.push_back(d);
  }
  v->out = out;
  return make_inst_stmt(v);
}

Tensor tile_like(const Tensor& staged, const std::string& name) {
  const SharedLayout& l = staged->shared_layout;
  std::vector<int64_t> shape(l.shape().begin() + 1, l.shape().end()), strides(l.strides().begin() + 1, l.strides().end());
  return Tensor::shared(name, staged.dtype(), shape, SharedLayout(shape, strides, l.swizzle()));
}

// Whether the copy can be a TMA box as copy_async names it: its tile dims the last global
// dims, in order (TMA cannot transpose).
bool tma_shaped(const Producer& p) {
  if (p.im2col) return true;
  if (p.disable_tma) return false;
  int rank = p.global.rank();
  for (size_t k = 0; k < p.dims.size(); ++k)
    if (p.dims[k] != rank - int(p.dims.size()) + int(k)) return false;
  return !p.dims.empty();
}

// Expressions with some variables replaced (blockIdx by a persistent block's tile, ...), in
// every instruction and statement of what it mutates.
struct Substitute : StmtMutator {
  VarMap map;
  Expr mutate_expr(const Expr& e) override { return map && e.defined() ? substitute(e, map) : e; }
};

// How a ring's loop is placed: the counter of stages used before it (persistent kernels run the
// loop once per tile and keep the ring going), the replacement of blockIdx (a persistent block's
// tile), and for warp specialization the consumer side's release of stages.
struct Placement {
  Expr base;               // stages the ring used before this run of the loop (undefined: 0)
  VarMap consumer;         // applied to the loop and its body (blockIdx -> the tile's)
  VarMap producer;         // applied to the copies (blockIdx -> the tile's, lets inlined)
  bool warp_specialized = false;
  Tensor empty;            // warp-specialized: the ring's `empty` barriers
  int64_t consumer_groups = 0;  // warp groups that each release a stage once (0: every consumer thread does)
};

// Builds a ring's statements from its analysis: the loop's replacement and the staged tiles.
class RingBuilder {
 public:
  RingBuilder(const Ring& ring, const Index& index) : ring_(ring), index_(index), loop_(*ring.loop) {
    for (const Tensor& r : ring.roots) staged[r.get()] = staged_tile(r, ring.stages);
  }

  std::unordered_map<const TensorNode*, Tensor> staged;  // tile -> its [S, ...] allocation
  std::vector<Inst> tma_loads;                            // the TMA loads made (for the legality check)

  // The ring's mbarriers (`full`: a stage's loads landed; `empty`: its readers are done).
  std::vector<Stmt> barriers(int64_t empty_count) {
    std::vector<Stmt> out;
    const SourceLoc& loc = loop_.loc;
    auto make = [&](const char* name, int64_t count) {
      Tensor t = Tensor::shared(name, dtypes::uint64, {ring_.stages});
      auto alloc = make_inst<AllocateSharedInst>(loc);
      alloc->out = t;
      out.push_back(make_inst_stmt(alloc));
      auto init = make_inst<MbarrierInitInst>(loc);
      init->barriers = t;
      for (int64_t s = 0; s < ring_.stages; ++s) init->counts.push_back(int_const(count));
      out.push_back(make_inst_stmt(init));
      return t;
    };
    if (ring_.tma) full_ = make("full", int64_t(ring_.producers.size()));
    if (empty_count) empty_ = make("empty", empty_count);
    return out;
  }

  // The ring issued and read by the same threads: the first S - 1 iterations' copies, then the
  // loop, whose iteration j reads stage g % S (g = base + j) and issues iteration j + S - 1's.
  Stmt ring(const Placement& at) {
    const SourceLoc& loc = loop_.loc;
    const Var& v = loop_.var;
    auto [t, S, step, begin, end, base] = frame(at.consumer, at.base);
    std::vector<Stmt> out;
    // The first S - 1 iterations' copies, each under its guard: cp.async groups one by one (the
    // async-wait pass then knows each stage's group), TMA loads by one thread (the barrier after
    // the ring's mbarrier.alloc then goes before them once).
    std::vector<Stmt> ahead;
    for (int64_t s = 0; s + 1 < S; ++s) {
      Expr it = simplify(begin + int_const(s * step, t));
      Stmt copies = produce(it, simplify(floor_mod(base + int_const(s, t), int_const(S, t))), at.producer, false);
      ahead.push_back(std::make_shared<IfStmtNode>(simplify(it < end), copies, Stmt(), loc));
      if (!ring_.tma) ahead.push_back(emit(make_inst<CopyAsyncCommitGroupInst>(loc), loc));
    }
    if (ring_.tma)
      out.push_back(std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::SingleThread, 0, 1,
                                                          make_seq(std::move(ahead), loc), loc));
    else
      out.insert(out.end(), ahead.begin(), ahead.end());
    Expr g = simplify(base + index(v, begin, step));
    std::vector<Stmt> body = consume_head(g);
    Stmt release;
    body.push_back(consume_body(at, release));
    Expr next = v + int_const((S - 1) * step, t);
    body.push_back(std::make_shared<IfStmtNode>(
        next < end, produce(next, floor_mod(g + int_const(S - 1, t), int_const(S, t)), at.producer), Stmt(), loc));
    if (!ring_.tma) body.push_back(emit(make_inst<CopyAsyncCommitGroupInst>(loc), loc));
    out.push_back(ringed_loop(begin, end, std::move(body), at));
    if (ring_.wgmma_groups) out.push_back(wgmma_wait(0));
    if (ring_.tma) {
      // Every load the ring issued was waited for, but under guards the async-wait pass cannot
      // pair: a wait on the phase of the last stage read (completed already; before the first
      // stage of a fresh ring, the phase of parity 1 counts as completed) tells it so, before
      // anything reuses the tiles' bytes or the next tile's ring refills them.
      Expr last = simplify(base + trips(at.consumer) - int_const(1, t));
      Tensor bar = Tensor::shared("full", dtypes::uint64, {});
      out.push_back(barrier_view(full_, floor_mod(last, int_const(S, t)), bar, loc));
      out.push_back(mbarrier_wait(bar, floor_mod(floor_div(last, int_const(S, t)), int_const(2, t))));
    }
    return make_seq(std::move(out), loc);
  }

  // Warp-specialized: the producer's loop (one thread: wait until the stage is free, issue its
  // copies) and the consumers' (wait until it landed, compute, release it).
  Stmt producer_loop(const Placement& at) {
    const SourceLoc& loc = loop_.loc;
    auto [t, S, step, begin, end, base] = frame(at.producer, at.base);
    Var it(loop_.var->name, t, VarRole::Loop);
    Expr g = simplify(base + index(it, begin, step));
    Expr stage = floor_mod(g, int_const(S, t));
    std::vector<Stmt> body;
    Tensor bar = Tensor::shared("empty", dtypes::uint64, {});
    body.push_back(barrier_view(empty_, stage, bar, loc));
    // A fresh barrier's phase of parity 1 counts as completed: the first S waits pass.
    body.push_back(mbarrier_wait(bar, floor_mod(floor_div(g, int_const(S, t)), int_const(2, t)) ^ int_const(1, t)));
    body.push_back(produce(it, stage, at.producer, /*single=*/false));
    return std::make_shared<ForStmtNode>(it, begin, end, int_const(step, t), Unroll::none(), make_seq(body, loc), loc);
  }

  Stmt consumer_loop(const Placement& at) {
    const SourceLoc& loc = loop_.loc;
    auto [t, S, step, begin, end, base] = frame(at.consumer, at.base);
    Expr j = index(loop_.var, begin, step);
    Expr g = simplify(base + j);
    std::vector<Stmt> body = consume_head(g);
    Stmt release;
    if (ring_.wgmma_groups) {
      // The previous iteration's wgmma retired at this iteration's wait: its stage is free.
      release = std::make_shared<IfStmtNode>(j > int_const(0, t),
                                             release_stage(floor_mod(g + int_const(S - 1, t), int_const(S, t)), at),
                                             Stmt(), loc);
    }
    body.push_back(consume_body(at, release));
    if (!ring_.wgmma_groups) body.push_back(release_stage(floor_mod(g, int_const(S, t)), at));
    std::vector<Stmt> out;
    out.push_back(ringed_loop(begin, end, std::move(body), at));
    if (ring_.wgmma_groups) {
      out.push_back(wgmma_wait(0));
      // The last iteration's stage.
      Expr n = trips(at.consumer);
      out.push_back(std::make_shared<IfStmtNode>(
          n > int_const(0, t), release_stage(floor_mod(simplify(base + n - int_const(1, t)), int_const(S, t)), at),
          Stmt(), loc));
    }
    return make_seq(std::move(out), loc);
  }

  // Stages the loop uses in one run (the ring counter's step).
  Expr trips(const VarMap& map) const {
    auto [t, S, step, begin, end, base] = frame(map, Expr());
    return simplify(max(floor_div(end - begin + int_const(step - 1, t), int_const(step, t)), int_const(0, t)));
  }

 private:
  // The loop's numbers as a placement sees them: its variable's type, the stages, the step, the
  // bounds with `map` applied, the stages used before it (0 when `base` is undefined).
  struct Frame {
    DataType t;
    int64_t stages, step;
    Expr begin, end, base;
  };
  Frame frame(const VarMap& map, const Expr& base) const {
    DataType t = loop_.var.dtype();
    return {t, ring_.stages, simplify(loop_.step).int_value(), apply(map, loop_.begin), apply(map, loop_.end),
            base.defined() ? base : int_const(0, t)};
  }

  static Expr apply(const VarMap& map, const Expr& e) { return map ? simplify(substitute(e, map)) : e; }

  // The iteration number of loop variable value `x`.
  Expr index(const Expr& x, const Expr& begin, int64_t step) const {
    DataType t = loop_.var.dtype();
    if (simplify(begin).is_int_const(0) && step == 1) return x;
    return (x - begin) / int_const(step, t);
  }

  Stmt ringed_loop(const Expr& begin, const Expr& end, std::vector<Stmt> body, const Placement& at) {
    auto ringed = std::make_shared<ForStmtNode>(loop_);
    ringed->begin = begin;
    ringed->end = end;
    ringed->body = make_seq(std::move(body), loop_.loc);
    ringed->pipeline.ring = ring_.tma ? "tma" : "cp.async";
    ringed->pipeline.wgmma_in_flight = ring_.wgmma_groups;
    ringed->pipeline.note = ring_.note;
    ringed->pipeline.schedule = ring_.schedule;
    (void)at;
    return ringed;
  }

  Stmt wgmma_wait(int64_t n) const {
    auto w = make_inst<WgmmaWaitGroupInst>(loop_.loc);
    w->n = n;
    return make_inst_stmt(w);
  }

  Stmt mbarrier_wait(const Tensor& bar, const Expr& phase) const {
    auto wait = make_inst<MbarrierInst>(loop_.loc);
    wait->op = MbarrierOp::Wait;
    wait->barrier = bar;
    wait->value = phase;
    wait->sem = "acquire";
    return make_inst_stmt(wait);
  }

  // The consumer side's release of stage `stage`: one arrival per consumer warp group (a wgmma's
  // wait_group returning in one thread of a warp group means the group's wgmma retired), or one
  // per consumer thread.
  Stmt release_stage(const Expr& stage, const Placement& at) const {
    const SourceLoc& loc = loop_.loc;
    std::vector<Stmt> out;
    Tensor bar = Tensor::shared("empty", dtypes::uint64, {});
    out.push_back(barrier_view(empty_, stage, bar, loc));
    auto arrive = [&]() {
      auto a = make_inst<MbarrierInst>(loc);
      a->op = MbarrierOp::Arrive;
      a->barrier = bar;
      a->value = int_const(1);
      a->sem = "release";
      return make_inst_stmt(a);
    };
    if (at.consumer_groups == 0) {
      out.push_back(arrive());
    } else {
      for (int64_t wg = 0; wg < at.consumer_groups; ++wg)
        out.push_back(std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::ThreadGroup, wg * 128, 1, arrive(), loc));
    }
    return make_seq(std::move(out), loc);
  }

  // The start of an iteration that reads stage g % S: the stage's views, and on a TMA ring the
  // wait for its loads (phase: how many times the ring came round, mod 2).
  std::vector<Stmt> consume_head(const Expr& g) {
    const SourceLoc& loc = loop_.loc;
    DataType t = loop_.var.dtype();
    Expr stage = floor_mod(g, int_const(ring_.stages, t));
    std::vector<Stmt> body;
    views_.clear();
    for (const Tensor& r : ring_.roots) {
      Tensor view = tile_like(staged.at(r.get()), r->name);
      body.push_back(stage_view(staged.at(r.get()), stage, view, loc));
      views_[r.get()] = view;
    }
    for (const Tensor& ov : ring_.outer_views) body.push_back(remake_view(ov, views_, loc));
    if (ring_.tma) {
      Tensor bar = Tensor::shared("full", dtypes::uint64, {});
      body.push_back(barrier_view(full_, stage, bar, loc));
      body.push_back(mbarrier_wait(bar, floor_mod(floor_div(g, int_const(ring_.stages, t)), int_const(2, t))));
    }
    return body;
  }

  // The loop's body reading the stage views of consume_head: the copies left out, dots made
  // wgmma accumulating in place with the iteration's wait for the previous one's groups (then
  // `after_wait`).
  Stmt consume_body(const Placement& at, const Stmt& after_wait) {
    struct Body : Substitute {
      const Ring* ring;
      Stmt wait;
      Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
        if (ring->moved.count(inst.get()) || ring->wgmma_dropped.count(inst.get())) return nullptr;
        Stmt r = StmtMutator::mutate_inst(s, inst);
        if (inst.get() == ring->wgmma_last_commit) return make_seq({r, wait});
        return r;
      }
    } mutate;
    mutate.ring = &ring_;
    mutate.map = at.consumer;
    mutate.tensor_map = views_;
    for (auto& [d, acc] : ring_.wgmma_acc) mutate.tensor_map[d] = acc;
    if (ring_.wgmma_groups) mutate.wait = make_seq({wgmma_wait(ring_.wgmma_groups), after_wait});
    return mutate.mutate(loop_.body);
  }

  Stmt barrier_view(const Tensor& barriers, const Expr& stage, const Tensor& out, const SourceLoc& loc) const {
    auto v = make_inst<SliceSharedInst>(loc);
    v->src = barriers;
    v->offsets = {stage};
    v->out = out;
    return make_inst_stmt(v);
  }

  // A view of a pipelined tile made before the loop, made again (with its chain) over the stage
  // views `map` names; the new views are added to `map`.
  Stmt remake_view(const Tensor& view, std::unordered_map<const TensorNode*, Tensor>& map, const SourceLoc& loc) const {
    std::vector<Stmt> out;
    for (const SliceSharedInst* s : index_.chain(view)) {
      if (map.count(s->out.get())) continue;
      auto c = std::static_pointer_cast<SliceSharedInst>(s->clone());
      c->src = map.at(s->src.get());
      c->out = fresh_tensor(s->out, [](const Expr& e) { return e; });
      map[s->out.get()] = c->out;
      out.push_back(make_inst_stmt(c));
    }
    return make_seq(std::move(out), loc);
  }

  // The copies of the iteration whose loop variable is `at`, into stage `stage`; `outer`
  // replaces further variables in them (blockIdx, the lets before the loop). On a TMA ring one
  // thread issues them (`single`: under a single_thread group), each arriving on the stage's
  // `full` barrier with its bytes.
  Stmt produce(const Expr& at, const Expr& stage, const VarMap& outer, bool single = true) {
    const SourceLoc& loc = loop_.loc;
    std::function<Expr(const Expr&)> shift = [&](const Expr& e) -> Expr {
      if (!e.defined()) return e;
      return simplify(substitute(e, [&](const Var& x) -> Expr {
        if (x.same_as(loop_.var)) return at;
        if (auto it = ring_.lets.find(x.get()); it != ring_.lets.end()) return shift(it->second);
        if (outer) {
          Expr o = outer(x);
          if (o.defined()) return o;
        }
        return Expr();
      }));
    };
    std::vector<Stmt> out;
    std::unordered_map<const TensorNode*, Tensor> map;
    for (const Tensor& r : ring_.roots) {
      Tensor view = tile_like(staged.at(r.get()), r->name);
      out.push_back(stage_view(staged.at(r.get()), stage, view, loc));
      map[r.get()] = view;
    }
    Tensor bar;
    if (ring_.tma) {
      bar = Tensor::shared("full", dtypes::uint64, {});
      out.push_back(barrier_view(full_, stage, bar, loc));
    }
    for (const Producer& p : ring_.producers) {
      // The global tensor (made again when the body, or a block's tile, makes it), the shared
      // tile it writes.
      Tensor global = p.global;
      if (ring_.remade_globals.count(global.get()) || index_.defined_inside(global, &loop_)) {
        if (!map.count(global.get())) {
          auto* g = static_cast<const GlobalViewInst*>(index_.def.at(global.get()));
          auto c = std::static_pointer_cast<GlobalViewInst>(g->clone());
          c->ptr = shift(g->ptr);
          c->out = fresh_tensor(g->out, shift);
          map[global.get()] = c->out;
          out.push_back(make_inst_stmt(c));
        }
        global = map.at(global.get());
      }
      for (const SliceSharedInst* s : index_.chain(p.dst)) {
        if (map.count(s->out.get())) continue;
        auto c = std::static_pointer_cast<SliceSharedInst>(s->clone());
        c->src = map.at(s->src.get());
        for (auto& o : c->offsets) o = shift(o);
        c->out = fresh_tensor(s->out, shift);
        map[s->out.get()] = c->out;
        out.push_back(make_inst_stmt(c));
      }
      Tensor dst = map.at(p.dst.get());
      if (!p.dst_dims.empty()) {
        auto* c = static_cast<const CopyInst*>(p.inst);
        const SharedLayout& l = dst->shared_layout;
        std::vector<int64_t> shape, strides;
        for (int d : p.dst_dims) {
          shape.push_back(simplify(c->dst.extents[size_t(d)]).int_value());
          strides.push_back(l.strides()[size_t(d)]);
        }
        auto part = make_inst<SliceSharedInst>(p.inst->loc);
        part->src = dst;
        for (auto& o : p.dst_offsets) part->offsets.push_back(shift(o));
        part->dims = p.dst_dims;
        part->out = Tensor::shared(dst->name, dst.dtype(), shape, SharedLayout(shape, strides, l.swizzle()));
        out.push_back(make_inst_stmt(part));
        dst = part->out;
      }
      if (p.im2col) {
        auto c = std::static_pointer_cast<Im2colInst>(p.im2col->clone());
        c->img = global;
        c->col = dst;
        c->nhw_step = shift(c->nhw_step);
        c->c_step = shift(c->c_step);
        c->barrier = bar;
        if (ring_.tma) tma_loads.push_back(c);
        out.push_back(make_inst_stmt(c));
        continue;
      }
      std::vector<Expr> offsets;
      for (auto& o : p.offsets) offsets.push_back(shift(o));
      if (ring_.tma) {
        auto c = make_inst<CopyInst>(p.inst->loc);
        c->api = CopyApi::TmaCopy;
        c->use_tma = true;
        c->barrier = bar;
        c->eviction_policy = p.eviction_policy;
        if (!c->eviction_policy && p.evict != EvictPolicy::Normal) c->eviction_policy = p.evict;
        c->src.tensor = global;
        c->src.offsets = offsets;
        auto shape = dst.static_shape();
        for (int d = 0; d < global.rank(); ++d) c->src.extents.push_back(int_const(1));
        for (size_t k = 0; k < p.dims.size(); ++k) c->src.extents[size_t(p.dims[k])] = int_const(shape[k]);
        c->dst.tensor = dst;
        for (int64_t e : shape) {
          c->dst.offsets.push_back(int_const(0));
          c->dst.extents.push_back(int_const(e));
        }
        tma_loads.push_back(c);
        out.push_back(make_inst_stmt(c));
      } else {
        auto c = make_inst<CopyAsyncInst>(p.inst->loc);
        c->src = global;
        c->dst = dst;
        c->offsets = offsets;
        c->dims = p.dims;
        c->evict = p.evict;
        c->check_bounds = p.check_bounds;
        out.push_back(make_inst_stmt(c));
      }
    }
    Stmt block = make_seq(std::move(out), loc);
    if (ring_.tma && single) block = std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::SingleThread, 0, 1, block, loc);
    return block;
  }

  const Ring& ring_;
  const Index& index_;
  const ForStmtNode& loop_;
  Tensor full_, empty_;
  std::unordered_map<const TensorNode*, Tensor> views_;  // the tiles' stage views of the iteration
};

// What a statement uses and defines (deep: a loop or branch counts with everything inside).
struct Footprint {
  std::unordered_set<const ExprNode*> uses_vars, defs_vars;
  std::unordered_set<const TensorNode*> uses_tensors, defs_tensors;
};

Footprint footprint(const Stmt& s) {
  struct Walk : StmtVisitor, FieldVisitor {
    Footprint f;
    void use(const Expr& e) {
      if (!e.defined()) return;
      for (const Var& v : free_vars(e)) f.uses_vars.insert(v.get());
    }
    void visit_for(const ForStmtNode& n) override {
      use(n.begin), use(n.end), use(n.step);
      f.defs_vars.insert(n.var.get());
      StmtVisitor::visit_for(n);
    }
    void visit_if(const IfStmtNode& n) override {
      use(n.cond);
      StmtVisitor::visit_if(n);
    }
    void visit_while(const WhileStmtNode& n) override {
      use(n.cond);
      StmtVisitor::visit_while(n);
    }
    void visit_let(const LetStmtNode& n) override {
      use(n.value);
      f.defs_vars.insert(n.var.get());
    }
    void visit_declare(const DeclareStmtNode& n) override {
      use(n.init);
      f.defs_vars.insert(n.var.get());
    }
    void visit_assign(const AssignStmtNode& n) override {
      use(n.value);
      f.uses_vars.insert(n.var.get());
    }
    void visit_inst(const InstNode& i) override {
      i.visit_fields(*this);
      for (auto& op : i.traits())
        if (op.tensor.defined()) {
          (op.defines ? f.defs_tensors : f.uses_tensors).insert(op.tensor.get());
          for (auto& e : op.tensor->shape) use(e);
        }
    }
    // FieldVisitor
    void expr(const char*, Expr& e) override { use(e); }
    void binder(const char*, Var& v) override { f.defs_vars.insert(v.get()); }
  } w;
  w.visit(s);
  return w.f;
}

// The kernel with every ring built: each pipelined tile's allocation staged, each loop replaced;
// a warp-specialized or persistent ring restructures the kernel's body around its loop.
class Rebuilder {
 public:
  Rebuilder(const Kernel& k, std::vector<Ring>& rings, const Index& index, const Target& target)
      : k_(k), rings_(rings), index_(index), target_(target) {}

  std::vector<std::vector<Inst>> tma_loads;

  Kernel run() {
    struct Rewrite : StmtMutator {
      std::unordered_map<const ForStmtNode*, Stmt> loops;
      std::unordered_map<const InstNode*, Tensor> allocs;  // the tile's allocation -> the staged tile
      Stmt mutate_for(const Stmt& s, const ForStmtNode& n) override {
        if (auto it = loops.find(&n); it != loops.end()) return it->second;
        return StmtMutator::mutate_for(s, n);
      }
      Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
        if (auto it = allocs.find(inst.get()); it != allocs.end()) {
          auto a = std::static_pointer_cast<AllocateSharedInst>(inst->clone());
          a->out = it->second;
          return make_inst_stmt(a);
        }
        return StmtMutator::mutate_inst(s, inst);
      }
    } rewrite;
    std::vector<std::unique_ptr<RingBuilder>> builders;
    Ring* special = nullptr;
    RingBuilder* special_builder = nullptr;
    for (Ring& r : rings_) {
      auto b = std::make_unique<RingBuilder>(r, index_);
      for (const Tensor& t : r.roots) rewrite.allocs[index_.def.at(t.get())] = b->staged.at(t.get());
      if ((r.warp_specialized || r.persistent) && !special) {
        special = &r;
        special_builder = b.get();
      } else {
        std::vector<Stmt> out = b->barriers(0);
        out.push_back(b->ring({}));
        rewrite.loops[r.loop] = make_seq(std::move(out), r.loop->loc);
      }
      builders.push_back(std::move(b));
    }
    Kernel out = special ? restructure(*special, *special_builder, rewrite) : rewrite.mutate(k_);
    if (fell_back_) return out;  // tma_loads: the rebuild's
    tma_loads.clear();
    for (auto& b : builders) tma_loads.push_back(b->tma_loads);
    return out;
  }

 private:
  // The kernel's body around `ring`'s loop (a top-level statement of the body): definitions that
  // need neither blockIdx (when persistent) nor what the threads compute stay at the kernel's
  // top; the rest before the loop, the loop and what follows it run per tile (persistent) and
  // on the consumer threads (warp-specialized), the producer's copies in a warp group of their
  // own.
  Kernel restructure(Ring& ring, RingBuilder& b, StmtMutator& rewrite) {
    const SourceLoc& loc = ring.loop->loc;
    std::vector<Stmt> top = flatten(k_.body);
    size_t at = 0;
    while (at < top.size() && top[at].get() != static_cast<const StmtNode*>(ring.loop)) ++at;
    std::vector<Stmt> prefix(top.begin(), top.begin() + long(at)), suffix(top.begin() + long(at) + 1, top.end());
    // The TMA-store epilogue: the tile's store through a shared tile allocated once.
    Tensor epilogue_tile;
    if (ring.epilogue_store) suffix = tma_epilogue(ring, suffix, epilogue_tile);
    // Which statements before the loop stay at the top.
    std::unordered_set<const ExprNode*> block_vars, work_vars, per_tile_lets;
    std::unordered_set<const TensorNode*> block_tensors, work_tensors;
    for (int d = 0; d < 3; ++d) block_vars.insert(builtin::block_idx(d).get());
    std::unordered_map<const ExprNode*, Expr> lets;  // the per-tile lets, for the producer's copies
    std::vector<Stmt> kernel_level, per_tile;
    ring.remade_globals.clear();
    for (const Stmt& s : prefix) {
      Footprint f = footprint(s);
      auto any = [](const auto& uses, const auto& set) {
        return std::any_of(uses.begin(), uses.end(), [&](auto* x) { return set.count(x); });
      };
      const InstNode* i = inst_of(s);
      bool is_def = stmt_as<LetStmtNode>(s) ||
                    (i && (i->kind() == InstKind::GlobalView || i->kind() == InstKind::AllocateShared ||
                           i->kind() == InstKind::SliceShared || i->kind() == InstKind::ReshapeShared ||
                           i->kind() == InstKind::Assume || i->kind() == InstKind::MbarrierInit));
      bool dep_block = ring.persistent && (any(f.uses_vars, block_vars) || any(f.uses_tensors, block_tensors));
      bool dep_work = any(f.uses_vars, work_vars) || any(f.uses_tensors, work_tensors);
      if (is_def && !dep_block && !dep_work) {
        kernel_level.push_back(s);
        continue;
      }
      per_tile.push_back(s);
      bool work = !is_def || dep_work;
      for (auto* v : f.defs_vars) (work ? work_vars : block_vars).insert(v);
      for (auto* t : f.defs_tensors) (work ? work_tensors : block_tensors).insert(t);
      if (auto* l = stmt_as<LetStmtNode>(s); l && !work) lets[l->var.get()] = l->value;
      if (i && i->kind() == InstKind::GlobalView && !work) ring.remade_globals.insert(i->output().get());
    }
    Kernel out = k_;
    std::vector<Stmt> body;
    for (const Stmt& s : kernel_level) body.push_back(rewrite.mutate(s));
    if (epilogue_tile.defined()) {
      auto alloc = make_inst<AllocateSharedInst>(ring.epilogue_store->loc);
      alloc->out = epilogue_tile;
      body.push_back(make_inst_stmt(alloc));
    }
    // The last tile's TMA stores have read the shared tile before the block exits.
    auto drain = [&]() -> Stmt {
      auto w = make_inst<TmaWaitGroupInst>(ring.epilogue_store->loc);
      w->n = 0;
      return std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::SingleThread, 0, 1, make_inst_stmt(w), loc);
    };
    int64_t W = k_.warps;
    int64_t groups = ring.only_wgmma_reads ? W / 4 : 0;
    std::vector<Stmt> bars = b.barriers(ring.warp_specialized ? (groups ? groups : W * 32) : 0);
    body.insert(body.end(), bars.begin(), bars.end());
    DataType t = ring.loop->var.dtype();
    // The tile loop of a persistent block and its blockIdx -> tile map.
    int64_t sms = target_.multiprocessors;
    std::vector<Expr> grid = k_.grid;
    while (grid.size() < 3) grid.push_back(int_const(1));
    Expr tiles = simplify(grid[0] * grid[1] * grid[2]);
    const int64_t group = 8;
    auto tile_loop = [&](const std::string& side, const std::function<std::vector<Stmt>(const VarMap&)>& inner) {
      Var tile("tile", dtypes::int32, VarRole::Loop);
      std::vector<Stmt> tb;
      Var bx("block_x", dtypes::int32), by("block_y", dtypes::int32), bz("block_z", dtypes::int32);
      Expr per = simplify(grid[0] * grid[1]);
      Expr r = tile % per;
      tb.push_back(std::make_shared<LetStmtNode>(bz, tile / per, loc));
      if (k_.grid.size() >= 2) {
        Expr span = simplify(int_const(group) * grid[1]);
        Var first("first_x", dtypes::int32), rows("rows", dtypes::int32);
        tb.push_back(std::make_shared<LetStmtNode>(first, r / span * int_const(group), loc));
        tb.push_back(std::make_shared<LetStmtNode>(rows, min(grid[0] - first, int_const(group)), loc));
        tb.push_back(std::make_shared<LetStmtNode>(bx, first + r % rows, loc));
        tb.push_back(std::make_shared<LetStmtNode>(by, r % span / rows, loc));
      } else {
        tb.push_back(std::make_shared<LetStmtNode>(bx, r, loc));
        tb.push_back(std::make_shared<LetStmtNode>(by, int_const(0), loc));
      }
      VarMap map = [bx, by, bz](const Var& v) -> Expr {
        if (v.same_as(builtin::block_idx(0))) return bx;
        if (v.same_as(builtin::block_idx(1))) return by;
        if (v.same_as(builtin::block_idx(2))) return bz;
        return Expr();
      };
      (void)side;
      auto rest = inner(map);
      tb.insert(tb.end(), rest.begin(), rest.end());
      return Stmt(std::make_shared<ForStmtNode>(tile, builtin::block_idx(0), tiles, int_const(sms), Unroll::none(),
                                                make_seq(std::move(tb), loc), loc));
    };
    auto substituted = [&](const std::vector<Stmt>& stmts, const VarMap& map) {
      std::vector<Stmt> r;
      Substitute sub;
      sub.map = map;
      for (const Stmt& s : stmts) r.push_back(sub.mutate(rewrite.mutate(s)));
      return r;
    };
    // The producer's copies name no let of the consumers' code: their values, with blockIdx
    // the tile's.
    auto producer_map = [&](const VarMap& block) {
      auto self = std::make_shared<std::function<Expr(const Var&)>>();
      *self = [&, block, self](const Var& v) -> Expr {
        if (block) {
          Expr e = block(v);
          if (e.defined()) return e;
        }
        if (ring.warp_specialized)
          if (auto it = lets.find(v.get()); it != lets.end()) return simplify(substitute(it->second, *self));
        return Expr();
      };
      return VarMap([self](const Var& v) { return (*self)(v); });
    };
    auto counter = [&](const std::string& name) { return Var(name, t); };
    if (!ring.warp_specialized) {
      // Persistent: every tile runs the ring, which keeps counting its stages.
      Var base = counter("ring_base");
      body.push_back(std::make_shared<DeclareStmtNode>(base, int_const(0, t), loc));
      body.push_back(tile_loop("", [&](const VarMap& map) {
        std::vector<Stmt> r = substituted(per_tile, map);
        Placement p;
        p.base = base;
        p.consumer = map;
        p.producer = map;
        r.push_back(b.ring(p));
        r.push_back(std::make_shared<AssignStmtNode>(base, base + b.trips(map), loc));
        auto after = substituted(suffix, map);
        r.insert(r.end(), after.begin(), after.end());
        return r;
      }));
      if (epilogue_tile.defined()) body.push_back(drain());
    } else {
      out.warps = W + 4;
      bool regs = target_.has_wgmma() && !target_.is_cpu();
      int64_t consumer_regs = std::min<int64_t>(240, (65536 - 128 * 40) / (W * 32) / 8 * 8);
      auto setmaxnreg = [&](int64_t n, bool inc) {
        auto i = make_inst<SetMaxNRegInst>(loc);
        i->reg_count = n;
        i->is_inc = inc;
        return make_inst_stmt(i);
      };
      // The producer warp group: one thread waits for free stages and issues the copies.
      std::vector<Stmt> producer;
      if (regs) producer.push_back(setmaxnreg(40, false));
      std::vector<Stmt> issue;
      if (ring.persistent) {
        Var base = counter("ring_base");
        issue.push_back(std::make_shared<DeclareStmtNode>(base, int_const(0, t), loc));
        issue.push_back(tile_loop("producer", [&](const VarMap& map) {
          Placement p;
          p.base = base;
          p.producer = producer_map(map);
          p.warp_specialized = true;
          return std::vector<Stmt>{b.producer_loop(p),
                                   std::make_shared<AssignStmtNode>(base, base + b.trips(p.producer), loc)};
        }));
      } else {
        Placement p;
        p.producer = producer_map(VarMap());
        p.warp_specialized = true;
        issue.push_back(b.producer_loop(p));
      }
      producer.push_back(std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::SingleThread, 0, 1,
                                                               make_seq(std::move(issue), loc), loc));
      // The copies must not need what the consumers compute before the loop.
      Footprint pf = footprint(make_seq(producer, loc));
      for (auto* v : pf.uses_vars)
        if (work_vars.count(v))
          return fall_back(ring, "warp_specialize not taken: the copies use a value the kernel computes before the loop");
      for (auto* x : pf.uses_tensors)
        if (work_tensors.count(x))
          return fall_back(ring, "warp_specialize not taken: the copies use a tensor the kernel computes before the loop");
      // The consumer warps: the kernel's own.
      std::vector<Stmt> consumer;
      auto consume = [&](const VarMap& map, const Expr& base) {
        std::vector<Stmt> r = substituted(per_tile, map);
        Placement p;
        p.base = base;
        p.consumer = map;
        p.warp_specialized = true;
        p.consumer_groups = groups;
        r.push_back(b.consumer_loop(p));
        return r;
      };
      if (ring.persistent) {
        Var base = counter("ring_base");
        consumer.push_back(std::make_shared<DeclareStmtNode>(base, int_const(0, t), loc));
        consumer.push_back(tile_loop("consumer", [&](const VarMap& map) {
          auto r = consume(map, base);
          r.push_back(std::make_shared<AssignStmtNode>(base, base + b.trips(map), loc));
          auto after = substituted(suffix, map);
          r.insert(r.end(), after.begin(), after.end());
          return r;
        }));
        if (epilogue_tile.defined()) consumer.push_back(drain());
      } else {
        consumer = consume(VarMap(), Expr());
        auto after = substituted(suffix, VarMap());
        consumer.insert(consumer.end(), after.begin(), after.end());
      }
      if (regs) consumer.insert(consumer.begin(), setmaxnreg(consumer_regs, true));
      body.push_back(std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::ThreadGroup, W * 32, 128,
                                                           make_seq(std::move(producer), loc), loc));
      body.push_back(std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::ThreadGroup, 0, W * 32,
                                                           make_seq(std::move(consumer), loc), loc));
    }
    if (ring.persistent) out.grid = {min(tiles, int_const(sms))};
    out.body = make_seq(std::move(body), loc);
    return out;
  }

  // The statements after a persistent ring's loop with its store_global of the [R, C] register
  // tile replaced by the TMA-store epilogue: one thread waits until the previous tile's TMA
  // stores have read the shared tile [C / box, R, box] (so they ran during this tile's loop),
  // the threads store the tile into it (its [R, C / box, box] view), and one thread sends its C /
  // box boxes of [R, box] with TMA stores (clipped at the tensor's bounds) and commits them. The
  // passes after add the barriers and the proxy fence between the threads' writes and the stores.
  std::vector<Stmt> tma_epilogue(Ring& ring, const std::vector<Stmt>& suffix, Tensor& tile) {
    const StoreGlobalInst& st = *ring.epilogue_store;
    const SourceLoc& loc = st.loc;
    ring.epilogue_copies.clear();
    auto shape = st.src.static_shape();
    int64_t R = shape[0], C = shape[1], box = ring.epilogue_box, boxes = C / box;
    DataType dt = st.src.dtype();
    std::vector<int64_t> tshape{boxes, R, box};
    tile = Tensor::shared("epilogue", dt, tshape, SharedLayout::row_major_swizzled(tshape, dt.bits() / 8));
    const SharedLayout& l = tile->shared_layout;
    auto view = [&](std::vector<Expr> offsets, std::vector<int> dims) {
      std::vector<int64_t> vshape, vstrides;
      for (int d : dims) {
        vshape.push_back(tshape[size_t(d)]);
        vstrides.push_back(l.strides()[size_t(d)]);
      }
      auto v = make_inst<SliceSharedInst>(loc);
      v->src = tile;
      v->offsets = std::move(offsets);
      v->dims = std::move(dims);
      v->out = Tensor::shared("epilogue", dt, vshape, SharedLayout(vshape, vstrides, l.swizzle()));
      return v;
    };
    std::vector<Stmt> out;
    for (const Stmt& s : suffix) {
      if (inst_of(s) != &st) {
        out.push_back(s);
        continue;
      }
      auto wait = make_inst<TmaWaitGroupInst>(loc);
      wait->n = 0;
      wait->read = true;
      out.push_back(
          std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::SingleThread, 0, 1, make_inst_stmt(wait), loc));
      auto boxed = view({int_const(0), int_const(0), int_const(0)}, {1, 0, 2});
      out.push_back(make_inst_stmt(boxed));
      auto reshape = make_inst<ReshapeInst>(loc);
      reshape->x = st.src;
      reshape->out = Tensor::reg(st.src->name, dt, {R, boxes, box});
      out.push_back(make_inst_stmt(reshape));
      auto store = make_inst<StoreSharedInst>(loc);
      store->dst = boxed->out;
      store->src = reshape->out;
      out.push_back(make_inst_stmt(store));
      std::vector<Stmt> send;
      std::vector<Expr> at = st.offsets;
      while (at.size() < 2) at.push_back(int_const(0));
      for (int64_t j = 0; j < boxes; ++j) {
        auto part = view({int_const(j), int_const(0), int_const(0)}, {1, 2});
        send.push_back(make_inst_stmt(part));
        auto c = make_inst<CopyInst>(loc);
        c->api = CopyApi::TmaSharedToGlobal;
        c->use_tma = true;
        c->src.tensor = part->out;
        c->src.offsets = {int_const(0), int_const(0)};
        c->src.extents = {int_const(R), int_const(box)};
        c->dst.tensor = st.dst;
        c->dst.offsets = {at[0], simplify(at[1] + int_const(j * box, at[1].dtype()))};
        c->dst.extents = {int_const(R), int_const(box)};
        ring.epilogue_copies.push_back(c);
        send.push_back(make_inst_stmt(c));
      }
      send.push_back(make_inst_stmt(make_inst<TmaCommitGroupInst>(loc)));
      out.push_back(std::make_shared<ThreadGroupStmtNode>(ThreadGroupKind::SingleThread, 0, 1,
                                                          make_seq(std::move(send), loc), loc));
    }
    return out;
  }

  Kernel fall_back(Ring& ring, const std::string& why) {
    ring.warp_specialized = false;
    ring.note = ring.note.empty() ? why : ring.note + "; " + why;
    if (auto at = ring.schedule.find("warp-specialized"); at != std::string::npos) {
      auto end = ring.schedule.find("; ", at);
      ring.schedule.erase(at, end == std::string::npos ? std::string::npos : end + 2 - at);
    }
    Rebuilder again(k_, rings_, index_, target_);
    Kernel out = again.run();
    tma_loads = std::move(again.tma_loads);
    fell_back_ = true;
    return out;
  }

  bool fell_back_ = false;

  const Kernel& k_;
  std::vector<Ring>& rings_;
  const Index& index_;
  const Target& target_;
};

// Bytes of shared memory a ring's stages take.
int64_t ring_bytes(const Ring& r) {
  int64_t bytes = 0;
  for (const Tensor& t : r.roots) {
    Tensor st = staged_tile(t, r.stages);
    bytes += (st->shared_layout.storage_elements() * st.dtype().bits() + 7) / 8;
  }
  return bytes;
}

// The epilogue of a persistent ring (its loop a top-level statement of `top`): the store_global
// of a [R, C] register tile after the loop goes through a shared tile and TMA stores where the
// Script allows it (epilogue not "registers"), the target has TMA and the ring's loads are TMA
// loads, the tile makes TMA boxes of
// whole 128-byte rows (or C's bytes when fewer, a multiple of 16) and R <= 256 rows, and the
// shared tile fits beside the ring's stages. Else the store stays, and the note says why.
// Whether each TMA store is legal (16-byte aligned strides and a start proven >= 0: the
// specialization's facts) is checked on the rebuilt kernel (pipeline_kernel).
std::string choose_epilogue(Ring& r, const std::vector<Stmt>& top, const Target& target) {
  const std::string& want = r.loop->pipeline.epilogue;
  if (want == "registers") return "";
  size_t at = 0;
  while (at < top.size() && top[at].get() != static_cast<const StmtNode*>(r.loop)) ++at;
  const StoreGlobalInst* st = nullptr;
  for (size_t i = at + 1; i < top.size() && !st; ++i) st = dynamic_cast<const StoreGlobalInst*>(inst_of(top[i]));
  if (!st) return want.empty() ? "" : "no store_global of a register tile after the loop";
  if (!target.has_tma()) return fmt::format("{} has no TMA", target.arch);
  // Behind a ring of cp.async (or synchronous) copies ptxas serialized the kernel's wgmma ("non
  // wgmma instructions reading accumulator registers ... between start and end of the pipeline
  // stage"; MatmulAuto with k not a multiple of 16), which costs more than the stores save.
  if (!r.tma) return "the ring's loads are not TMA loads (behind other copies ptxas serialized the wgmma)";
  DataType dt = st->src.dtype();
  if (!st->src.is_register() || st->src.rank() != 2 || st->dst.rank() != 2 ||
      !(st->dims.empty() || st->dims == std::vector<int>{0, 1}))
    return fmt::format("the store at {} is not a [rows, columns] register tile into a 2-d global tensor",
                       st->loc.str());
  if (dt.is_subbyte()) return fmt::format("TMA stores whole bytes, and the tile is {}", dt.name());
  auto shape = st->src.static_shape();
  int64_t eb = dt.bits() / 8, R = shape[0], C = shape[1];
  int64_t box = std::min<int64_t>(C, 128 / eb);
  if (R > 256 || C % box || box * eb % 16)
    return fmt::format("the tile [{}, {}] of {} does not split into TMA boxes of at most 256 rows of 128 bytes (or "
                       "of its whole rows, a multiple of 16 bytes)",
                       R, C, dt.name());
  int64_t stages = ring_bytes(r), tile = R * C * eb;
  // The ring's barriers and the allocations' alignment take a little more.
  if (stages + tile + 1024 > target.shared_memory_per_block) {
    int64_t per_stage = stages / r.stages, fit = (target.shared_memory_per_block - tile - 1024) / per_stage;
    return fmt::format("the output tile's {} bytes and the ring's {} exceed the {} bytes a block has on {} ({})",
                       tile, stages, target.shared_memory_per_block, target.arch,
                       fit >= 2 ? fmt::format("num_stages={} would fit", fit) : std::string("fewer stages do not fit"));
  }
  r.epilogue_store = st;
  r.epilogue_box = box;
  return "";
}

// The schedule each ring gets: TMA where the target has it and every copy of the ring is a
// legal TMA box (the rule select_instructions applies), else cp.async; warp specialization and
// persistence where asked for and possible (else a note says why not).
Kernel pipeline_kernel(const Kernel& k, const Target& target) {
  if (!target.has_cp_async()) return k;  // no asynchronous copies: the loops stay as written
  Analyzer analyzer(k);
  std::vector<Ring> rings = analyzer.run();
  if (rings.empty()) return k;
  // A ring larger than a block's shared memory: say so at the loop (plan_shared_memory would
  // name the tiles only).
  for (Ring& r : rings) {
    int64_t bytes = ring_bytes(r);
    std::vector<std::string> tiles;
    for (const Tensor& t : r.roots)
      tiles.push_back(fmt::format("{} {}", t->name, staged_tile(t, r.stages).type_str()));
    if (bytes > target.shared_memory_per_block)
      throw CompileError(fmt::format("range(num_stages={}) at {}: the ring's stages take {} bytes of shared memory ({}), "
                                     "more than the {} bytes a block has on {}; use fewer stages or smaller tiles",
                                     r.stages, r.loop->loc.str(), bytes, fmt::join(tiles, ", "),
                                     target.shared_memory_per_block, target.arch),
                         r.loop->loc);
  }
  bool any = false;
  for (Ring& r : rings) {
    r.tma = target.has_tma() && std::all_of(r.producers.begin(), r.producers.end(), tma_shaped);
    if (!target.has_tma()) r.note = fmt::format("tma: {} has no TMA", target.arch);
    else if (!r.tma) r.note = "tma: a copy moves its tile across global dims other than the last ones, in order";
    any = any || r.tma;
  }
  auto build = [&] {
    Rebuilder b(k, rings, analyzer.index(), target);
    Kernel out = b.run();
    return std::make_pair(out, b.tma_loads);
  };
  if (any) {
    auto [trial, loads] = build();
    KernelFacts facts(trial);
    for (size_t i = 0; i < rings.size(); ++i)
      for (const Inst& l : loads[i]) {
        if (!rings[i].tma) break;
        std::string why = l->kind() == InstKind::Im2col
                              ? tma_im2col_problem(facts, target, static_cast<const Im2colInst&>(*l))
                              : tma_load_problem(facts, target, static_cast<const CopyInst&>(*l));
        if (!why.empty()) {
          rings[i].tma = false;
          rings[i].note = "tma: " + why;
        }
      }
  }
  // Warp specialization and persistence.
  std::vector<Stmt> top = flatten(k.body);
  bool taken = false;
  for (Ring& r : rings) {
    const LoopPipeline& want = r.loop->pipeline;
    if (!want.warp_specialize && !want.persistent) continue;
    std::vector<std::string> why;
    bool at_top = std::any_of(top.begin(), top.end(), [&](const Stmt& s) { return s.get() == r.loop; });
    bool clustered = k.cluster[0] * k.cluster[1] * k.cluster[2] != 1;
    if (!at_top) why.push_back("the loop is not a top-level statement of the kernel");
    if (taken) why.push_back("another loop of the kernel is warp-specialized or persistent");
    if (clustered) why.push_back("the kernel runs in clusters");
    bool ok = why.empty();
    if (want.persistent && ok) r.persistent = true;
    if (want.warp_specialize && ok) {
      if (!r.tma) why.push_back("warp_specialize: the ring is not TMA loads");
      else if (target.is_cpu()) why.push_back("warp_specialize: the CPU backend runs a block's threads in order");
      else if (k.warps % 4) why.push_back("warp_specialize: the kernel's warps are not whole warp groups");
      else if (k.warps + 4 > 32) why.push_back("warp_specialize: the producer warp group makes more than 32 warps");
      else r.warp_specialized = true;
    }
    if (!ok) why.insert(why.begin(), fmt::format("{} not taken", want.warp_specialize ? "warp_specialize" : "persistent"));
    for (auto& w : why) r.note += (r.note.empty() ? "" : "; ") + w;
    taken = taken || r.persistent || r.warp_specialized;
    std::vector<std::string> sched;
    if (r.warp_specialized) {
      int64_t W = k.warps;
      bool regs = target.has_wgmma() && !target.is_cpu();
      int64_t cregs = std::min<int64_t>(240, (65536 - 128 * 40) / (W * 32) / 8 * 8);
      sched.push_back(regs ? fmt::format("warp-specialized: warps {}-{} load (setmaxnreg 40), warps 0-{} compute "
                                         "(setmaxnreg {})",
                                         W, W + 3, W - 1, cregs)
                           : fmt::format("warp-specialized: warps {}-{} load, warps 0-{} compute", W, W + 3, W - 1));
    }
    if (r.persistent)
      sched.push_back(fmt::format("persistent: {} blocks walk the tiles in groups of 8 along blockIdx.x",
                                  target.multiprocessors));
    if (r.persistent)
      if (std::string why = choose_epilogue(r, top, target); !why.empty())
        r.note += (r.note.empty() ? "" : "; ") + ("epilogue: registers: " + why);
    if (r.epilogue_store) {
      auto shape = r.epilogue_store->src.static_shape();
      sched.push_back(fmt::format("epilogue: registers -> shared [{}, {}, {}] -> {} TMA stores of [{}, {}], during "
                                  "the next tile's loop",
                                  shape[1] / r.epilogue_box, shape[0], r.epilogue_box, shape[1] / r.epilogue_box,
                                  shape[0], r.epilogue_box));
    }
    r.schedule = fmt::format("{}", fmt::join(sched, "; "));
  }
  Kernel out = build().first;
  // Each TMA store of an epilogue must be legal with what the specialization proves (TMA's
  // rules as select_instructions applies them: 16-byte aligned base and row stride, a start
  // >= 0); else the ring keeps the Script's store. The stores are checked at the Script's
  // offsets (blockIdx of the grid as written): the tile loop gives blockIdx the coordinates of
  // one of that grid's blocks, which the facts of its `%` and `/` do not show.
  bool again = false;
  KernelFacts facts(out);
  for (Ring& r : rings) {
    if (!r.epilogue_store) continue;
    for (const auto& c : r.epilogue_copies) {
      std::string why = tma_load_problem(facts, target, *c);
      if (why.empty()) continue;
      r.epilogue_store = nullptr;
      r.note += (r.note.empty() ? "" : "; ") + ("epilogue: registers: the TMA store is " + why);
      if (auto e = r.schedule.find("; epilogue:"); e != std::string::npos) r.schedule.erase(e);
      else if (r.schedule.rfind("epilogue:", 0) == 0) r.schedule.clear();
      again = true;
      break;
    }
  }
  return again ? build().first : out;
}

}  // namespace

Program pipeline_loops(const Program& program, const Target& target) {
  return map_kernels(program, [&](const Kernel& k) { return pipeline_kernel(k, target); });
}

}  // namespace tilus
