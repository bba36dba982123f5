#include "tilus/passes/plan_shared_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "tilus/ir/functor.h"

namespace tilus {

namespace {

// The alignment of one tensor's offset. 128 bytes serves ldmatrix, cp.async, TMA boxes and
// wgmma operands (DESIGN 6.8); a swizzled tensor starts on 1024 bytes, so that its swizzle,
// applied to offsets from its start, is TMA's, applied to shared addresses (the period of
// the 128-byte pattern).
int64_t alignment_of(const AllocateSharedInst& alloc, const Target& /*target*/) {
  const SharedLayout& l = alloc.out->shared_layout;
  return l.defined() && !l.swizzle().none() ? 1024 : 128;
}

// Bytes a shared tensor occupies: its layout's storage, densely bit-packed for sub-byte
// types (33 int4 elements take 17 bytes).
int64_t bytes_of(const Tensor& t) {
  int64_t elements = t->shared_layout.defined() ? t->shared_layout.storage_elements() : t.num_elements();
  return t.dtype().storage_bytes(elements);
}

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

struct Allocation {
  const AllocateSharedInst* inst = nullptr;
  Tensor tensor;
  int64_t size = 0;
  int64_t alignment = 1;
  // The live range, inclusive, in the positions Liveness gives statements.
  int64_t begin = 0, end = 0;
  int64_t offset = -1;

  bool live_with(const Allocation& o) const { return begin <= o.end && o.begin <= end; }
  bool live_at(int64_t pos) const { return begin <= pos && pos <= end; }
};

// Numbers the instructions and loop boundaries of a body in program order and finds the
// live range of every allocation.
class Liveness : public StmtVisitor {
 public:
  explicit Liveness(const Target& target) : target_(target) {}

  std::vector<Allocation> run(const Kernel& k) {
    visit(k.body);
    // A use inside loops that the allocation is outside of keeps the tensor live to the end
    // of the outermost such loop: the next iteration uses it again. Loops nest, so walking
    // outwards the loops not holding the allocation come first, then those holding it.
    for (auto& u : uses_) {
      Allocation& a = allocs_[u.alloc];
      int64_t end = u.pos;
      for (int l = u.loop; l >= 0; l = loops_[l].parent) {
        const Loop& loop = loops_[l];
        if (loop.begin < a.begin && a.begin < loop.end) break;
        end = loop.end;
      }
      a.end = std::max(a.end, end);
    }
    // Shared operands of tcgen05.mma / cp are read after the instruction, until a wait on the
    // mbarrier of a later tcgen05.commit, which may be anywhere (another thread group's loop, a
    // flush after the loop): their bytes are not reused.
    for (int a : async_read_) allocs_[size_t(a)].end = std::max(allocs_[size_t(a)].end, pos_);
    // Sibling thread groups run at once on the GPU (a producer warp beside its consumers): what
    // one of them uses is live across all of them, whatever their order in the text.
    for (auto [a, r] : concurrent_uses_) {
      allocs_[size_t(a)].begin = std::min(allocs_[size_t(a)].begin, runs_[size_t(r)].first);
      allocs_[size_t(a)].end = std::max(allocs_[size_t(a)].end, runs_[size_t(r)].second);
    }
    return std::move(allocs_);
  }

 protected:
  void visit_seq(const SeqStmtNode& s) override {
    const auto& stmts = s.stmts;
    for (size_t i = 0; i < stmts.size();) {
      size_t j = i;
      while (j < stmts.size() && stmts[j] && stmts[j]->kind == StmtKind::ThreadGroup) ++j;
      if (j - i < 2) {
        if (stmts[i]) visit(stmts[i]);
        i = std::max(i + 1, j);
        continue;
      }
      int run = int(runs_.size());
      runs_.push_back({pos_++, 0});
      if (outer_run_ < 0) outer_run_ = run;
      for (size_t k = i; k < j; ++k) visit(stmts[k]);
      runs_[size_t(run)].second = pos_++;
      if (outer_run_ == run) outer_run_ = -1;
      i = j;
    }
  }
  void visit_for(const ForStmtNode& s) override { loop([&] { StmtVisitor::visit_for(s); }); }
  void visit_while(const WhileStmtNode& s) override { loop([&] { StmtVisitor::visit_while(s); }); }

