// The shared-memory accesses of instructions, as boxes of their root allocations, and
// whether two may touch the same bytes. Internal to src/passes: the async-wait and the
// barrier passes must agree on what overlaps.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tilus/ir/facts.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/program.h"

namespace tilus {

struct SharedAccess {
  const InstNode* inst = nullptr;
  const TensorNode* root = nullptr;
  std::vector<Expr> lo;          // per root dim
  std::vector<int64_t> extent;   // per root dim
  int64_t begin = -1, end = -1;  // bytes in the block's shared memory (-1: not planned yet)
  bool write = false;
  // The thread mapping of a thread-private access (the lowering record says whether it is
  // one), with the box, as a key: "" when it is not thread-private.
  std::string mapping;
  // Writes that complete asynchronously (the record's completion) land when a wait covers
  // them, not when issued. `commits` counts the commit_group calls since the copy was issued.
  bool async = false, awaited = true;
  int commits = 0;
  // async_copy and the TMA methods: the kernel must wait itself; the async-wait pass reports
  // a missing wait.
  bool explicit_wait = false;
  // How an asynchronous access completes, and for an mbarrier transaction the root of its
  // barrier (the barriers of one mbarrier.alloc).
  Completion completion = Completion::Synchronous;
  const TensorNode* barrier = nullptr;
  // The barrier pass's mark of a generic-proxy write that no proxy fence has followed yet (an
  // entry beside the access itself, which a barrier retires while the mark stays): it travels
  // with the rest of a path's state, through both arms of a branch and into the next iteration.
  bool unfenced = false;
};

// The same instruction's access of the same box (offsets structurally equal).
bool same_box(const SharedAccess& a, const SharedAccess& b);

// The mbarrier operand of a TMA load or a split-phase c2d_im2col (not part of the data it
// moves): undefined for anything else.
const Tensor& barrier_operand(const InstNode& inst);

// The root allocation of a shared tensor or view (for matching mbarriers).
const TensorNode* shared_root(const KernelFacts& facts, const InstNode& user, const Tensor& t);

// An instruction whose record says it commits its own cp.async group right after issuing.
inline bool commits_itself(const InstNode& inst) { return inst.lowering.commits_group; }

class SharedAccessMap {
 public:
  explicit SharedAccessMap(const Kernel& k) : facts_(k) {}
  // The accesses of an instruction's shared operands (views and annotations excluded).
  std::vector<SharedAccess> accesses(const InstNode& inst) const;
  // The root of the barrier an instruction arrives on or waits on (its traits' sync_barrier).
  const TensorNode* barrier_root(const InstNode& inst) const { return shared_root(facts_, inst, sync_barrier(inst)); }
  // The root of the barrier a TMA load or split-phase c2d_im2col completes on (null: none).
  const TensorNode* load_barrier_root(const InstNode& inst) const {
    const Tensor& b = barrier_operand(inst);
    return b.defined() ? shared_root(facts_, inst, b) : nullptr;
  }

 private:
  KernelFacts facts_;
};

// True unless the two accesses provably touch different bytes: different planned byte
// ranges, or, within one root, boxes that are disjoint in some dim (offsets that differ by
// a constant beyond the extent, or (x + c1) % m and (x + c2) % m with c1 != c2 mod m).
bool may_overlap(const SharedAccess& a, const SharedAccess& b);

// The access as the next iteration of a loop over `var` (step `step`) sees it: offsets in
// terms of the next iteration's var. With no var (a while loop), offsets shifted by an
// unknown amount.
SharedAccess previous_iteration(const SharedAccess& a, const Var* var, const Expr& step);

// A loop whose body runs at most once (a constant trip count of 0 or 1, such as range(stages - 1)
// with two stages): no iteration meets the one before.
bool at_most_one_trip(const ForStmtNode& loop);

// The fixpoint both passes run over a loop body. `run(entry)` analyses the body once from
// the accesses pending at its start (rewriting it, which may add instructions that
// `added()` counts) and returns what is pending at its end. Round 0 starts from `entry`;
// each later round from the previous round's end seen from the next iteration (`shift`),
// until a round adds nothing and leaves no more pending than the round before (an access
// that some path carries past an iteration, e.g. one a barrier inside an `if` retires only
// when the branch is taken, comes back one iteration older each round: a ring of S stages
// meets it S - 1 rounds later); if that does not happen within kRounds rounds, one last
// round starts from every entry seen at once. Returns the merge of every round's end.
template <class Run, class Shift, class Merge, class Added>
std::vector<SharedAccess> loop_fixpoint(std::vector<SharedAccess> entry, Run run, Shift shift, Merge merge,
                                        Added added) {
  constexpr int kRounds = 12;
  std::vector<SharedAccess> exit, all = entry;
  bool stable = false;
  size_t last = 0;
  for (int round = 0; round < kRounds && !stable; ++round) {
    int before = added();
    std::vector<SharedAccess> end = run(entry);
    exit = merge(exit, end);
    stable = round > 0 && added() == before && end.size() <= last;
    last = end.size();
    std::vector<SharedAccess> shifted;
    for (auto& a : end) shifted.push_back(shift(a));
    entry = merge({}, shifted);
    all = merge(all, entry);
  }
  if (!stable) exit = merge(exit, run(all));
  return exit;
}

}  // namespace tilus
