#include "tilus/passes/order_thread_groups.h"

#include <algorithm>

#include "mutate_kernels.h"
#include "tilus/ir/functor.h"

namespace tilus {

namespace {

bool issues_wgmma(const Stmt& s) { return contains_inst(s, InstKind::WgmmaMma); }

const ThreadGroupStmtNode* as_group(const Stmt& s) {
  return s && s->kind == StmtKind::ThreadGroup ? static_cast<const ThreadGroupStmtNode*>(s.get()) : nullptr;
}

class Orderer : public StmtMutator {
 protected:
  Stmt mutate_seq(const Stmt& s, const SeqStmtNode& n) override {
    Stmt inner = StmtMutator::mutate_seq(s, n);
    if (!inner || inner->kind != StmtKind::Seq) return inner;
    std::vector<Stmt> stmts = static_cast<const SeqStmtNode&>(*inner).stmts;
    bool changed = false;
    for (size_t i = 0; i < stmts.size();) {
      // The run of adjacent groups from i whose threads are pairwise disjoint.
      size_t j = i;
      while (j < stmts.size() && as_group(stmts[j])) {
        const ThreadGroupStmtNode* g = as_group(stmts[j]);
        bool disjoint = true;
        for (size_t q = i; q < j && disjoint; ++q) {
          const ThreadGroupStmtNode* h = as_group(stmts[q]);
          disjoint = g->thread_begin + g->num_threads <= h->thread_begin ||
                     h->thread_begin + h->num_threads <= g->thread_begin;
        }
        if (!disjoint) break;
        ++j;
      }
      if (j - i >= 2) {
        auto first = stmts.begin() + std::ptrdiff_t(i), last = stmts.begin() + std::ptrdiff_t(j);
        if (!std::is_partitioned(first, last, issues_wgmma)) {
          std::stable_partition(first, last, issues_wgmma);
          changed = true;
        }
      }
      i = std::max(j, i + 1);
    }
    if (!changed) return inner;
    return std::make_shared<SeqStmtNode>(std::move(stmts), n.loc);
  }
};

}  // namespace

Program order_thread_groups(const Program& program, const Target& target) {
  if (target.is_cpu()) return program;
  return mutate_kernels<Orderer>(program);
}

}  // namespace tilus