  void visit_inst(const InstNode& inst) override {
    int64_t pos = pos_++;
    bool async_read = inst.lowering.op == MachineOp::Tcgen05Mma || inst.lowering.op == MachineOp::Tcgen05Cp;
    for (auto& [t, access] : inst.operands()) {
      if (!t.defined()) continue;
      auto it = root_.find(t.get());
      if (it == root_.end()) continue;
      uses_.push_back(Use{it->second, pos, current_loop_});
      if (async_read) async_read_.push_back(it->second);
      if (outer_run_ >= 0) concurrent_uses_.push_back({it->second, outer_run_});
    }
    if (inst.kind() == InstKind::AllocateShared) {
      auto& a = static_cast<const AllocateSharedInst&>(inst);
      Allocation r;
      r.inst = &a;
      r.tensor = a.out;
      r.size = bytes_of(a.out);
      r.alignment = alignment_of(a, target_);
      r.begin = r.end = pos;
      root_[a.out.get()] = int(allocs_.size());
      if (outer_run_ >= 0) concurrent_uses_.push_back({int(allocs_.size()), outer_run_});
      allocs_.push_back(std::move(r));
    } else if (inst.kind() == InstKind::SliceShared || inst.kind() == InstKind::ReshapeShared) {
      // A view lives in its base's bytes: its uses are uses of the base.
      Tensor src = inst.kind() == InstKind::SliceShared ? static_cast<const SliceSharedInst&>(inst).src
                                                        : static_cast<const ReshapeSharedInst&>(inst).src;
      Tensor out = inst.output();
      if (!src.defined() || !out.defined()) return;
      auto it = root_.find(src.get());
      if (it != root_.end()) root_[out.get()] = it->second;
    }
  }

 private:
  struct Loop {
    int64_t begin = 0, end = 0;
    int parent = -1;
  };
  struct Use {
    int alloc;
    int64_t pos;
    int loop;  // innermost enclosing loop, -1 for none
  };

  template <class F>
  void loop(F body) {
    int id = int(loops_.size());
    loops_.push_back(Loop{pos_++, 0, current_loop_});
    current_loop_ = id;
    body();
    current_loop_ = loops_[id].parent;
    loops_[id].end = pos_++;
  }

  const Target& target_;
  int64_t pos_ = 0;
  int current_loop_ = -1;
  std::vector<Loop> loops_;
  std::vector<Use> uses_;
  std::vector<Allocation> allocs_;
  std::unordered_map<const TensorNode*, int> root_;  // tensor or view -> allocation
  std::vector<int> async_read_;                       // allocations tcgen05 reads asynchronously
  // Runs of sibling thread groups (their first and last positions), the outermost one being
  // visited, and the allocations used (or made) inside one.
  std::vector<std::pair<int64_t, int64_t>> runs_;
  int outer_run_ = -1;
  std::vector<std::pair<int, int>> concurrent_uses_;
};

// Greedy placement: largest first (stable, so ties keep program order), each at the lowest
// aligned offset that overlaps no placed tensor it is live with. Returns the total.
int64_t place(std::vector<Allocation>& allocs) {
  std::vector<size_t> order(allocs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return allocs[a].size > allocs[b].size; });
  std::vector<size_t> placed;
  int64_t total = 0;
  for (size_t i : order) {
    Allocation& a = allocs[i];
    std::vector<const Allocation*> conflicts;
    for (size_t j : placed)
      if (allocs[j].live_with(a)) conflicts.push_back(&allocs[j]);
    std::sort(conflicts.begin(), conflicts.end(), [](auto* x, auto* y) { return x->offset < y->offset; });
    // Conflicts in increasing offset: the candidate only moves up, and once it ends before a
    // conflict's start it ends before every later one too.
    int64_t offset = 0;
    for (auto* c : conflicts) {
      if (offset + a.size <= c->offset) break;
      if (offset < c->offset + c->size) offset = align_up(c->offset + c->size, a.alignment);
    }
    a.offset = offset;
    total = std::max(total, offset + a.size);
    placed.push_back(i);
  }
  return total;
}

[[noreturn]] void over_budget(const Kernel& k, const Target& target, const std::vector<Allocation>& allocs,
                              int64_t total) {
  // The first allocation, in program order, at which the tensors live there reach past the
  // limit is where the plan fails; every allocation is visited at its own position, so the
  // one that ends highest is found at the latest.
  std::vector<const Allocation*> by_begin;
  for (auto& a : allocs) by_begin.push_back(&a);
  std::sort(by_begin.begin(), by_begin.end(), [](auto* x, auto* y) { return x->begin < y->begin; });
  for (auto* at : by_begin) {
    std::vector<const Allocation*> live;
    int64_t footprint = 0;
    for (auto& a : allocs) {
      if (!a.live_at(at->begin)) continue;
      live.push_back(&a);
      footprint = std::max(footprint, a.offset + a.size);
    }
    if (footprint <= target.shared_memory_per_block) continue;
    std::sort(live.begin(), live.end(), [](auto* x, auto* y) { return x->offset < y->offset; });
    std::string list;
    for (auto* a : live)
      list += fmt::format("\n  {} ({}): {} bytes at offset {}, allocated at {}", a->tensor->name, a->tensor.type_str(),
                          a->size, a->offset, a->inst->loc.str());
    throw CompileError(
        fmt::format("shared_tensor: kernel {} needs {} bytes of shared memory, more than the limit of {} bytes of one "
                    "block on {}; the tensors live at this allocation span {} bytes:{}",
                    k.name, total, target.shared_memory_per_block, target.arch, footprint, list),
        at->inst->loc.valid() ? at->inst->loc : k.loc);
  }
  throw InternalError(fmt::format("plan_shared_memory: kernel {} exceeds the limit at no allocation", k.name), k.loc);
}

// Writes the planned offsets into the allocations.
class OffsetWriter : public StmtMutator {
 public:
  std::unordered_map<const InstNode*, int64_t> offsets;

 protected:
  Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
    auto it = offsets.find(inst.get());
    if (it == offsets.end()) return s;
    if (auto t = inst_as<Tcgen05AllocInst>(inst)) {
      if (t->slot_offset == it->second) return s;
      auto copy = std::make_shared<Tcgen05AllocInst>(*t);
      copy->slot_offset = it->second;
      return make_inst_stmt(copy);
    }
    auto a = inst_as<AllocateSharedInst>(inst);
    if (a->offset == it->second) return s;
    auto copy = std::make_shared<AllocateSharedInst>(*a);
    copy->offset = it->second;
    return make_inst_stmt(copy);
  }
};

}  // namespace

Program plan_shared_memory(const Program& program, const Target& target) {
  return map_kernels(program, [&](const Kernel& k) {
    std::vector<Allocation> allocs = Liveness(target).run(k);
    int64_t total = place(allocs);
    if (total > target.shared_memory_per_block) over_budget(k, target, allocs, total);
    // The mbarriers of synchronous TMA copies, after everything, live throughout.
    int64_t barrier_offset = -1;
    if (k.copy_barriers > 0) {
      barrier_offset = align_up(total, 8);
      total = barrier_offset + 8 * k.copy_barriers;
      if (total > target.shared_memory_per_block)
        throw CompileError(fmt::format("copy: kernel {} needs {} bytes of shared memory with the {} mbarrier(s) of its "
                                       "TMA copies, more than the limit of {} bytes of one block on {}; pass "
                                       "disable_tma=True to the copies",
                                       k.name, total, k.copy_barriers, target.shared_memory_per_block, target.arch),
                           k.loc);
    }
    OffsetWriter writer;
    for (auto& a : allocs) writer.offsets[a.inst] = a.offset;
    // The slots where tcgen05.alloc writes the tensor-memory addresses, after those, live
    // throughout (16 bytes each); and the tensor memory they take, against the target's.
    struct Tmem : StmtVisitor {
      std::vector<const Tcgen05AllocInst*> allocs;
      void visit_inst(const InstNode& i) override {
        if (auto* t = dynamic_cast<const Tcgen05AllocInst*>(&i)) allocs.push_back(t);
      }
    } tmem;
    tmem.visit(k.body);
    int64_t columns = 0;
    for (const Tcgen05AllocInst* t : tmem.allocs) {
      int64_t slot = align_up(total, 16);
      total = slot + 16;
      writer.offsets[t] = slot;
      columns += t->columns();
      if (target.tensor_memory_columns > 0 && columns > target.tensor_memory_columns)
        throw CompileError(fmt::format("tcgen05.alloc: kernel {} allocates {} columns of tensor memory with this "
                                       "allocation ({}), more than the {} of a block on {}",
                                       k.name, columns, t->out.type_str(), target.tensor_memory_columns, target.arch),
                           t->loc);
    }
    if (!tmem.allocs.empty() && total > target.shared_memory_per_block)
      throw CompileError(fmt::format("tcgen05.alloc: kernel {} needs {} bytes of shared memory with the slots of its "
                                     "tensor-memory addresses, more than the limit of {} bytes of one block on {}",
                                     k.name, total, target.shared_memory_per_block, target.arch),
                         tmem.allocs[0]->loc);
    Kernel r = writer.mutate(k);
    r.shared_memory_bytes = total;
    r.copy_barrier_offset = barrier_offset;
    return r;
  });
}

}  // namespace tilus
